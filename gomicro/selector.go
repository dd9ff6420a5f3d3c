package gomicro

import (
	"reflect"
	"sync"
	"sync/atomic"

	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// followSelector is the client's selector that Registry installs: regcache's
// selector over a cache of the registry that go-micro gave it last. go-micro
// hands a selector its registry through Init (client.Registry does, and so
// does the command line when --registry or MICRO_REGISTRY names another
// registry); like go-micro's own selector, this one then caches the new
// registry, so that flags keep choosing the registry and regcache keeps
// caching it.
type followSelector struct {
	cacheOpts []cache.Option
	log       logger.Logger

	// cur is read without a lock by every call; mu serialises Init and
	// Close, which replace or stop caches.
	cur    atomic.Pointer[binding]
	mu     sync.Mutex
	closed bool
}

// binding is a cache of one registry and the selector over it.
type binding struct {
	reg   registry.Registry // the registry the cache reads
	c     cache.Cache
	sel   cache.Selector
	owned bool // made here, so stopped here
}

var _ cache.Selector = (*followSelector)(nil)

func newFollowSelector(r registry.Registry, cacheOpts []cache.Option, log logger.Logger) *followSelector {
	s := &followSelector{cacheOpts: cacheOpts, log: log}
	s.cur.Store(s.bind(r))
	return s
}

// bind builds a cache of r and a selector over it, with opts. A Cache is
// used as it is: a second cache in front of it would add nothing.
func (s *followSelector) bind(r registry.Registry, opts ...selector.Option) *binding {
	b := &binding{reg: r}
	if c, ok := r.(cache.Cache); ok {
		b.c = c
	} else {
		b.c, b.owned = cache.New(r, s.cacheOpts...), true
	}
	b.sel = cache.NewSelector(b.c, opts...)
	return b
}

// Init applies opts to the selector. When they carry a registry other than
// the one cached, it caches that one from then on, with the same options,
// and stops the cache it made of the old one.
func (s *followSelector) Init(opts ...selector.Option) error {
	s.mu.Lock()
	old := s.cur.Load()
	if err := old.sel.Init(opts...); err != nil {
		s.mu.Unlock()
		return err
	}
	o := old.sel.Options()
	r := o.Registry
	if r == nil || s.closed || same(r, old.reg) || same(r, old.c) {
		s.mu.Unlock()
		return nil
	}
	next := s.bind(r, func(n *selector.Options) { *n = o })
	s.cur.Store(next)
	s.mu.Unlock()
	if old.owned {
		old.c.Stop()
	}
	logf(s.log, logger.InfoLevel, "regcache: the client's registry is now %s; regcache caches it", r.String())
	return nil
}

// same reports whether a and b are the same registry, without panicking on
// a registry of a type that == cannot compare.
func same(a, b registry.Registry) bool {
	if reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

// Options returns the options of the current selector.
func (s *followSelector) Options() selector.Options { return s.cur.Load().sel.Options() }

// Select selects through the current cache.
func (s *followSelector) Select(service string, opts ...selector.SelectOption) (selector.Next, error) {
	return s.cur.Load().sel.Select(service, opts...)
}

// Mark reports an attempt's outcome to the current selector.
func (s *followSelector) Mark(service string, node *registry.Node, err error) {
	s.cur.Load().sel.Mark(service, node, err)
}

// Reset forgets the passive health state of service.
func (s *followSelector) Reset(service string) { s.cur.Load().sel.Reset(service) }

// Close stops the cache that the selector made. Select keeps working after
// it, from the stopped cache and the registry.
func (s *followSelector) Close() error {
	s.mu.Lock()
	b := s.cur.Load()
	stop := !s.closed && b.owned
	s.closed = true
	s.mu.Unlock()
	if stop {
		b.c.Stop()
	}
	return nil
}

// Cache returns a Cache that reads, at each call, the cache of the
// registry the selector follows: a metrics exporter or a status page
// built on it before service.Init keeps showing the cache in use after
// the flags choose another registry. Its Stop is the selector's Close.
func (s *followSelector) Cache() cache.Cache { return followCache{s} }

// String names the selector as regcache's does.
func (s *followSelector) String() string { return s.cur.Load().sel.String() }

// Stats returns the current selector's passive health figures and its
// cache's Stats.
func (s *followSelector) Stats() cache.SelectorStats {
	return s.cur.Load().sel.Stats()
}

// followCache is the Cache of the registry a followSelector follows at the
// moment of each call.
type followCache struct{ s *followSelector }

func (f followCache) c() cache.Cache { return f.s.cur.Load().c }

func (f followCache) Init(opts ...registry.Option) error { return f.c().Init(opts...) }
func (f followCache) Options() registry.Options          { return f.c().Options() }
func (f followCache) Register(svc *registry.Service, opts ...registry.RegisterOption) error {
	return f.c().Register(svc, opts...)
}
func (f followCache) Deregister(svc *registry.Service, opts ...registry.DeregisterOption) error {
	return f.c().Deregister(svc, opts...)
}
func (f followCache) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	return f.c().GetService(name, opts...)
}
func (f followCache) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	return f.c().ListServices(opts...)
}
func (f followCache) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	return f.c().Watch(opts...)
}
func (f followCache) String() string { return f.c().String() }
func (f followCache) Lookup(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	return f.c().Lookup(name, opts...)
}
func (f followCache) Stats() cache.Stats { return f.c().Stats() }
func (f followCache) Services(prefix, after string, limit int) []cache.ServiceStats {
	return f.c().Services(prefix, after, limit)
}
func (f followCache) Stop() { _ = f.s.Close() }
