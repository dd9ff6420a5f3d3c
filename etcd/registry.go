// Package etcd is go-micro v4's etcd registry with a watcher that loses no
// event.
//
// The registry (github.com/go-micro/plugins/v4/registry/etcd, "the
// plugin" below) returns only the first event of each etcd watch
// response, so the other keys of a transaction, of a catch-up or of a
// batch of lease expiries reach a cache only at its next refresh, up to a
// whole TTL late. It also panics on a delete without its previous value,
// and it hides an etcd outage: etcd's client reconnects by itself, so Next
// just blocks. This package keeps the plugin for everything but Watch, and
// watches through an etcd client of its own, configured as the plugin's:
// Next delivers every event of every response, in order, and fails when
// the watch can no longer be trusted (a compaction, a cancelled watch, a
// connection to etcd that is lost), so that a cache above it resyncs at
// once.
//
// Importing the package makes it the registry that MICRO_REGISTRY=etcd (or
// --registry=etcd) chooses.
package etcd

import (
	"context"
	"os"
	"sync/atomic"

	plugin "github.com/go-micro/plugins/v4/registry/etcd"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/util/cmd"
	"go.uber.org/zap"
)

// init makes this package the registry that go-micro's command line
// chooses for "etcd", in place of the plugin's, which a package that this
// one imports has set before.
func init() {
	cmd.DefaultRegistries["etcd"] = NewRegistry
}

// NewRegistry returns the etcd registry: the plugin's, made with the same
// options and environment variables (MICRO_REGISTRY_ADDRESS,
// ETCD_USERNAME, ETCD_PASSWORD), with this package's Watch.
func NewRegistry(opts ...registry.Option) registry.Registry {
	// The plugin adds the credentials from the environment with its own
	// Auth, whose value this package cannot read; adding them with this
	// package's Auth too lets the watchers' clients use them.
	if username, password := os.Getenv("ETCD_USERNAME"), os.Getenv("ETCD_PASSWORD"); username != "" && password != "" {
		opts = append(opts, Auth(username, password))
	}
	return &etcdRegistry{plugin: newPlugin(opts...)}
}

// etcdRegistry is the plugin's registry with another Watch.
type etcdRegistry struct {
	plugin registry.Registry
	// toldFallback is set once the log has been told that etcd does not
	// serve the scoped stream (Watch).
	toldFallback atomic.Bool
}

var _ registry.Registry = (*etcdRegistry)(nil)

// Init passes through to the plugin, which makes a new etcd client.
func (r *etcdRegistry) Init(opts ...registry.Option) error { return r.plugin.Init(opts...) }

// Options passes through to the plugin.
func (r *etcdRegistry) Options() registry.Options { return r.plugin.Options() }

// Register passes through to the plugin.
func (r *etcdRegistry) Register(s *registry.Service, opts ...registry.RegisterOption) error {
	return r.plugin.Register(s, opts...)
}

// Deregister passes through to the plugin.
func (r *etcdRegistry) Deregister(s *registry.Service, opts ...registry.DeregisterOption) error {
	return r.plugin.Deregister(s, opts...)
}

// GetService passes through to the plugin.
func (r *etcdRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	return r.plugin.GetService(name, opts...)
}

// ListServices passes through to the plugin.
func (r *etcdRegistry) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	return r.plugin.ListServices(opts...)
}

// String is the plugin's name, "etcd", which go-micro's command line
// compares with the registry it is asked for.
func (r *etcdRegistry) String() string { return r.plugin.String() }

// authKey and logConfigKey hold, in registry.Options.Context, what Auth
// and LogConfig set, for a watcher that builds a client of its own: the
// plugin keeps its copies under keys of its own that only it can read.
type (
	authKey      struct{}
	logConfigKey struct{}
)

type credentials struct{ username, password string }

// Auth is the plugin's Auth: etcd's user name and password. It is here so
// that code moving from the plugin to this package changes only its
// import path.
func Auth(username, password string) registry.Option {
	set := plugin.Auth(username, password)
	return func(o *registry.Options) {
		set(o)
		o.Context = context.WithValue(o.Context, authKey{}, credentials{username, password})
	}
}

// LogConfig is the plugin's LogConfig: the configuration of the etcd
// client's logger. It is here for the same reason as Auth.
func LogConfig(config *zap.Config) registry.Option {
	set := plugin.LogConfig(config)
	return func(o *registry.Options) {
		set(o)
		o.Context = context.WithValue(o.Context, logConfigKey{}, config)
	}
}
