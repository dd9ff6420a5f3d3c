package storm

import (
	"context"
	"fmt"
	"io"

	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"
	logger5 "go-micro.dev/v5/logger"
	registry5 "go-micro.dev/v5/registry"
	gmcache5 "go-micro.dev/v5/registry/cache"
)

// This file is the v4 demo's alone (internal/gen5 skips it): the v5 demo
// has a gmcaches.go of its own.

// goMicroVersion is the version of go-micro v4 that go.mod requires, which
// GoMicro names.
const goMicroVersion = "v4.11.0"

// GoMicro5 names go-micro v5's registry/cache, with the version that
// go.mod requires.
const GoMicro5 = "go-micro v5.30.0 cache"

// goMicroClients are go-micro's registry/caches: v4's, which the demo is
// built on, and v5's, which throttles each service's retries
// (MinimumRetryInterval). v5's instances read the demo's go-micro v4 registry
// through an adapter (registry5Of) and answer the callers through another
// (registry4Of): the registries' types are alike field for field, and
// both adapters copy a service as they pass it on. Each cache has the
// demo's TTL; v5's has the demo's retry interval too (v4's has none).
func goMicroClients() []Client {
	return []Client{
		{Name: GoMicro, Cold: true, Note: "go-micro.dev/v4/registry/cache", New: func(reg registry.Registry, cfg Config) (registry.Registry, func()) {
			c := gmcache.New(reg, gmcache.WithTTL(cfg.TTL()))
			return oneAtATime(c), c.Stop
		}, Describe: func(cfg Config) string {
			return fmt.Sprintf("go-micro.dev/v4/registry/cache: cache.New(reg, cache.WithTTL(%v))", cfg.TTL())
		}},
		{Name: GoMicro5, Cold: true, Note: "go-micro.dev/v5/registry/cache", New: func(reg registry.Registry, cfg Config) (registry.Registry, func()) {
			c := gmcache5.New(registry5Of(reg), gmcache5.WithTTL(cfg.TTL()), gmcache5.WithMinimumRetryInterval(cfg.RetryInterval()),
				gmcache5.WithLogger(logger5.NewLogger(logger5.WithLevel(logger5.FatalLevel), logger5.WithOutput(io.Discard))))
			return oneAtATime(registry4Of(c)), c.Stop
		}, Describe: func(cfg Config) string {
			return fmt.Sprintf("go-micro.dev/v5/registry/cache: cache.New(reg, cache.WithTTL(%v), cache.WithMinimumRetryInterval(%v)), over the demo's v4 registry through an adapter that copies each service from one major version's types to the other's",
				cfg.TTL(), cfg.RetryInterval())
		}},
	}
}

// v4to5 is a go-micro v4 registry seen as a v5 one: what go-micro v5's
// cache calls.
type v4to5 struct{ r registry.Registry }

func registry5Of(r registry.Registry) registry5.Registry { return v4to5{r} }

func (a v4to5) Init(...registry5.Option) error { return nil }
func (a v4to5) Options() registry5.Options     { return registry5.Options{Context: context.Background()} }
func (a v4to5) String() string                 { return a.r.String() }

func (a v4to5) Register(s *registry5.Service, opts ...registry5.RegisterOption) error {
	var o registry5.RegisterOptions
	for _, f := range opts {
		f(&o)
	}
	return a.r.Register(service4(s), registry.RegisterTTL(o.TTL))
}

func (a v4to5) Deregister(s *registry5.Service, _ ...registry5.DeregisterOption) error {
	return a.r.Deregister(service4(s))
}

func (a v4to5) GetService(name string, opts ...registry5.GetOption) ([]*registry5.Service, error) {
	var o registry5.GetOptions
	for _, f := range opts {
		f(&o)
	}
	var opts4 []registry.GetOption
	if o.Context != nil {
		opts4 = append(opts4, registry.GetContext(o.Context))
	}
	svcs, err := a.r.GetService(name, opts4...)
	return services5(svcs), error5(err)
}

func (a v4to5) ListServices(...registry5.ListOption) ([]*registry5.Service, error) {
	svcs, err := a.r.ListServices()
	return services5(svcs), error5(err)
}

func (a v4to5) Watch(opts ...registry5.WatchOption) (registry5.Watcher, error) {
	var o registry5.WatchOptions
	for _, f := range opts {
		f(&o)
	}
	opts4 := []registry.WatchOption{registry.WatchService(o.Service)}
	if o.Context != nil {
		opts4 = append(opts4, registry.WatchContext(o.Context))
	}
	w, err := a.r.Watch(opts4...)
	if err != nil {
		return nil, error5(err)
	}
	return watcher5{w}, nil
}

type watcher5 struct{ w registry.Watcher }

func (w watcher5) Next() (*registry5.Result, error) {
	r, err := w.w.Next()
	if err != nil || r == nil {
		return nil, error5(err)
	}
	return &registry5.Result{Action: r.Action, Service: service5(r.Service)}, nil
}

func (w watcher5) Stop() { w.w.Stop() }

// v5to4 is go-micro v5's cache seen as a v4 registry: what the callers
// call. Only GetService and Stop are used.
type v5to4 struct {
	registry.Registry // nil: the callers call nothing else
	c                 gmcache5.Cache
}

func registry4Of(c gmcache5.Cache) registry.Registry { return v5to4{c: c} }

func (a v5to4) GetService(name string, _ ...registry.GetOption) ([]*registry.Service, error) {
	svcs, err := a.c.GetService(name)
	if err == registry5.ErrNotFound {
		err = registry.ErrNotFound
	}
	return services4(svcs), err
}

// error5 is err with v4's ErrNotFound as v5's, which v5's cache tells
// apart.
func error5(err error) error {
	if err == registry.ErrNotFound {
		return registry5.ErrNotFound
	}
	return err
}

func services5(in []*registry.Service) []*registry5.Service {
	if in == nil {
		return nil
	}
	out := make([]*registry5.Service, len(in))
	for i, s := range in {
		out[i] = service5(s)
	}
	return out
}

func service5(s *registry.Service) *registry5.Service {
	if s == nil {
		return nil
	}
	out := &registry5.Service{Name: s.Name, Version: s.Version, Metadata: s.Metadata}
	for _, n := range s.Nodes {
		out.Nodes = append(out.Nodes, &registry5.Node{Id: n.Id, Address: n.Address, Metadata: n.Metadata})
	}
	for _, e := range s.Endpoints {
		out.Endpoints = append(out.Endpoints, &registry5.Endpoint{Name: e.Name, Request: value5(e.Request), Response: value5(e.Response), Metadata: e.Metadata})
	}
	return out
}

func value5(v *registry.Value) *registry5.Value {
	if v == nil {
		return nil
	}
	out := &registry5.Value{Name: v.Name, Type: v.Type}
	for _, x := range v.Values {
		out.Values = append(out.Values, value5(x))
	}
	return out
}

func services4(in []*registry5.Service) []*registry.Service {
	if in == nil {
		return nil
	}
	out := make([]*registry.Service, len(in))
	for i, s := range in {
		out[i] = service4(s)
	}
	return out
}

func service4(s *registry5.Service) *registry.Service {
	if s == nil {
		return nil
	}
	out := &registry.Service{Name: s.Name, Version: s.Version, Metadata: s.Metadata}
	for _, n := range s.Nodes {
		out.Nodes = append(out.Nodes, &registry.Node{Id: n.Id, Address: n.Address, Metadata: n.Metadata})
	}
	for _, e := range s.Endpoints {
		out.Endpoints = append(out.Endpoints, &registry.Endpoint{Name: e.Name, Request: value4(e.Request), Response: value4(e.Response), Metadata: e.Metadata})
	}
	return out
}

func value4(v *registry5.Value) *registry.Value {
	if v == nil {
		return nil
	}
	out := &registry.Value{Name: v.Name, Type: v.Type}
	for _, x := range v.Values {
		out.Values = append(out.Values, value4(x))
	}
	return out
}
