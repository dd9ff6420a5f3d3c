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
// but Watch, and watches on a connection of its own, made as the plugin
// makes its: Next fails when the connection is lost, when it is
// re-established, when it is closed and when announcements were dropped,
// so that a cache above it resyncs at once; and Watch, while nats.go is
// re-establishing the connection, waits for it, so that the cache's redial
// returns when NATS is back.
//
// Importing the package makes it the registry that MICRO_REGISTRY=nats (or
// --registry=nats) chooses.
package nats

import (
	"sync"

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
	return &natsRegistry{plugin: newPlugin(opts...)}
}

// natsRegistry is the plugin's registry with another Watch.
type natsRegistry struct {
	plugin registry.Registry

	mu sync.Mutex
	// link follows the watchers' connection, made by the first Watch
	// that succeeds in connecting and kept, as the plugin keeps its own.
	link *link
}

var _ registry.Registry = (*natsRegistry)(nil)

// Init passes through to the plugin. The plugin keeps the connection it
// has made, whatever the options.
func (r *natsRegistry) Init(opts ...registry.Option) error { return r.plugin.Init(opts...) }

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

// connection returns the watchers' link, making the connection on first
// use as the plugin makes its own on its first call: a failure to connect
// is returned, and the next Watch tries again.
func (r *natsRegistry) connection(k optionKeys) (*link, string, error) {
	nopts, topic := connOptions(r.plugin.Options(), k)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.link == nil {
		l, err := dial(nopts)
		if err != nil {
			return nil, "", err
		}
		r.link = l
	}
	return r.link, topic, nil
}
