// Package nats is go-micro v4's NATS registry with a watcher that tells
// when it may have missed an announcement.
//
// The registry (github.com/go-micro/plugins/v4/registry/nats, "the
// plugin" below) keeps no store: registries announce what they register
// and deregister on a NATS subject, and answer each other's queries. Its
// Watch is a plain subscription to that subject. When the connection to
// NATS is lost, nats.go re-establishes it by itself, subscription
// included, and says nothing to the plugin: what was announced meanwhile
// is lost, and the plugin's Next never fails, so a cache above it serves
// what it held until its TTL. This package keeps the plugin for everything
// but Watch, and watches on the plugin's own connection, which it follows
// through handlers it adds to the plugin's nats.Options: Next fails when
// the connection is lost, when it is re-established, when it is closed and
// when announcements were dropped, so that a cache above it resyncs at
// once; and Watch, while nats.go is re-establishing the connection, waits
// for it, so that the cache's redial returns when NATS is back.
//
// Importing the package makes it the registry that MICRO_REGISTRY=nats (or
// --registry=nats) chooses.
package nats

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/util/cmd"
)

// init makes this package the registry that go-micro's command line
// chooses for "nats", in place of the plugin's, which a package that this
// one imports has set before.
func init() {
	cmd.DefaultRegistries["nats"] = NewRegistry
}

// NewRegistry returns the NATS registry: the plugin's, made with the same
// options, with this package's Watch.
func NewRegistry(opts ...registry.Option) registry.Registry {
	r := &natsRegistry{link: newLink(), caller: nats.GetDefaultOptions()}
	r.plugin = newPlugin(r.hooked(opts)...)
	return r
}

// natsRegistry is the plugin's registry with another Watch.
type natsRegistry struct {
	plugin registry.Registry
	// link follows the plugin's connection.
	link *link

	mu sync.Mutex
	// caller is the latest nats.Options the caller gave (nats.go's
	// defaults, the plugin's, until then).
	caller nats.Options
}

var _ registry.Registry = (*natsRegistry)(nil)

// Init passes through to the plugin, with the link's handlers in its
// nats.Options as in NewRegistry. The plugin keeps the connection it has
// made, whatever the options.
func (r *natsRegistry) Init(opts ...registry.Option) error { return r.plugin.Init(r.hooked(opts)...) }

// Options passes through to the plugin.
func (r *natsRegistry) Options() registry.Options { return r.plugin.Options() }

// Register passes through to the plugin.
func (r *natsRegistry) Register(s *registry.Service, opts ...registry.RegisterOption) error {
	return r.plugin.Register(s, opts...)
}

// Deregister passes through to the plugin.
func (r *natsRegistry) Deregister(s *registry.Service, opts ...registry.DeregisterOption) error {
	return r.plugin.Deregister(s, opts...)
}

// GetService passes through to the plugin.
func (r *natsRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	return r.plugin.GetService(name, opts...)
}

// ListServices passes through to the plugin.
func (r *natsRegistry) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	return r.plugin.ListServices(opts...)
}

// String is the plugin's name, "nats", which go-micro's command line
// compares with the registry it is asked for.
func (r *natsRegistry) String() string { return r.plugin.String() }

// hooked returns opts with one more option, last: the plugin's option of
// nats.Options, with the caller's latest nats.Options and the link's
// handlers (link.hook). The caller's are those opts give, through this
// package's Options or the plugin's own, found by applying opts to
// options of their own; else those given before. Where the plugin's keys
// are not known, opts are the plugin's as they are, and Watch fails.
func (r *natsRegistry) hooked(opts []registry.Option) []registry.Option {
	k, err := pluginKeys()
	if err != nil {
		return opts
	}
	given := registry.Options{Context: context.Background()}
	for _, o := range opts {
		o(&given)
	}
	r.mu.Lock()
	if n, ok := given.Context.Value(k.nats).(nats.Options); ok {
		r.caller = n
	}
	caller := r.caller
	r.mu.Unlock()
	return append(opts[:len(opts):len(opts)], natsOptions(r.link.hook(caller)))
}
