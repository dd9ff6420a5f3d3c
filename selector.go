package cache

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	"github.com/regcache/cache/internal/eject"
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
	health *eject.Health
	// initMu orders the Inits, so that the options and the passive
	// health configuration they install are those of the same, last, one.
	initMu sync.Mutex
}

// selectorState is the selector's options and what Select derives from
// them.
type selectorState struct {
	opts selector.Options
	// strategy is the one Select hands to passive health: opts.Strategy,
	// or nil for the default one, eject.Random, whose draw passive health
	// makes itself, avoiding ejected nodes.
	strategy selector.Strategy
}

// Selector is a go-micro selector that shows its passive health and the
// Cache it reads: the one NewSelector returns, and the one the gomicro
// package installs. It is a selector.Selector, so it drops into
// client.Selector; code that reports on a client's selector (a status
// page, a metrics exporter) asserts it by name:
//
//	if s, ok := sel.(cache.Selector); ok {
//		fmt.Printf("%+v\n", s.Stats())
//	}
type Selector interface {
	selector.Selector
	// Stats returns the selector's passive health figures and the Stats
	// of the Cache it reads.
	Stats() SelectorStats
	// Cache returns the Cache the selector reads, to hand to a metrics
	// exporter or a status page. The selector of the gomicro package
	// returns one that follows the registry the flags choose.
	Cache() Cache
}

var _ Selector = (*cacheSelector)(nil)

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
// connection or a timeout) several times in a row, or whose host refused
// a connection once, is ejected: Next skips it for a while that grows with
// each ejection in a row, then it is readmitted on trial, and its first
// failure ejects it again. Errors that the
// service's handler returns never count. At most half of a service's nodes
// are ejected at once, and when every node a caller may pick is ejected,
// Next hands them out anyway. WithEjectAfter, WithEjectionTime and
// WithMaximumEjectedPercent tune it or turn it off. The selector returned is a
// Selector, whose Stats method shows it at work (see SelectorStats).
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
func NewSelector(c Cache, opts ...selector.Option) Selector {
	if c == nil {
		panic("regcache: NewSelector: cache must not be nil")
	}
	var first []selector.Option
	if own, ok := c.(*cache); ok {
		first = own.opts.SelectorOptions
	}
	o, err := selectorOptions(c, append(first[:len(first):len(first)], opts...))
	if err != nil {
		panic("regcache: NewSelector: " + err.Error())
	}
	s := &cacheSelector{c: c, health: newHealth(c, boundOf(c, healthOf(&o)))}
	s.state.Store(&selectorState{opts: o, strategy: custom(o.Strategy)})
	return s
}

// selectorOptions applies opts over the selector defaults, with c as the
// registry, and checks the result. An option that panics when applied (a
// caller's own, or a plugin's that calls context.WithValue on a nil
// Options.Context) gives an error, so that Validate returns it.
func selectorOptions(c Cache, opts []selector.Option) (o selector.Options, err error) {
	o = selector.Options{Strategy: eject.Random}
	if c != nil {
		o.Registry = c
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	for _, opt := range opts {
		if opt == nil {
			return o, errors.New("nil option")
		}
		opt(&o)
	}
	if o.Strategy == nil {
		return o, errors.New("strategy must not be nil")
	}
	return o, healthOf(&o).Validate()
}

// newHealth returns the passive health of a selector that reads c. For
// regcache's own cache it reads the lists c holds without a registry call,
// and logs through c's logger; for a Cache of another kind, it keeps the
// list each service's last Select met, and logs through go-micro's default
// logger.
func newHealth(c Cache, cfg eject.Config) *eject.Health {
	if h, ok := c.(holder); ok {
		return eject.New(cfg, h.held, h.logger())
	}
	return eject.New(cfg, nil, log.DefaultLogger)
}

// holder is what passive health reads of a Cache that can tell the nodes
// it holds without a lookup, regcache's own: the nodes, the logger, and
// its TTL.
type holder interface {
	held(name string) []*registry.Service
	logger() log.Logger
	ttl() time.Duration
}

// boundOf returns cfg with the limbo's default bound resolved for c: the
// TTL of regcache's cache, a minute for another kind (eject's default).
func boundOf(c Cache, cfg eject.Config) eject.Config {
	if h, ok := c.(holder); ok && cfg.LimboBound == 0 {
		cfg.LimboBound = h.ttl()
	}
	return cfg
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
	next.strategy = custom(next.opts.Strategy)
	cfg := boundOf(s.c, healthOf(&next.opts))
	if err := cfg.Validate(); err != nil {
		return errors.New("regcache: selector Init: " + err.Error())
	}
	s.state.Store(&next)
	s.health.Configure(cfg)
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
	strategy := st.strategy
	var filters []selector.Filter
	var ctx context.Context
	if len(opts) > 0 {
		// Kept out of line: applying an option takes the address of the
		// options, which would otherwise move them to the heap on every
		// call, with or without options.
		strategy, filters, ctx = selectOptions(strategy, opts)
	}

	svcs, err := s.lookup(service, ctx)
	if err != nil {
		if errors.Is(err, registry.ErrNotFound) {
			// Nodes the registry lost in bulk may still be in limbo.
			if next, lerr := s.health.Select(service, nil, filters, strategy); lerr == nil {
				return next, nil
			}
			return nil, &notFoundError{cause: err}
		}
		return nil, err
	}
	return s.health.Select(service, svcs, filters, strategy)
}

// lookup looks service up within ctx, which may be nil. regcache's own
// cache takes the context as it is; any other Cache gets it as a
// registry.GetContext option.
func (s *cacheSelector) lookup(service string, ctx context.Context) ([]*registry.Service, error) {
	if own, ok := s.c.(*cache); ok {
		return own.lookup(service, ctx)
	}
	if ctx == nil {
		return s.c.Lookup(service)
	}
	return s.c.Lookup(service, registry.GetContext(ctx))
}

// selectOptions applies opts to a SelectOptions whose strategy is def,
// and returns the strategy to hand to passive health (see custom), the
// filters and the context.
func selectOptions(def selector.Strategy, opts []selector.SelectOption) (selector.Strategy, []selector.Filter, context.Context) {
	var so selector.SelectOptions
	for _, opt := range opts {
		opt(&so)
	}
	if so.Strategy == nil {
		return def, so.Filters, so.Context
	}
	return custom(so.Strategy), so.Filters, so.Context
}

// custom returns strategy, or nil if it is the default one, eject.Random:
// passive health makes the same draw itself, skipping ejected nodes, and
// wraps any other strategy. Functions cannot be compared with ==, but
// their code pointers can.
func custom(strategy selector.Strategy) selector.Strategy {
	if reflect.ValueOf(strategy).Pointer() == randomPointer {
		return nil
	}
	return strategy
}

var randomPointer = reflect.ValueOf(selector.Strategy(eject.Random)).Pointer()

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
	s.health.Mark(service, node, err)
}

// Reset forgets the passive health state of service: its ejected nodes are
// back in rotation at once.
func (s *cacheSelector) Reset(service string) { s.health.Reset(service) }

// Stats returns the selector's passive health figures and the Stats of the
// Cache it reads.
func (s *cacheSelector) Stats() SelectorStats {
	return selectorStats(s.health.Stats(), s.c.Stats())
}

// Cache returns the Cache the selector reads.
func (s *cacheSelector) Cache() Cache { return s.c }

// Close does nothing and returns nil. The selector holds no resources, and
// the Cache it reads belongs to the caller, who may share it with other
// users (a client's registry, for example) and stops it with Cache.Stop.
func (s *cacheSelector) Close() error { return nil }

// String names the selector.
func (s *cacheSelector) String() string { return "regcache" }
