// Package eject is the passive health of regcache's selector: it ejects
// the nodes that go-micro's client could not reach several times in a
// row, readmits them on trial, keeps in limbo the nodes a registry loses
// in bulk (limbo.go), and picks around them. A node's state is one of
// table.go's, changed only as its table allows.
//
// It is kept apart from the cache so that the compiler, not a comment,
// keeps it away from the cache's lock: it sees the cache only through the
// function given to New, which returns what the cache holds for a service
// without a registry call. Its own locks are per service, and its clock
// readings are behind a seam that its tests move.
package eject

import (
	"sync"
	"sync/atomic"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// Health is the passive health of one selector: for each service, the
// state of the nodes that failed lately.
//
// A node's state is created by its first failure and forgotten when it has
// nothing left to remember (reached again, its ejections in a row decayed
// to none), when it has been idle for the maximum ejection time, or, off
// the service's cached list, when more recent nodes off the list push it
// out (maxOffList). Only the nodes of the list count towards, and are
// capped by, the share of ejected nodes. Every pick reads the state as it
// is then, so a Next handed out earlier sees what happened since.
//
// Nothing here is global but the map of services, a sync.Map, so that a
// service's first failure or its last forgotten state costs the same
// however many services have state; every other change takes the lock of
// one service.
type Health struct {
	cfg atomic.Pointer[Config]
	// held returns the service's cached list without a registry call,
	// or nil. For a foreign cache (a Cache not regcache's own), which
	// may call the registry on a Lookup, it is the list the service's
	// last Select met, kept in seen, and foreign is set.
	held    func(string) []*registry.Service
	foreign bool
	seen    sync.Map // service name -> *[]*registry.Service

	// services maps a service name to its *serviceHealth, for the
	// services with node state only. tracked is their number: while it
	// is 0, Select, Next and Mark skip the map.
	services sync.Map
	tracked  atomic.Int64
	// nextSweep is when (Health.nanos) a failure next sweeps.
	nextSweep atomic.Int64

	log log.Logger
	now func() time.Time
	// start is when p was made: the times kept in atomics are
	// nanoseconds since, measured on the monotonic clock, so that a step
	// of the wall clock neither lengthens nor ends an ejection.
	start time.Time

	failures, ejections, refused, ignored, readmitted atomic.Uint64

	// tracks maps a service name to its *lossTrack (limbo.go), for the
	// services selected while limbo is on. losses are the latest losses
	// of nodes, one per service, within massWindow, under lossMu; lossGen
	// moves when they make a mass loss.
	tracks     sync.Map
	lossMu     sync.Mutex
	losses     []lossAt
	lossGen    atomic.Uint64
	massLosses atomic.Uint64

	// violations counts the moves of node states that the table
	// (table.go) does not allow: none, or the tests fail.
	violations atomic.Uint64
	// onMove, if set (by tests, before any use), hears every move.
	onMove func(service, key string, from nodeState, in input, to nodeState)
}

// maxOffList bounds the node states a service keeps for nodes that are
// not on its cached list; the oldest go first.
const maxOffList = 64

// New returns the passive health of a selector, configured by cfg, that
// logs ejections and readmissions to logger.
//
// held returns the node list that the cache holds for a service, or nil,
// without a registry call and without copying it: a failure Mark counts
// the share of ejected nodes among the nodes of that list, and Stats shows
// the rows of that list, even before any Select saw it. Health calls it
// with none of its own locks held. A nil held is for a cache that cannot
// tell without a registry call: the list is then the one the service's
// last Select met.
func New(cfg Config, held func(service string) []*registry.Service, logger log.Logger) *Health {
	p := &Health{held: held, log: logger, now: time.Now, start: time.Now()}
	if held == nil {
		p.foreign, p.held = true, p.lastSeen
	}
	p.cfg.Store(&cfg)
	return p
}

// nanos returns t as the atomics keep it: nanoseconds since p.start.
func (p *Health) nanos(t time.Time) int64 { return int64(t.Sub(p.start)) }

// at returns the time that nanos made n of.
func (p *Health) at(n int64) time.Time { return p.start.Add(time.Duration(n)) }

// saw records svcs as the list a Select of service met, for a foreign
// cache.
func (p *Health) saw(service string, svcs []*registry.Service) {
	if len(svcs) == 0 {
		return
	}
	if v, ok := p.seen.Load(service); ok {
		if sameList(*v.(*[]*registry.Service), svcs) {
			return
		}
	}
	p.seen.Store(service, &svcs)
}

// lastSeen returns the list the last Select of service met, or nil.
func (p *Health) lastSeen(service string) []*registry.Service {
	if v, ok := p.seen.Load(service); ok {
		return *v.(*[]*registry.Service)
	}
	return nil
}

// each calls fn for every service with state.
func (p *Health) each(fn func(*serviceHealth)) {
	p.services.Range(func(_, v any) bool {
		fn(v.(*serviceHealth))
		return true
	})
}

// Configure installs cfg, unless it is the configuration in place.
// Turning passive health off forgets every state;
// a shorter maximum ejection ends the ejections that would outlast it
// then, and a lower share of ejected nodes readmits, on trial, the nodes
// over it.
//
// cfg is stored first: a failure Mark reads it again under its service's
// lock, so one that raced the change records nothing the change undid.
func (p *Health) Configure(cfg Config) {
	if cfg == *p.cfg.Load() {
		return
	}
	p.cfg.Store(&cfg)
	now := p.now()
	if cfg.limboOff() {
		// Turned on again, limbo starts from the lists it meets then:
		// a list met before would make what left since look like a
		// loss at once.
		p.tracks.Clear()
	}
	p.each(func(h *serviceHealth) {
		h.mu.Lock()
		switch {
		case cfg.off():
			h.dropLocked()
		case h.gone.Load():
		default:
			if cfg.limboOff() {
				h.endLimboLocked()
			}
			h.shortenLocked(now, &cfg)
			h.capLocked(now, &cfg)
		}
		h.unlock()
	})
}

// Reset forgets the passive health state of service: its ejected nodes
// are back in rotation at once, for every Next, those handed out before
// included.
func (p *Health) Reset(service string) {
	if h := p.lookup(service); h != nil {
		h.reset()
	}
}

// lookup returns the state of service, or nil. It costs one atomic load
// while no service has state.
func (p *Health) lookup(service string) *serviceHealth {
	if p.tracked.Load() == 0 {
		return nil
	}
	if v, ok := p.services.Load(service); ok {
		return v.(*serviceHealth)
	}
	return nil
}

// serviceFor returns the state of service, creating it.
func (p *Health) serviceFor(service string) *serviceHealth {
	if v, ok := p.services.Load(service); ok {
		return v.(*serviceHealth)
	}
	v, loaded := p.services.LoadOrStore(service, &serviceHealth{p: p, name: service})
	if !loaded {
		p.tracked.Add(1)
	}
	return v.(*serviceHealth)
}
