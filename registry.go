package cache

import (
	"go-micro.dev/v4/registry"
)

// What passes through to the wrapped registry. The calls the cache makes
// of its own go through package guard, which turns a panic into an error.

// Init passes through to the wrapped registry.
func (c *cache) Init(opts ...registry.Option) error { return c.reg.Init(opts...) }

// Options passes through to the wrapped registry.
func (c *cache) Options() registry.Options { return c.reg.Options() }

// Register passes through to the wrapped registry.
func (c *cache) Register(s *registry.Service, opts ...registry.RegisterOption) error {
	return c.reg.Register(s, opts...)
}

// Deregister passes through to the wrapped registry.
func (c *cache) Deregister(s *registry.Service, opts ...registry.DeregisterOption) error {
	return c.reg.Deregister(s, opts...)
}

// ListServices passes through to the wrapped registry.
func (c *cache) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	return c.reg.ListServices(opts...)
}

// Watch passes through to the wrapped registry.
func (c *cache) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	return c.reg.Watch(opts...)
}

// String names the cache, as go-micro's does.
func (c *cache) String() string { return "regcache" }
