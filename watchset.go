package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go-micro.dev/v4/registry"
)

// serviceWatches is the watch stream of WithWatchPerService: one watch per
// cached service, which the cache reads as one stream that ends only with
// Stop. A watch that fails costs its own service its events, not the
// others': it is redialled on its own backoff while the registry answers,
// and as the one probe of a probe interval while the registry is held
// down, and the data of each service whose watch opens is re-validated,
// since it was fetched before the watch. The losses and the redials count
// towards the registry's health as the single stream's do, one service's
// watch standing for the stream.
//
// It owns a goroutine per open watch, which passes its events on, one that
// opens and closes watches as services are cached, dropped, lost or due a
// redial, and one per Watch call in flight. All are counted in the
// cache's WaitGroup, and all end with Stop.
type serviceWatches struct {
	c      *cache
	ctx    context.Context
	cancel context.CancelFunc
	events chan *registry.Result
	// wake wakes the goroutine that matches the watches to the cached
	// services; a buffer of one, so that a burst of changes is one pass.
	wake chan struct{}

	mu      sync.Mutex
	watches map[string]*serviceWatch
	// lastRedial is when the last redial started while the registry was
	// held down: one a probe interval, then.
	lastRedial time.Time
}

// serviceWatch is the state of one service's watch.
type serviceWatch struct {
	w registry.Watcher // nil while it is not open
	// dialing is set while a Watch call is out, and dialed when it
	// started.
	dialing bool
	dialed  time.Time
	// failures counts the failures in a row, the watch's loss and the
	// redials since; retryAt is when the next redial may start.
	failures int
	retryAt  time.Time
	// opened is set once the watch was open and cleared by its first
	// failure: only that one counts towards the registry's health.
	opened bool
}

// maxDials bounds the Watch calls in flight for the set, not counting
// those out for longer than slowCall: a registry that hangs sees a few
// calls, not one per cached service.
const maxDials = maxBackground

// openServiceWatches publishes a set of per-service watches and starts the
// goroutine that opens them. It makes no registry call of its own.
func (c *cache) openServiceWatches() (registry.Watcher, error) {
	ctx, cancel := context.WithCancel(c.ctx)
	s := &serviceWatches{
		c: c, ctx: ctx, cancel: cancel,
		events:  make(chan *registry.Result),
		wake:    make(chan struct{}, 1),
		watches: map[string]*serviceWatch{},
	}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		cancel()
		return nil, errStopped
	}
	c.publishLocked(s)
	// Data fetched before the set opened is re-validated, as for a
	// stream; each watch that opens later has its own service's.
	c.epoch++
	c.wake()
	c.wg.Add(1)
	c.mu.Unlock()
	go s.run()
	return s, nil
}

// Next returns the next event of any of the watches; it fails only once
// the set is stopped.
func (s *serviceWatches) Next() (*registry.Result, error) {
	select {
	case res := <-s.events:
		return res, nil
	case <-s.ctx.Done():
		return nil, registry.ErrWatcherStopped
	}
}

// Stop closes every watch. The goroutines end once their watch returns.
func (s *serviceWatches) Stop() {
	s.cancel()
	s.mu.Lock()
	var open []registry.Watcher
	for _, sw := range s.watches {
		if sw.w != nil {
			open = append(open, sw.w)
		}
	}
	clear(s.watches)
	s.mu.Unlock()
	for _, w := range open {
		stopStream(w)
	}
}

// servicesChanged wakes the set: a service was cached or dropped, or the
// registry is back and every watch that failed is redialled.
func (s *serviceWatches) servicesChanged() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// redialNow makes every watch that failed due for a redial: the registry
// answered after failures.
func (s *serviceWatches) redialNow() {
	s.mu.Lock()
	for _, sw := range s.watches {
		sw.retryAt = time.Time{}
	}
	s.mu.Unlock()
	s.servicesChanged()
}

// run matches the watches to the cached services until Stop: it opens a
// watch for each service cached, closes those of services dropped, and
// redials those that failed when they are due.
func (s *serviceWatches) run() {
	defer s.c.wg.Done()
	for {
		next := s.match()
		var t *time.Timer
		var timer <-chan time.Time
		if !next.IsZero() {
			t = time.NewTimer(max(next.Sub(s.c.now()), time.Millisecond))
			timer = t.C
		}
		select {
		case <-s.wake:
		case <-timer:
		case <-s.ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if s.ctx.Err() != nil {
			return
		}
	}
}

// match does one pass of run, and returns when the next redial is due
// (zero: none is).
func (s *serviceWatches) match() (next time.Time) {
	cached := map[string]bool{}
	for _, name := range s.c.cachedNames() {
		cached[name] = true
	}
	s.c.mu.Lock()
	down, interval := s.c.health.down, s.c.health.interval
	s.c.mu.Unlock()
	now := s.c.now()

	s.mu.Lock()
	var closed []registry.Watcher
	for name, sw := range s.watches {
		if !cached[name] {
			delete(s.watches, name)
			if sw.w != nil {
				closed = append(closed, sw.w)
			}
		}
	}
	for name := range cached {
		if _, ok := s.watches[name]; !ok {
			s.watches[name] = &serviceWatch{}
		}
	}
	dials := 0
	for _, sw := range s.watches {
		if sw.dialing && now.Sub(sw.dialed) < slowCall {
			dials++
		}
	}
	var due []string
	probe := "" // while down, the redial that is the probe: the one tried longest ago
	for name, sw := range s.watches {
		switch {
		case sw.w != nil || sw.dialing:
		case now.Before(sw.retryAt):
			next = earliest(next, sw.retryAt)
		case down && sw.failures > 0:
			// While the registry is held down, one redial a probe
			// interval is the probe.
			if now.Sub(s.lastRedial) < interval {
				next = earliest(next, s.lastRedial.Add(interval))
			} else if probe == "" || sw.dialed.Before(s.watches[probe].dialed) {
				probe = name
			}
		case dials >= maxDials:
			next = earliest(next, now.Add(slowCall))
		default:
			sw.dialing, sw.dialed = true, now
			dials++
			due = append(due, name)
		}
	}
	if probe != "" {
		s.lastRedial = now
		s.watches[probe].dialing, s.watches[probe].dialed = true, now
		due = append(due, probe)
	}
	s.mu.Unlock()

	for _, w := range closed {
		stopStream(w)
	}
	for _, name := range due {
		s.c.wg.Add(1)
		go s.dial(name)
	}
	return next
}

// dial opens the watch of one service and installs it, or records the
// failure and when to redial.
func (s *serviceWatches) dial(name string) {
	defer s.c.wg.Done()
	started := s.c.now()
	w, err := s.c.callWatch(s.ctx, registry.WatchService(name))
	s.mu.Lock()
	sw := s.watches[name]
	if sw == nil || s.ctx.Err() != nil {
		// Dropped or stopped meanwhile.
		s.mu.Unlock()
		if err == nil {
			stopStream(w)
		}
		return
	}
	sw.dialing = false
	if err != nil {
		sw.failures++
		sw.retryAt = s.c.now().Add(backoff(sw.failures, rand.Float64()))
		evidence := sw.opened
		sw.opened = false
		s.mu.Unlock()
		s.servicesChanged()
		s.c.streamFailed(redialSuspect+name, fmt.Errorf("watch of service %s: %w", quoteName(name), err), evidence, started)
		return
	}
	if sw.failures > 0 {
		s.c.stats.reconnects.Add(1)
	}
	sw.w, sw.failures, sw.opened = w, 0, true
	s.c.wg.Add(1)
	s.mu.Unlock()
	go s.pass(name, w)
	s.c.watchOpened(name)
}

// pass passes the events of one service's watch on, until the watch fails
// (its service then waits for a redial) or is closed (the service dropped,
// or Stop).
func (s *serviceWatches) pass(name string, w registry.Watcher) {
	defer s.c.wg.Done()
	empty := 0
	for {
		res, err := s.c.next(w, &empty)
		if err != nil {
			s.lost(name, w, err)
			return
		}
		if res == nil {
			continue
		}
		select {
		case s.events <- res:
		case <-s.ctx.Done():
			return
		}
	}
}

// lost records that the watch w of name failed with err, unless the set
// closed it.
func (s *serviceWatches) lost(name string, w registry.Watcher, err error) {
	s.mu.Lock()
	sw := s.watches[name]
	if sw == nil || sw.w != w || s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	sw.w, sw.failures = nil, 1
	sw.retryAt = s.c.now().Add(backoff(1, rand.Float64()))
	s.mu.Unlock()
	stopStream(w)
	s.servicesChanged()
	s.c.streamFailed(streamSuspect+name, fmt.Errorf("watch of service %s: %w", quoteName(name), err), true, s.c.now())
}

// cachedNames returns the names of the entries in the map.
func (c *cache) cachedNames() []string {
	var names []string
	c.entries.Range(func(k, _ any) bool {
		names = append(names, k.(string))
		return true
	})
	return names
}

// watchOpened records a service's watch established: an answer from the
// registry, and the service's data, fetched before it, to re-validate.
func (c *cache) watchOpened(name string) {
	var out outbox
	c.mu.Lock()
	now := c.now()
	c.healthLocked(c.health.answered("", now), now, &out)
	c.revalidateLocked(name)
	c.mu.Unlock()
	c.flush(&out)
}

// revalidateLocked has name's data, fetched before its watch opened,
// refreshed once its retry window allows: the data it holds, or the answer
// of the refresh in flight.
func (c *cache) revalidateLocked(name string) {
	v, ok := c.entries.Load(name)
	if !ok {
		return
	}
	e := v.(*entry)
	if e.gone || c.epoch == 0 {
		return
	}
	before := c.epoch - 1
	if f := e.flight; f != nil {
		// Its answer is queued for re-validation when it lands.
		f.epoch = min(f.epoch, before)
		return
	}
	if e.data.Load() != nil {
		e.epoch = min(e.epoch, before)
		c.enqueueLocked(e)
		c.pumpLocked(c.now())
	}
}

// servicesChangedLocked tells the per-service watches, if any, that a
// service was cached or dropped. c.mu is held.
func (c *cache) servicesChangedLocked() {
	if s, ok := c.stream.(*serviceWatches); ok {
		s.servicesChanged()
	}
}
