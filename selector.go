package cache

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"

	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
)

// cacheSelector is a go-micro selector that reads a Cache directly. go-micro's
// default selector wraps its registry in a second cache of its own, with one
// watch stream per service; this one keeps no copy of the data: every Select
// is a Lookup, so it sees exactly what the Cache holds, and the Cache's one
// watch stream keeps it current. The only state it adds is passive health:
// the nodes that go-micro's client could not reach lately.
type cacheSelector struct {
	c Cache
	// state holds the current options. Init swaps in a new value, so
	// that Select reads it with one atomic load instead of a lock that
	// every concurrent caller would contend on.
	state  atomic.Pointer[selectorState]
	health *passive
	// initMu orders the Inits, so that the options and the passive
	// health configuration they install are those of the same, last, one.
	initMu sync.Mutex
}

// selectorState is the selector's options and what Select derives from
// them.
type selectorState struct {
	opts selector.Options
	// custom is set when opts.Strategy is not the default one, random.
	custom bool
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
// Passive health is on by default. go-micro's client calls Mark after every
// attempt; a node that it could not reach (a connection error, a broken
// connection or a timeout) several times in a row is ejected: Next skips it
// for a while that grows with each ejection in a row, then it is readmitted
// on trial, and its first failure ejects it again. Errors that the
// service's handler returns never count. At most half of a service's nodes
// are ejected at once, and when every node a caller may pick is ejected,
// Next hands them out anyway. WithEjectAfter, WithEjectionTime and
// WithMaxEjectedPercent tune it or turn it off; the selector's Stats method
// shows it at work (see SelectorStats).
//
// Filters and strategies receive the Cache's shared snapshot and must not
// change it: no writes to the slices, the structs or the maps they reach.
// go-micro's own filters (FilterVersion, FilterLabel, FilterEndpoint) and
// strategies (Random, RoundRobin) only read their input and build new
// slices, so they are safe. Nodes returned by Next are shared in the same
// way and are read-only.
//
// A service that is not found, or is throttled with nothing cached, gives an
// error that matches selector.ErrNotFound under errors.Is, as go-micro's
// client expects, and whose message says why; a throttled one also matches
// ErrThrottled.
//
// The selector owns no goroutine and no watch stream. It does not own c
// either: Close leaves c running, and the caller stops c when it is done
// with it. A selector.Registry option is recorded in Options but does not
// change where Select reads; c is the selector's only source. It is what
// go-micro's client passes to every selector when it is given
// client.Registry, so it must be accepted.
//
// NewSelector panics if c is nil or an option value is invalid.
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
	st := &selectorState{opts: o, custom: !isRandom(o.Strategy)}
	cfg := healthOf(&o)
	if err := cfg.validate(); err != nil {
		panic("regcache: NewSelector: " + err.Error())
	}
	s := &cacheSelector{c: c, health: newPassive(c, cfg)}
	s.state.Store(st)
	return s
}

// Init applies opts on top of the current options. A nil strategy leaves the
// current one in place. An invalid passive health value is an error, and
// leaves the options as they were.
func (s *cacheSelector) Init(opts ...selector.Option) error {
	s.initMu.Lock()
	defer s.initMu.Unlock()
	cur := s.state.Load()
	next := *cur
	for _, opt := range opts {
		opt(&next.opts)
	}
	if next.opts.Strategy == nil {
		next.opts.Strategy = cur.opts.Strategy
	}
	next.custom = !isRandom(next.opts.Strategy)
	cfg := healthOf(&next.opts)
	if err := cfg.validate(); err != nil {
		return errors.New("regcache: selector Init: " + err.Error())
	}
	s.state.Store(&next)
	if cfg != *s.health.cfg.Load() {
		s.health.configure(cfg)
	}
	return nil
}

// Options returns a copy of the current options.
func (s *cacheSelector) Options() selector.Options { return s.state.Load().opts }

// Select looks service up in the Cache, applies the filters of opts and
// returns the strategy's Next, which skips ejected nodes. Errors map as in
// go-micro's default selector: a service that is not found, or is throttled
// with nothing cached, gives an error matching selector.ErrNotFound that
// says which; a result with no node left after filtering gives
// selector.ErrNoneAvailable; any other error is returned as it is.
func (s *cacheSelector) Select(service string, opts ...selector.SelectOption) (selector.Next, error) {
	st := s.state.Load()
	strategy, custom := st.opts.Strategy, st.custom
	var filters []selector.Filter
	if len(opts) > 0 {
		// Kept out of line: applying an option takes the address of the
		// options, which would otherwise move them to the heap on every
		// call, with or without options.
		strategy, custom, filters = selectOptions(strategy, custom, opts)
	}

	svcs, err := s.c.Lookup(service)
	if err != nil {
		if errors.Is(err, registry.ErrNotFound) {
			return nil, &notFoundError{cause: err}
		}
		return nil, err
	}
	if s.health.foreign {
		s.health.saw(service, svcs)
	}
	h := s.health.lookup(service)
	if h != nil {
		h.observe(svcs)
		if !h.selected.Load() { // read-mostly: no write per Select
			h.selected.Store(true)
		}
	}
	for _, f := range filters {
		svcs = f(svcs)
	}
	total := countNodes(svcs)
	if total == 0 {
		return nil, selector.ErrNoneAvailable
	}
	// Every pick looks at the service's state as it is then, not as it
	// was at Select: go-micro's client takes every retry of an RPC from
	// the one Next, so one handed out before an ejection, before the
	// state was dropped and made anew, or while passive health was off,
	// would otherwise keep retrying into the node ejected.
	k := picker{p: s.health, service: service, h: h}
	if h != nil {
		k.picked = new(atomic.Bool)
	}
	if custom {
		return skipEjected(strategy(svcs), svcs, total, k), nil
	}
	return randomAvoiding(svcs, total, k), nil
}

// selectOptions applies opts to a SelectOptions whose strategy is def, and
// reports whether the strategy is a custom one.
func selectOptions(def selector.Strategy, custom bool, opts []selector.SelectOption) (selector.Strategy, bool, []selector.Filter) {
	var so selector.SelectOptions
	for _, opt := range opts {
		opt(&so)
	}
	if so.Strategy == nil {
		return def, custom, so.Filters
	}
	return so.Strategy, !isRandom(so.Strategy), so.Filters
}

// isRandom reports whether strategy is the default one, random, which
// skips ejected nodes itself; any other is wrapped. Functions cannot be
// compared with ==, but their code pointers can.
func isRandom(strategy selector.Strategy) bool {
	return reflect.ValueOf(strategy).Pointer() == randomPointer
}

var randomPointer = reflect.ValueOf(selector.Strategy(random)).Pointer()

// notFoundError is Select's error for a service that the Cache reports not
// found, throttled or not. It matches selector.ErrNotFound, which go-micro's
// client looks for, and the Cache's error, so that errors.Is(err,
// ErrThrottled) still tells a throttled lookup.
type notFoundError struct{ cause error }

func (e *notFoundError) Error() string {
	if e.cause == registry.ErrNotFound {
		return selector.ErrNotFound.Error() + ": the registry has no node of this service"
	}
	return selector.ErrNotFound.Error() + ": " + e.cause.Error()
}

func (e *notFoundError) Unwrap() []error { return []error{selector.ErrNotFound, e.cause} }

// Mark records the outcome of one attempt on node, as go-micro's client
// reports it after every attempt, for passive health (see NewSelector). A
// success takes no lock and writes nothing unless the node failed lately.
func (s *cacheSelector) Mark(service string, node *registry.Node, err error) {
	s.health.mark(service, node, err)
}

// Reset forgets the passive health state of service: its ejected nodes are
// back in rotation at once.
func (s *cacheSelector) Reset(service string) {
	if h := s.health.lookup(service); h != nil {
		h.reset()
	}
}

// Stats returns the selector's passive health figures and the Stats of the
// Cache it reads.
func (s *cacheSelector) Stats() SelectorStats {
	return s.health.stats(s.health.now(), s.c.Stats())
}

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
	total := countNodes(svcs)
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
		return nodeAt(svcs, rand.IntN(total)), nil
	}
}

func noneAvailable() (*registry.Node, error) { return nil, selector.ErrNoneAvailable }
