package cache

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"

	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
)

// cacheSelector is a go-micro selector that reads a Cache directly. go-micro's
// default selector wraps its registry in a second cache of its own, with one
// watch stream per service; this one adds no state at all: every Select is a
// Lookup, so it sees exactly what the Cache holds, and the Cache's one watch
// stream keeps it current.
type cacheSelector struct {
	c Cache
	// opts holds the current Options. Init swaps in a new value, so that
	// Select reads it with one atomic load instead of a lock that every
	// concurrent caller would contend on.
	opts atomic.Pointer[selector.Options]
}

var _ selector.Selector = (*cacheSelector)(nil)

// NewSelector returns a go-micro selector that reads c. Select looks the
// service up with c.Lookup, without copying it, applies the filters and hands
// the result to the strategy.
//
// The default strategy picks a node uniformly at random, as go-micro's
// selector.Random does, but without first gathering the nodes into a new
// slice. selector.SetStrategy and selector.WithStrategy replace it.
//
// Filters and strategies receive the Cache's shared snapshot and must not
// change it: no writes to the slices, the structs or the maps they reach.
// go-micro's own filters (FilterVersion, FilterLabel, FilterEndpoint) and
// strategies (Random, RoundRobin) only read their input and build new
// slices, so they are safe. Nodes returned by Next are shared in the same
// way and are read-only.
//
// The selector owns no goroutine and no watch stream. It does not own c
// either: Close leaves c running, and the caller stops c when it is done
// with it. A selector.Registry option is recorded in Options but does not
// change where Select reads; c is the selector's only source. It is what
// go-micro's client passes to every selector when it is given
// client.Registry, so it must be accepted.
func NewSelector(c Cache, opts ...selector.Option) selector.Selector {
	if c == nil {
		panic("regcache: NewSelector: cache must not be nil")
	}
	o := selector.Options{Registry: c, Strategy: random}
	for _, opt := range opts {
		opt(&o)
	}
	if o.Strategy == nil {
		panic("regcache: NewSelector: strategy must not be nil")
	}
	s := &cacheSelector{c: c}
	s.opts.Store(&o)
	return s
}

// Init applies opts on top of the current options. A nil strategy leaves the
// current one in place.
func (s *cacheSelector) Init(opts ...selector.Option) error {
	for {
		cur := s.opts.Load()
		next := *cur
		for _, opt := range opts {
			opt(&next)
		}
		if next.Strategy == nil {
			next.Strategy = cur.Strategy
		}
		if s.opts.CompareAndSwap(cur, &next) {
			return nil
		}
	}
}

// Options returns a copy of the current options.
func (s *cacheSelector) Options() selector.Options { return *s.opts.Load() }

// Select looks service up in the Cache, applies the filters of opts and
// returns the strategy's Next. Errors map as in go-micro's default selector:
// a service that is not found, or is throttled with nothing cached, gives
// selector.ErrNotFound; a result with no node left after filtering gives
// selector.ErrNoneAvailable; any other error is returned as it is.
func (s *cacheSelector) Select(service string, opts ...selector.SelectOption) (selector.Next, error) {
	o := s.opts.Load()
	strategy := o.Strategy
	var filters []selector.Filter
	if len(opts) > 0 {
		// Kept out of line: applying an option takes the address of the
		// options, which would otherwise move them to the heap on every
		// call, with or without options.
		strategy, filters = selectOptions(strategy, opts)
	}

	svcs, err := s.c.Lookup(service)
	if err != nil {
		if errors.Is(err, registry.ErrNotFound) {
			return nil, selector.ErrNotFound
		}
		return nil, err
	}
	for _, f := range filters {
		svcs = f(svcs)
	}
	if !hasNodes(svcs) {
		return nil, selector.ErrNoneAvailable
	}
	return strategy(svcs), nil
}

// selectOptions applies opts to a SelectOptions whose strategy is def.
func selectOptions(def selector.Strategy, opts []selector.SelectOption) (selector.Strategy, []selector.Filter) {
	so := selector.SelectOptions{Strategy: def}
	for _, opt := range opts {
		opt(&so)
	}
	if so.Strategy == nil {
		so.Strategy = def
	}
	return so.Strategy, so.Filters
}

// Mark does nothing, as in go-micro's default selector: the Cache tracks
// membership through the registry, not through call outcomes.
func (s *cacheSelector) Mark(string, *registry.Node, error) {}

// Reset does nothing, as in go-micro's default selector.
func (s *cacheSelector) Reset(string) {}

// Close does nothing and returns nil. The selector holds no resources, and
// the Cache it reads belongs to the caller, who may share it with other
// users (a client's registry, for example) and stops it with Cache.Stop.
func (s *cacheSelector) Close() error { return nil }

// String names the selector.
func (s *cacheSelector) String() string { return "regcache" }

// random is the default strategy: each Next picks a node uniformly at random
// from all the services' nodes, like selector.Random. It walks the services
// instead of copying every node into a new slice, so it allocates only its
// closure, whatever the number of nodes.
func random(svcs []*registry.Service) selector.Next {
	total := 0
	for _, s := range svcs {
		total += len(s.Nodes)
	}
	switch {
	case total == 0:
		return noneAvailable
	case len(svcs) == 1:
		nodes := svcs[0].Nodes
		return func() (*registry.Node, error) {
			return nodes[rand.IntN(len(nodes))], nil
		}
	}
	return func() (*registry.Node, error) {
		i := rand.IntN(total)
		for _, s := range svcs {
			if i < len(s.Nodes) {
				return s.Nodes[i], nil
			}
			i -= len(s.Nodes)
		}
		return nil, selector.ErrNoneAvailable // unreachable: total counts every node
	}
}

func noneAvailable() (*registry.Node, error) { return nil, selector.ErrNoneAvailable }
