package cache

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/regcache/cache/internal/gid"
	"github.com/regcache/cache/internal/guard"
	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// The cache's lifecycle: New, which starts nothing, and Stop, which ends
// everything that started since and waits for it.

// New returns a Cache in front of r. It starts no goroutine and makes no
// registry call; the watcher starts with the first lookup. With
// WithSnapshot, it loads the file and checks that its folder can be
// written, and logs a warning if not. New panics if r is nil or an option
// value is invalid, with a message that starts "regcache: " and names the
// option, the rule and the value given.
func New(r registry.Registry, opts ...Option) Cache {
	if r == nil {
		panic("regcache: New: registry must not be nil")
	}
	o := newOptions(opts)
	ctx, cancel := context.WithCancel(context.Background())
	c := &cache{
		opts:        o,
		reg:         r,
		now:         time.Now,
		base:        time.Now().Add(-time.Second),
		rand:        rand.Float64,
		ctx:         ctx,
		cancel:      cancel,
		kick:        make(chan struct{}, 1),
		redial:      make(chan struct{}, 1),
		dialFreed:   make(chan struct{}, 1),
		firstDial:   make(chan struct{}),
		observerEnd: make(chan struct{}),
		byName:      make(map[string]*entry),
	}
	c.health.Interval = o.ProbeInterval
	if o.Observer != nil {
		c.events = make(chan Event, observerQueue)
	}
	if o.SnapshotPath != "" {
		c.loadSnapshot()
		c.checkSnapshot()
	}
	return c
}

// stopWait bounds how long Stop waits for the cache's goroutines. Each of
// them returns at once on Stop, except one inside a registry call that
// ignores both its context and Watcher.Stop: a hung registry client must
// not hang the shutdown of the service that uses the cache.
const stopWait = 10 * time.Second

// waitGoroutines waits for the cache's goroutines, for at most stopWait.
// One left inside a registry call returns when the call does, and starts
// nothing more.
func (c *cache) waitGoroutines() {
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(stopWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.logf(log.ErrorLevel,
			"regcache: Stop gave up after %v waiting for a call to registry %s that ignores cancellation; the goroutine making it exits when the call returns",
			stopWait, c.reg.String())
	}
}

// Stop implements Cache.
func (c *cache) Stop() {
	c.mu.Lock()
	first := !c.stopped
	if first {
		c.stoppedAt = c.now()
	}
	c.stopped = true
	stream := c.stream
	c.stream = nil
	if first {
		// No timer fires after Stop, so every read decides with the clock.
		c.entries.Range(func(_, v any) bool {
			e := v.(*entry)
			if e.timer != nil {
				e.timer.Stop()
				e.timerFor = 0
			}
			e.mode.Store(modeSlow)
			return true
		})
	}
	observing := c.observing
	c.mu.Unlock()
	c.cancel()
	if stream != nil {
		guard.Stop(stream)
	}
	c.waitGoroutines()
	// The observer's goroutine is waited for apart, so that an observer
	// that calls Stop stops the cache instead of waiting for itself.
	if observing && gid.Current() != c.observerGID.Load() {
		<-c.observerEnd
	}
	if c.opts.SnapshotPath != "" {
		c.stopOnce.Do(c.persist)
	}
}
