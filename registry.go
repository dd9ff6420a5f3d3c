package cache

import (
	"context"
	"errors"
	"fmt"

	"go-micro.dev/v4/registry"
)

// The calls the cache makes to the wrapped registry, each turning a panic
// into an error, and the rest of registry.Registry, which passes through.

// fetch asks the registry once. A panic in the registry becomes an error.
func (c *cache) fetch(name string, ctx context.Context) (svcs []*registry.Service, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("registry %s panicked: %v", c.reg.String(), r)
		}
	}()
	if ctx == nil {
		ctx = context.Background()
	}
	return c.reg.GetService(name, registry.GetContext(ctx))
}

// list asks the registry for every service. A panic becomes an error.
func (c *cache) list() (svcs []*registry.Service, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("registry %s panicked in ListServices: %v", c.reg.String(), r)
		}
	}()
	ctx, cancel := context.WithTimeout(c.ctx, refreshTimeout)
	defer cancel()
	return c.reg.ListServices(registry.ListContext(ctx))
}

// callWatch calls the registry's Watch with opts and ctx. A panic in it,
// and a nil watcher, are errors.
func (c *cache) callWatch(ctx context.Context, opts ...registry.WatchOption) (w registry.Watcher, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("registry %s panicked in Watch: %v", c.reg.String(), r)
		}
	}()
	w, err = c.reg.Watch(append(opts, registry.WatchContext(ctx))...)
	if err == nil && w == nil {
		err = errors.New("registry returned a nil watcher")
	}
	return w, err
}

// next returns w's next result. A panic in Next is an error, and so are
// maxEmptyNexts results in a row with neither an event nor an error: a
// watcher that would spin without blocking is reconnected with backoff
// rather than left to burn a core. empty counts those results.
func (c *cache) next(w registry.Watcher, empty *int) (res *registry.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("registry %s panicked in Next: %v", c.reg.String(), r)
		}
	}()
	res, err = w.Next()
	if err != nil || res != nil {
		*empty = 0
		return res, err
	}
	if *empty++; *empty == maxEmptyNexts {
		return nil, errors.New("watcher keeps returning neither an event nor an error")
	}
	return nil, nil
}

// stopStream stops a watcher; a panic in it is recovered.
func stopStream(w registry.Watcher) {
	defer func() { _ = recover() }()
	w.Stop()
}

// registryName formats as the registry's String when a log line is
// written, outside the cache's lock, so that a line made under the lock
// calls nothing of the registry's there. A panic in String gives "?".
type registryName struct{ r registry.Registry }

func (n registryName) String() (name string) {
	defer func() {
		if recover() != nil {
			name = "?"
		}
	}()
	return n.r.String()
}

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
