// Package cache is a registry cache for go-micro v4, and a drop-in
// replacement for go-micro.dev/v4/registry/cache.
//
// It serves fresh data from memory, serves stale data whenever the registry
// fails, makes one registry call per service however many callers arrive at
// once, throttles every refresh attempt per service, and keeps entries fresh
// from a single background watch stream. See the README for the semantics in
// plain words.
package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	log "go-micro.dev/v4/logger"
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
}

// snapshot is one service's data at one moment. It is immutable once
// stored: refreshes and events build a new snapshot and swap the pointer, so
// readers need no lock.
type snapshot struct {
	services []*registry.Service
	// expires is when the data turns stale. Events keep it; only a
	// successful refresh moves it forward.
	expires time.Time
}

// entry is the state of one service. data is read without a lock on the
// hot path; every other field is guarded by cache.mu.
type entry struct {
	data atomic.Pointer[snapshot] // nil when nothing is cached

	flight   *flight // the refresh in progress, if any
	throttle throttle
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
	epoch    uint64           // number of watch streams established so far
	reval    int              // revalidation refreshes in flight
	sweep    sweepQueue
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
	return &cache{
		opts:   o,
		reg:    r,
		now:    time.Now,
		ctx:    ctx,
		cancel: cancel,
		kick:   make(chan struct{}, 1),
	}
}

// GetService returns a copy of the service's cached data, refreshing it
// from the registry as the read path allows. The Service, Node and Endpoint
// structs and their slices belong to the caller; Metadata maps and endpoint
// Values are shared with the cache and must not be changed.
func (c *cache) GetService(name string, _ ...registry.GetOption) ([]*registry.Service, error) {
	svcs, err := c.Lookup(name)
	if err != nil {
		return nil, err
	}
	return copyOut(svcs), nil
}

// Lookup implements Cache.
func (c *cache) Lookup(name string) ([]*registry.Service, error) {
	if v, ok := c.entries.Load(name); ok {
		if s := v.(*entry).data.Load(); s != nil && c.now().Before(s.expires) {
			return s.services, nil
		}
	}
	if name == "" {
		return nil, ErrEmptyName
	}
	return c.slowLookup(name)
}

// slowLookup is the read path for anything but a fresh hit.
func (c *cache) slowLookup(name string) ([]*registry.Service, error) {
	now := c.now()
	c.mu.Lock()
	c.sweepLocked(now)
	e := c.entryLocked(name)
	snap := e.data.Load()
	interval := c.opts.MinimumRetryInterval
	switch decide(now, snap, e.flight != nil, &e.throttle, interval) {
	case serveFresh, serveStale:
		c.mu.Unlock()
		return snap.services, nil
	case joinFlight:
		f := e.flight
		c.mu.Unlock()
		<-f.done
		return f.services, f.err
	case refuseThrottled:
		retry := e.throttle.retryIn(now, interval)
		c.mu.Unlock()
		return nil, &throttledError{service: name, retryIn: retry}
	}
	f, inline := c.startLocked(name, e, now, false)
	c.mu.Unlock()
	if inline {
		c.refresh(name, e, f)
	} else if snap != nil {
		// SPEC rule 5: a caller with data never waits on the registry.
		return snap.services, nil
	}
	<-f.done
	return f.services, f.err
}

// entryLocked returns the entry for name, creating and storing it if there
// is none.
func (c *cache) entryLocked(name string) *entry {
	if v, ok := c.entries.Load(name); ok {
		return v.(*entry)
	}
	e := new(entry)
	c.entries.Store(name, e)
	return e
}

// startLocked records a refresh attempt and starts the refresh. Before Stop
// it runs in a goroutine that the cache owns; after Stop, inline is true and
// the caller must run it. The WaitGroup is added to under mu, where stopped
// is checked, so Stop's Wait never races with an Add.
func (c *cache) startLocked(name string, e *entry, now time.Time, revalidation bool) (f *flight, inline bool) {
	e.throttle.lastAttempt = now
	f = &flight{done: make(chan struct{}), epoch: c.epoch, revalidation: revalidation}
	e.flight = f
	if c.stopped {
		return f, true
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.refresh(name, e, f)
	}()
	return f, false
}

// refresh makes the one registry call of flight f and stores its outcome
// before any waiter wakes (SPEC rule 8).
func (c *cache) refresh(name string, e *entry, f *flight) {
	svcs, err := c.fetch(name)
	if err == nil {
		svcs = cloneIn(svcs)
	}

	c.mu.Lock()
	now := c.now()
	prev := e.data.Load()
	wasFailing := e.throttle.lastErr
	e.flight = nil
	if f.revalidation {
		c.reval--
	}
	switch {
	case err == nil || errors.Is(err, registry.ErrNotFound):
		// An answer, even "not found": replay the events that raced
		// with the call, then store what is left.
		e.throttle.lastErr = nil
		fresh, ok := replay(svcs, f.events)
		if !hasNodes(fresh) {
			e.data.Store(nil)
			c.forgetLocked(name, e, now)
			f.err = registry.ErrNotFound
			break
		}
		s := &snapshot{services: fresh, expires: now.Add(c.opts.TTL)}
		if !ok || f.overflow {
			s.expires = time.Time{}
		}
		e.data.Store(s)
		e.epoch = f.epoch
		f.services = fresh
		c.startWatcherLocked()
	default:
		e.throttle.lastErr = err
		if prev != nil {
			// Stale data wins over an error, and keeps its expiry: an
			// outcome that did not succeed never renews it.
			f.services = prev.services
			break
		}
		c.forgetLocked(name, e, now)
		f.err = fmt.Errorf("regcache: lookup of service %q: %w", name, err)
	}
	f.events = nil
	c.mu.Unlock()
	close(f.done)
	if f.revalidation {
		c.wake()
	}

	switch {
	case err != nil && !errors.Is(err, registry.ErrNotFound) && wasFailing == nil:
		c.opts.Logger.Logf(log.WarnLevel, "regcache: refresh of service %q failing: %v", name, err)
	case (err == nil || errors.Is(err, registry.ErrNotFound)) && wasFailing != nil:
		c.opts.Logger.Logf(log.InfoLevel, "regcache: refresh of service %q recovered", name)
	}
}

// fetch asks the registry once. A panic in the registry becomes an error.
func (c *cache) fetch(name string) (svcs []*registry.Service, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("registry %s panicked: %v", c.reg.String(), r)
		}
	}()
	ctx := c.ctx
	if ctx.Err() != nil {
		// After Stop, refreshes run for the caller and must not inherit
		// the cancelled lifetime context.
		ctx = context.Background()
	}
	return c.reg.GetService(name, registry.GetContext(ctx))
}

// replay applies events that arrived during a refresh to its result. ok is
// false if one of them could not be applied.
func replay(svcs []*registry.Service, events []*registry.Result) ([]*registry.Service, bool) {
	ok := true
	for _, ev := range events {
		next, applied := applyEvent(svcs, ev)
		if !applied {
			ok = false
			continue
		}
		svcs = next
	}
	return svcs, ok
}

func hasNodes(svcs []*registry.Service) bool {
	for _, s := range svcs {
		if len(s.Nodes) > 0 {
			return true
		}
	}
	return false
}

// Stop implements Cache.
func (c *cache) Stop() {
	c.mu.Lock()
	c.stopped = true
	stream := c.stream
	c.stream = nil
	c.mu.Unlock()
	c.cancel()
	if stream != nil {
		stopStream(stream)
	}
	c.wg.Wait()
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
