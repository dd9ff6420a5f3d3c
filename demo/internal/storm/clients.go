package storm

import (
	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"

	regcache "github.com/regcache/cache"
)

// The clients of a plain run.
const (
	NoCache  = "no cache"
	GoMicro  = "go-micro cache"
	RegCache = "regcache"
)

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
}

// DefaultClients are the clients of `make demo`: the registry itself,
// go-micro's registry/cache and regcache, the caches with the same TTL.
func DefaultClients() []Client {
	return []Client{
		{Name: NoCache, New: func(reg registry.Registry, _ Config) (registry.Registry, func()) {
			return reg, func() {}
		}},
		{Name: GoMicro, Cold: true, New: func(reg registry.Registry, cfg Config) (registry.Registry, func()) {
			c := gmcache.New(reg, gmcache.WithTTL(cfg.TTL()))
			return oneAtATime(c), c.Stop
		}},
		{Name: RegCache, Cold: true, New: func(reg registry.Registry, cfg Config) (registry.Registry, func()) {
			c := regcache.New(reg, RegcacheOptions(cfg)...)
			return c, c.Stop
		}},
	}
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
