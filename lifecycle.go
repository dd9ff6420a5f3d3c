package cache

import (
	"context"
	"math/rand/v2"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/core"
	"github.com/regcache/cache/internal/guard"
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
	return newCache(r, o, time.Now, rand.Float64)
}

// newCache returns a cache over r with options o, reading the clock with
// now and drawing jitter with rand.
func newCache(r registry.Registry, o Options, now func() time.Time, rand func() float64) *cache {
	ctx, cancel := context.WithCancel(context.Background())
	c := &cache{
		opts:      o,
		reg:       r,
		now:       now,
		ctx:       ctx,
		cancel:    cancel,
		kick:      make(chan struct{}, 1),
		redial:    make(chan struct{}, 1),
		dialSlots: make(chan struct{}, maxDials),
		firstDial: make(chan struct{}),
	}
	c.obs.init(o.Observer)
	c.core = core.New(core.Config{
		TTL:                  o.TTL,
		MinimumRetryInterval: o.MinimumRetryInterval,
		MaxRetryInterval:     o.MaximumRetryInterval,
		RefreshAhead:         o.RefreshAhead,
		TTLJitter:            o.TTLJitter,
		MaxStale:             o.MaximumStale,
		LastKnownNodes:       o.LastKnownNodes,
		IdleEviction:         o.IdleEviction,
		ProbeInterval:        o.ProbeInterval,
		WatchPerService:      o.WatchPerService,
		Observe:              o.Observer != nil,
		Persist:              o.SnapshotPath != "",
		Registry:             guard.Name{R: r}.String(),
		Rand:                 func() float64 { return c.rand() },
		Base:                 now().Add(-time.Second),
	}, &c.stats)
	c.rand = rand
	if o.SnapshotPath != "" {
		c.loadSnapshot()
		c.checkSnapshot()
	}
	return c
}

// stopWait bounds how long Stop waits for the cache's goroutines. Each of
// them returns at once on Stop, except one inside a registry call that
// ignores both its context and Watcher.Stop, or an observer's callback
// that does not return: a hung registry client must not hang the shutdown
// of the service that uses the cache.
const stopWait = 10 * time.Second

// Stop implements Cache.
func (c *cache) Stop() {
	c.mu.Lock()
	c.core.Stop(c.now())
	stream := c.stream
	c.stream = nil
	// No event is queued after Stop: whether the observer started is
	// final. Its goroutine is not waited for by a Stop that its own
	// callback called: that would wait for itself.
	observing := c.obs.started && !c.obs.self()
	c.unlock()
	c.cancel()
	if stream != nil {
		guard.Stop(stream)
	}
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		if observing {
			<-c.obs.end
		}
		close(done)
	}()
	t := time.NewTimer(stopWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.logf(log.ErrorLevel,
			"regcache: Stop gave up after %v waiting for a call to registry %s that ignores cancellation, or for the observer; the goroutine making it exits when the call returns",
			stopWait, guard.Name{R: c.reg})
	}
	if c.opts.SnapshotPath != "" {
		c.stopOnce.Do(c.persistNow)
	}
}
