// Package cache is a registry cache for go-micro v4, and a drop-in
// replacement for go-micro.dev/v4/registry/cache.
//
// It serves fresh data from memory, serves stale data whenever the registry
// fails, makes one registry call per service however many callers arrive at
// once, throttles every refresh attempt per service, and keeps entries fresh
// from a single background watch stream. See the README for the semantics in
// plain words.
//
// NewSelector is a go-micro selector that reads a Cache directly, with
// passive health: it keeps the client away from nodes that it could not
// reach, such as dead nodes in stale data during a registry outage. The
// gomicro subpackage wires both into a go-micro service in one line,
// gomicro.Registry(r) in place of micro.Registry(r).
package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go-micro.dev/v4/registry"
)

// Cache is a registry.Registry that answers GetService from memory. It is
// assignable to go-micro's registry/cache.Cache.
type Cache interface {
	registry.Registry

	// Stop stops the background watcher and waits until every goroutine
	// of the cache has returned. It is idempotent and safe to call
	// concurrently. Lookups keep working after Stop, from the cache and
	// the registry, but no background work starts again.
	Stop()

	// Lookup is GetService without the copy: it follows the same read path
	// and returns the cached snapshot itself. The result, and everything it
	// points to, is shared and must be treated as read-only. The cache
	// never changes a snapshot in place; updates swap in a new one.
	Lookup(service string) ([]*registry.Service, error)

	// Stats returns the cache's cumulative counters and a row per cached
	// service.
	Stats() Stats
}

// snapshot is one service's data at one moment. It is immutable once
// stored: refreshes and events build a new snapshot and swap the pointer, so
// readers need no lock.
type snapshot struct {
	services []*registry.Service
	// expires is when the data turns stale. Events keep it; only a
	// successful refresh moves it forward.
	expires time.Time
	// refreshAt is when a read starts a refresh ahead of expiry; it equals
	// expires unless WithRefreshAhead is set. The fast path compares
	// against it alone.
	refreshAt time.Time
	// refreshed is when the registry last answered with nodes for this
	// service; WithMaxStale measures from it.
	refreshed time.Time
	// kept marks the last known nodes that WithLastKnownNodes keeps after
	// the registry showed none.
	kept bool
}

// stale returns a copy of s with services that is stale from now on.
func (s *snapshot) stale(services []*registry.Service, kept bool) *snapshot {
	return &snapshot{services: services, refreshed: s.refreshed, kept: kept}
}

// entry is the state of one service. data, due and read are read without a
// lock; every other field is guarded by cache.mu.
type entry struct {
	data atomic.Pointer[snapshot] // nil when nothing is cached
	// due is false only while the data is known to be before its
	// refresh-ahead point (refreshAt). The hot path trusts it instead of
	// reading the clock, which costs more than the rest of a hit; a timer
	// sets it when refreshAt passes, and every other path reads the clock.
	// Setting it early only sends reads down the slow path, which decides
	// with the clock, so it is never cleared except when data is stored.
	due atomic.Bool
	// read is set by lookups and cleared by the maintainer, which turns it
	// into lastRead; only kept with WithIdleEviction.
	read atomic.Bool

	timer    *time.Timer // sets due at refreshAt
	lastRead time.Time   // last read, to the maintainer's scan period
	flight   *flight     // the refresh in progress, if any
	throttle throttle
	// staleTold and throttleTold remember that the observer was told, so
	// that it hears of each state change once.
	staleTold, throttleTold bool
	// epoch is the watch-stream epoch in which the cached data was
	// fetched. Data fetched before the current stream was established may
	// have missed events, so the maintainer re-validates it.
	epoch uint64
}

// flight is one refresh: a single registry call whose result every caller
// waiting on done shares.
type flight struct {
	done chan struct{}
	// epoch is the watch-stream epoch when the refresh started.
	epoch uint64
	// revalidation marks a refresh started by the maintainer.
	revalidation bool

	// services and err are written before done is closed and read only
	// after. They are what a caller waiting for this refresh returns.
	services []*registry.Service
	err      error

	// events are the watch events that arrived while the registry call was
	// out. They are replayed onto its result, so that an event newer than
	// the registry's answer is not undone by it. overflow is set when
	// there were too many to keep; the result is then stored as stale.
	// Both are guarded by cache.mu.
	events   []*registry.Result
	overflow bool
}

// maxFlightEvents bounds the events kept for replay during one refresh.
const maxFlightEvents = 256

type cache struct {
	opts Options
	reg  registry.Registry
	now  func() time.Time
	rand func() float64 // uniform in [0, 1); safe for concurrent use

	// entries maps a service name to its *entry. Lookups read it without a
	// lock; entries are stored and deleted only with mu held.
	entries sync.Map

	// ctx is cancelled by Stop. Background refreshes pass it to the
	// registry, and every background goroutine selects on ctx.Done().
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// kick wakes the maintainer; it has a buffer of one so that senders
	// never block.
	kick chan struct{}

	// mu guards the non-atomic fields of every entry and the fields below.
	// It is never held across a registry call, a log call or a blocking
	// channel operation.
	mu       sync.Mutex
	stopped  bool
	watching bool             // the watcher and maintainer have been started
	stream   registry.Watcher // the open watch stream, for Stop to close
	// epoch advances with every watch stream established and every
	// recovery of a failing refresh: data fetched in an earlier epoch may
	// have missed changes, and is re-validated.
	epoch   uint64
	streams int // watch streams established so far
	// revalidated is the epoch up to which every entry has been
	// re-validated, so that the maintainer scans entries only when one
	// may need it.
	revalidated uint64
	reval       int // revalidation refreshes in flight
	sweep       sweepQueue
	stats       counters
	// events queues observer events; observing is set once their
	// goroutine is started.
	events    chan Event
	observing bool
	// dirty is set when data worth writing to the snapshot file arrived
	// since lastWrite; writeErr is the last write's failure.
	dirty     bool
	lastWrite time.Time
	writeErr  error
	persisted bool // the final write at Stop is done
	// nextEviction is when the maintainer next looks for idle entries.
	nextEviction time.Time
}

var _ Cache = (*cache)(nil)

// New returns a Cache in front of r. It starts no goroutine and makes no
// registry call; the watcher starts with the first cached entry. New panics
// if r is nil or an option value is invalid.
func New(r registry.Registry, opts ...Option) Cache {
	if r == nil {
		panic("regcache: New: registry must not be nil")
	}
	o := newOptions(opts)
	ctx, cancel := context.WithCancel(context.Background())
	c := &cache{
		opts:   o,
		reg:    r,
		now:    time.Now,
		rand:   rand.Float64,
		ctx:    ctx,
		cancel: cancel,
		kick:   make(chan struct{}, 1),
	}
	if o.Observer != nil {
		c.events = make(chan Event, observerQueue)
	}
	if o.SnapshotPath != "" {
		c.loadSnapshot()
	}
	return c
}

// GetService returns a copy of the service's cached data, refreshing it
// from the registry as the read path allows. The Service, Node and Endpoint
// structs and their slices belong to the caller; Metadata maps and endpoint
// Values are shared with the cache and must not be changed.
//
// A caller that has to wait for the registry (nothing usable is cached)
// stops waiting when the context given with registry.GetContext is done;
// the refresh goes on and still fills the cache.
func (c *cache) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	var ctx context.Context
	if len(opts) > 0 {
		var o registry.GetOptions
		for _, opt := range opts {
			opt(&o)
		}
		ctx = o.Context
	}
	svcs, err := c.lookup(name, ctx)
	if err != nil {
		return nil, err
	}
	return copyOut(svcs), nil
}

// Lookup implements Cache.
func (c *cache) Lookup(name string) ([]*registry.Service, error) {
	return c.lookup(name, nil)
}

// lookup is the read path. ctx may be nil.
func (c *cache) lookup(name string, ctx context.Context) ([]*registry.Service, error) {
	if v, ok := c.entries.Load(name); ok {
		e := v.(*entry)
		if s := e.data.Load(); s != nil && !e.due.Load() {
			if c.opts.IdleEviction > 0 && !e.read.Load() {
				e.read.Store(true)
			}
			c.stats.hits.add()
			return s.services, nil
		}
	}
	c.stats.lookups.Add(1)
	if name == "" {
		return nil, ErrEmptyName
	}
	return c.slowLookup(name, ctx)
}

// slowLookup is the read path for anything but a fresh hit.
func (c *cache) slowLookup(name string, ctx context.Context) ([]*registry.Service, error) {
	var out outbox
	defer c.flush(&out)
	now := c.now()
	c.mu.Lock()
	c.sweepLocked(now)
	e := c.entryLocked(name)
	if c.opts.IdleEviction > 0 {
		e.read.Store(true)
	}
	snap := e.data.Load()
	usable := c.usable(snap, now)
	interval := c.opts.MinimumRetryInterval
	d := decide(now, usable, e.flight != nil, &e.throttle, interval)
	if d == refuseThrottled {
		if !e.throttleTold {
			e.throttleTold = true
			out.event(ThrottleStarted, name, nil, now)
		}
	} else if usable != nil && !now.Before(usable.expires) && !e.staleTold {
		e.staleTold = true
		out.event(ServiceStale, name, nil, now)
	}
	switch d {
	case serveFresh, serveStale:
		c.mu.Unlock()
		c.served(usable, now)
		return usable.services, nil
	case joinFlight:
		f := e.flight
		c.mu.Unlock()
		c.stats.misses.Add(1)
		return c.wait(name, ctx, f)
	case refuseThrottled:
		var err error = &throttledError{service: name, retryIn: e.throttle.retryIn(now, interval)}
		if snap != nil {
			err = c.tooStale(name, snap, now, err)
		}
		c.mu.Unlock()
		c.stats.throttled.Add(1)
		return nil, err
	}
	f, inline := c.startLocked(name, e, now, false)
	c.mu.Unlock()
	if inline {
		c.refresh(name, e, f, ctx)
	} else if usable != nil {
		// SPEC rule 5: a caller with data never waits on the registry.
		c.served(usable, now)
		return usable.services, nil
	}
	c.stats.misses.Add(1)
	return c.wait(name, ctx, f)
}

// served counts data served from the slow path.
func (c *cache) served(s *snapshot, now time.Time) {
	if now.Before(s.expires) {
		c.stats.freshHits.Add(1)
		return
	}
	c.stats.staleServed(now.Sub(s.refreshed))
}

// usable returns snap unless it is too stale to serve under WithMaxStale.
func (c *cache) usable(snap *snapshot, now time.Time) *snapshot {
	if snap == nil || c.opts.MaxStale <= 0 || now.Before(snap.expires) ||
		now.Sub(snap.refreshed) <= c.opts.MaxStale {
		return snap
	}
	return nil
}

func (c *cache) tooStale(name string, snap *snapshot, now time.Time, cause error) error {
	return &tooStaleError{service: name, age: now.Sub(snap.refreshed), limit: c.opts.MaxStale, cause: cause}
}

// wait waits for f, or for ctx to be done.
func (c *cache) wait(name string, ctx context.Context, f *flight) ([]*registry.Service, error) {
	if ctx == nil {
		<-f.done
		return f.services, f.err
	}
	select {
	case <-f.done:
		return f.services, f.err
	case <-ctx.Done():
		return nil, fmt.Errorf("regcache: lookup of service %q: %w", name, ctx.Err())
	}
}

// entryLocked returns the entry for name, creating and storing it if there
// is none.
func (c *cache) entryLocked(name string) *entry {
	if v, ok := c.entries.Load(name); ok {
		return v.(*entry)
	}
	e := &entry{lastRead: c.now()}
	e.due.Store(true)
	c.entries.Store(name, e)
	return e
}

// storeLocked makes s the entry's data (nil for none) and arms the timer
// that sends reads to the slow path once s reaches its refresh point.
func (c *cache) storeLocked(e *entry, s *snapshot) {
	e.data.Store(s)
	now := c.now()
	if s != nil && now.Before(s.expires) {
		e.staleTold = false
	}
	if s == nil || c.stopped || !now.Before(s.refreshAt) {
		e.due.Store(true)
		if e.timer != nil {
			e.timer.Stop()
		}
		return
	}
	e.due.Store(false)
	wait := s.refreshAt.Sub(now)
	if e.timer == nil {
		e.timer = time.AfterFunc(wait, func() { c.markDue(e) })
		return
	}
	e.timer.Reset(wait)
}

// markDue runs when an entry's timer fires. It reads the data afresh: the
// timer may belong to data that a refresh has replaced since.
func (c *cache) markDue(e *entry) {
	if s := e.data.Load(); s == nil || !c.now().Before(s.refreshAt) {
		e.due.Store(true)
	}
}

// startLocked records a refresh attempt and starts the refresh. Before Stop
// it runs in a goroutine that the cache owns; after Stop, inline is true and
// the caller must run it. The WaitGroup is added to under mu, where stopped
// is checked, so Stop's Wait never races with an Add.
func (c *cache) startLocked(name string, e *entry, now time.Time, revalidation bool) (f *flight, inline bool) {
	e.throttle.lastAttempt = now
	e.throttleTold = false
	c.stats.refreshes.Add(1)
	f = &flight{done: make(chan struct{}), epoch: c.epoch, revalidation: revalidation}
	e.flight = f
	if c.stopped {
		return f, true
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.refresh(name, e, f, c.ctx)
	}()
	return f, false
}

// Stop implements Cache.
func (c *cache) Stop() {
	c.mu.Lock()
	c.stopped = true
	stream := c.stream
	c.stream = nil
	// No timer fires after Stop, so every read reads the clock again.
	c.entries.Range(func(_, v any) bool {
		e := v.(*entry)
		if e.timer != nil {
			e.timer.Stop()
		}
		e.due.Store(true)
		return true
	})
	c.mu.Unlock()
	c.cancel()
	if stream != nil {
		stopStream(stream)
	}
	c.wg.Wait()
	if c.opts.SnapshotPath != "" {
		c.mu.Lock()
		final := !c.persisted
		c.persisted = true
		c.mu.Unlock()
		if final {
			c.persist()
		}
	}
}
