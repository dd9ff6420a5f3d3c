package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/svcdata"
	"github.com/regcache/cache/internal/timeq"
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

	// Stats returns the cache's cumulative counters and the state of the
	// registry and the stream, at a cost that does not grow with the
	// number of services.
	Stats() Stats

	// Services returns the rows of the services whose names start with
	// prefix and sort after after, by name, at most limit of them (all if
	// limit ≤ 0), with their nodes, including services held without data.
	// It pages through what a status page shows.
	Services(prefix, after string, limit int) []ServiceStats
}

// flight is one refresh: a single registry call whose result every caller
// waiting on done shares.
type flight struct {
	done chan struct{}
	// epoch is the resync epoch of the data the call fetches: when it
	// started, or when the watcher's first stream opened (awaitFirstDial).
	// seq is the call's number and started the time; startEpoch is the
	// epoch when it started.
	epoch, seq, startEpoch uint64
	started                time.Time
	// slot marks a refresh that no caller waits for, which holds a
	// background slot. probe marks the one refresh that may go to a
	// registry held to be down.
	slot, probe bool
	// name is the service's.
	name string
	// prevAttempt is the service's last attempt before this one, restored
	// if Stop cancels the call: a cancelled call is no attempt.
	prevAttempt time.Time

	// services and err are written before done is closed and read only
	// after. They are what a caller waiting for this refresh returns.
	services []*registry.Service
	err      error

	// events are the watch events that arrived while the registry call was
	// out, replayed onto its result, so that an event newer than the
	// registry's answer is not undone by it. overflow is set when there
	// were too many to keep. Both are guarded by cache.mu.
	events   []*registry.Result
	overflow bool
	// reopen is set when a watch that started late asked for the service
	// again (watchscope.Scope.Revalidate) while the call was out: an answer
	// without data leaves the retry window open. Guarded by cache.mu.
	reopen bool
}

// maxFlightEvents bounds the events kept for replay during one refresh.
const maxFlightEvents = 256

type cache struct {
	opts Options
	reg  registry.Registry
	now  func() time.Time
	// base is what the moments kept per service count from: a second
	// before New, so that no moment of a time since is the zero one.
	base time.Time
	rand func() float64 // uniform in [0, 1); safe for concurrent use

	// entries maps a service name to its *entry. Lookups read it without a
	// lock; entries are stored and deleted only with mu held.
	entries sync.Map
	// byName is entries again, guarded by mu, for the watcher: a Go map
	// finds an entry in fewer reads of memory the CPU's caches do not
	// hold than sync.Map does, and an event finds one in every pass.
	byName map[string]*entry

	// ctx is cancelled by Stop. Background refreshes pass it to the
	// registry, and every background goroutine selects on ctx.Done().
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// kick wakes the maintainer, redial the watcher from its backoff, and
	// dialFreed a watcher waiting for a Watch call to return; each has a
	// buffer of one so that senders never block.
	kick, redial, dialFreed chan struct{}
	// firstDial is closed once the watcher's first Watch call has
	// returned, opened or not: a cold lookup waits for it, up to
	// firstDialWait, so that the data it fetches is covered by the stream.
	firstDial     chan struct{}
	firstDialOnce sync.Once
	// stopOnce runs the final snapshot write, so that every Stop returns
	// after it.
	stopOnce sync.Once

	// mu guards the non-atomic fields of every entry and the fields below.
	// It is never held across a registry call, a log call, a callback or a
	// blocking channel operation.
	mu      sync.Mutex
	stopped bool
	// stoppedAt is when Stop was first called.
	stoppedAt time.Time
	watching  bool             // the watcher and maintainer have been started
	stream    registry.Watcher // the open watch stream, for Stop to close
	// streamSince is when the stream was last established or lost.
	streamSince time.Time
	streams     int // watch streams established so far
	health      policy.Health
	count       int // entries
	withData    int // entries with data
	// epoch advances with every resync: a watch stream established, or
	// the registry back after failures. Data fetched in an earlier epoch
	// may have missed changes, and is re-validated.
	epoch uint64
	// calls numbers the registry calls that fetch data (GetService and
	// ListServices) in the order they start: an answer never replaces data
	// that a later call fetched.
	calls uint64
	// streamOpened is when the stream was established while the registry
	// was held down, and unproven: such a stream brings the registry up
	// once it has delivered an event or lasted policy.SlowCall, or a data call
	// answers. A Watch that opens streams that fail at once would
	// otherwise flap the registry's state.
	streamOpened time.Time
	// dialsOut counts the Watch calls out, the ones given up on among
	// them.
	dialsOut int
	// refusals counts the Watch calls of the one stream refused in a row
	// while the registry answers; triedPerService is set once a watch of
	// one service was tried, and perService once the cache watches each
	// service on its own instead (refusesOneStream).
	refusals                    int
	triedPerService, perService bool
	// resyncPending is set when the registry came back while the stream
	// was down: the resync waits for the reconnect it triggered, so that
	// one round covers both.
	resyncPending bool
	resyncBy      time.Time
	// failedSince is set by a failed refresh and cleared when an answer
	// redials the stream: an answer after failures cuts the stream's
	// backoff once, not on every answer while Watch alone fails.
	failedSince bool
	work        workQueue
	sweep       timeq.Queue[*entry] // dataless entries, by when they may be dropped
	stats       counters
	// events queues observer events; observing is set once their
	// goroutine is started, and observerGID names that goroutine.
	events      chan Event
	observing   bool
	observerGID atomic.Uint64
	observerEnd chan struct{}
	// staleDirty is set when the oldest stale data served may have gone,
	// for the maintainer to find the next (findStaleSince).
	staleDirty bool
	// dirty is set when what the cache would serve changed since
	// lastWrite; writeErr is the last write's failure.
	dirty     bool
	lastWrite time.Time
	writeErr  error
	// nextEviction is when the maintainer next looks for idle entries.
	nextEviction time.Time
	// heard counts the times the registry showed that it reaches the
	// services it lists: an answer with nodes, or a watch event for any
	// service. An empty answer with no error is believed only once the
	// registry was heard from after it (unheardLocked). A count rather
	// than a time, so that what happened after the doubt is told from
	// what happened before it even at the same clock reading.
	heard atomic.Uint64
	// heldSeq numbers the changes to the services held (entries stored or
	// deleted), and followers are the watchers told of each (watchscope.Follower).
	heldSeq   atomic.Uint64
	followers []*follower
}

var _ Cache = (*cache)(nil)

// held returns the data the cache holds for name, fresh or stale, or nil:
// no registry call, no lock and no refresh. The selector's Mark reads it.
func (c *cache) held(name string) []*registry.Service {
	if v, ok := c.entries.Load(name); ok {
		if s := v.(*entry).data.Load(); s != nil {
			return s.Services
		}
	}
	return nil
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
	return svcdata.CopyOut(svcs), nil
}

// Lookup implements Cache.
func (c *cache) Lookup(name string) ([]*registry.Service, error) {
	return c.lookup(name, nil)
}

// lookup is the read path. ctx may be nil. Data that the entry's mode says
// may be served is served without a lock, a clock read or a write to a
// shared cache line: fresh data, and stale data with nothing to be done
// about it (a refresh in flight or queued, or the retry window open).
func (c *cache) lookup(name string, ctx context.Context) ([]*registry.Service, error) {
	if v, ok := c.entries.Load(name); ok {
		e := v.(*entry)
		if m := e.mode.Load(); m != modeSlow {
			if s := e.data.Load(); s != nil {
				if c.opts.IdleEviction > 0 && !e.read.Load() {
					e.read.Store(true)
				}
				switch m {
				case modeFresh:
					c.stats.hits.Add()
				case modeEvent:
					c.stats.eventHits.Add()
				default:
					c.stats.staleHits.Add()
					if !e.staleRead.Load() {
						c.staleServed(e, s)
					}
				}
				return s.Services, nil
			}
		}
	}
	if name == "" {
		c.stats.invalid.Add(1)
		return nil, ErrEmptyName
	}
	return c.slowLookup(name, ctx)
}

// slowLookup is the read path for anything the entry's mode does not
// cover.
func (c *cache) slowLookup(name string, ctx context.Context) ([]*registry.Service, error) {
	var out outbox
	defer c.flush(&out)
	now := c.now()
	c.mu.Lock()
	c.sweepLocked(now)
	c.startWatcherLocked()
	e := c.entryLocked(name)
	if c.opts.IdleEviction > 0 {
		e.read.Store(true)
	}
	snap := e.data.Load()
	usable := c.usable(snap, now)
	pending := e.flight != nil || (e.queued && usable != nil)
	var held policy.Data
	if usable != nil {
		held = policy.Data{Held: true, RefreshAt: usable.RefreshAt, Expires: usable.Expires}
	}
	d := policy.Decide(now, held, pending, c.allowsLocked(e, now))

	if usable != nil {
		if d == policy.StartRefresh {
			c.wantRefreshLocked(e, now)
		}
		if !now.Before(usable.Expires) && !e.staleTold && !c.health.Down && !c.unconfirmed(usable, now) {
			// (While the registry is down, RegistryDown tells it for
			// every service at once.)
			e.staleTold = true
			c.emitLocked(Event{Kind: ServiceStale, Service: name, Time: now})
		}
		c.settleLocked(e, now)
		c.mu.Unlock()
		c.served(e, usable, now)
		return usable.Services, nil
	}
	f, inline, why := e.flight, false, busy
	switch d {
	case policy.StartRefresh:
		f, inline, why = c.gateLocked(e, now, false)
	case policy.RefuseThrottled:
		why = windowOpen
	}
	if why == windowOpen || why == registryDown {
		err := c.refuseLocked(e, snap, now, why == registryDown)
		c.mu.Unlock()
		return nil, err
	}
	c.mu.Unlock()
	if inline {
		c.refresh(e, f, ctx, false)
	}
	c.stats.misses.Add(1)
	return c.wait(name, ctx, f)
}

// refuseLocked is the error of a lookup with nothing usable that makes no
// registry call: registry.ErrNotFound itself within the window of a
// not-found answer, and otherwise the throttled error, by the service's
// retry window after a failure or (down) by the registry's health.
func (c *cache) refuseLocked(e *entry, snap *svcdata.Snapshot, now time.Time, down bool) error {
	c.stats.throttled.Add(1)
	if !down && snap == nil && e.throttle.LastErr == nil {
		// Within the window of an answer that the registry has no such
		// service: that answer, as the registry gives it, so that
		// err == registry.ErrNotFound holds as through go-micro's cache.
		// Stats counts it as throttled.
		return registry.ErrNotFound
	}
	te := &throttledError{service: e.name, events: c.stream != nil}
	if down {
		te.registryDown = true
		te.retryIn = max(0, c.health.NextProbe().Sub(now))
	} else {
		te.retryIn = e.throttle.RetryIn(now, c.opts.MinimumRetryInterval, c.resyncedLocked(e))
		if !e.throttleTold {
			e.throttleTold = true
			c.emitLocked(Event{Kind: ThrottleStarted, Service: e.name, Time: now})
		}
	}
	var err error = te
	if snap != nil {
		err = c.tooStale(e.name, snap, now, err)
	}
	if down && snap == nil && e.sweepAt == 0 && c.allowsLocked(e, now) {
		// No attempt was made, so there is no window to keep.
		c.dropLocked(e)
	}
	return err
}

// served counts data served from the slow path.
func (c *cache) served(e *entry, s *svcdata.Snapshot, now time.Time) {
	if now.Before(s.Expires) {
		c.stats.freshHits.Add(1)
		return
	}
	if c.unconfirmed(s, now) {
		c.stats.eventServes.Add(1)
		return
	}
	c.stats.staleServes.Add(1)
	if !e.staleRead.Load() {
		c.staleServed(e, s)
	}
}

// usable returns snap unless it is too stale to serve under WithMaxStale.
func (c *cache) usable(snap *svcdata.Snapshot, now time.Time) *svcdata.Snapshot {
	if snap == nil || c.opts.MaxStale <= 0 || now.Before(snap.Expires) ||
		now.Sub(snap.ConfirmedAt()) <= c.opts.MaxStale {
		return snap
	}
	return nil
}

func (c *cache) tooStale(name string, snap *svcdata.Snapshot, now time.Time, cause error) error {
	return &tooStaleError{service: name, age: now.Sub(snap.ConfirmedAt()), limit: c.opts.MaxStale, cause: cause}
}

// errCancelled is a flight's result when Stop cancelled its registry call.
// It never reaches a caller: a waiting caller asks again, as any lookup
// after Stop does.
var errCancelled = errors.New("regcache: refresh cancelled by Stop")

// wait waits for f, or for ctx to be done.
func (c *cache) wait(name string, ctx context.Context, f *flight) ([]*registry.Service, error) {
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case <-f.done:
	case <-done:
		return nil, fmt.Errorf("regcache: lookup of service %s: %w", quoteName(name), ctx.Err())
	}
	if f.err == errCancelled {
		return c.slowLookup(name, ctx)
	}
	return f.services, f.err
}
