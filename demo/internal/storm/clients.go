package storm

import (
	"go-micro.dev/v4/registry"

	regcache "github.com/regcache/cache"
)

// The clients of a plain run.
const (
	NoCache  = "no cache"
	RegCache = "regcache"
)

// GoMicro names go-micro's registry/cache of the go-micro the demo is
// built on, with the version that go.mod requires (goMicroVersion, which
// TestGoMicroCachesNameTheVersionsOfGoMod holds to it).
const GoMicro = "go-micro " + goMicroVersion + " cache"

// Client is one way of looking services up, whose callers the demo
// measures. Every instance of a client gets a connection of its own to the
// registry, with its own injected latency and capacity.
type Client struct {
	// Name names the client in the tables.
	Name string
	// Cold also starts a second instance of the client with the outage,
	// with nothing cached.
	Cold bool
	// New builds an instance over its connection to the registry, reg: what
	// the callers call, and how to stop it.
	New func(reg registry.Registry, cfg Config) (lookup registry.Registry, stop func())
	// Describe says, for the report, how an instance is built; Note, for
	// the picture, what the client is. Both may be empty.
	Describe func(cfg Config) string
	Note     string
}

// DefaultClients are the clients of `make demo`: the registry itself,
// go-micro's registry/caches (goMicroClients), and regcache, the caches
// with the same TTL and retry interval.
func DefaultClients() []Client {
	clients := []Client{
		{Name: NoCache, Note: "every lookup is a registry call", New: func(reg registry.Registry, _ Config) (registry.Registry, func()) {
			return reg, func() {}
		}, Describe: func(Config) string { return "the registry itself" }},
	}
	clients = append(clients, goMicroClients()...)
	return append(clients, Client{Name: RegCache, Cold: true, Note: "github.com/regcache/cache", New: func(reg registry.Registry, cfg Config) (registry.Registry, func()) {
		c := regcache.New(reg, RegcacheOptions(cfg)...)
		return c, c.Stop
	}})
}

// RegcacheOptions are the options the demo gives regcache: the TTL of
// go-micro's cache, and the retry interval scaled with the timeline
// (the library's default at the default duration). Everything else is at
// its default.
func RegcacheOptions(cfg Config) []regcache.Option {
	opts := []regcache.Option{regcache.WithTTL(cfg.TTL())}
	if cfg.RetryInterval() != regcache.DefaultMinimumRetryInterval {
		opts = append(opts, regcache.WithMinimumRetryInterval(cfg.RetryInterval()))
	}
	return opts
}

// Key names a group of callers: a client, and whether its instance was
// started with the outage (cold) or has run since the beginning (warm).
type Key struct {
	Client string
	Cold   bool
}

func (k Key) String() string {
	if k.Cold {
		return k.Client + ", cold"
	}
	return k.Client
}
