package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/core"
	"github.com/regcache/cache/internal/guard"
	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/svcdata"
)

// The watcher keeps the cache current between refreshes: one goroutine
// that reads one watch stream of every service (or, with
// WithWatchPerService, the set of per-service watches of package
// watchset) and applies its events. Its loop is the whole of the stream's
// life: dial, tell the core (which resyncs the data fetched before the
// stream: the one resync point), apply every event, and when the stream
// ends, tell the core and redial after the wait it gives. What a stream
// opened, lost or failing to open means for the registry's health is the
// core's (core/stream.go).

// watch owns the watch stream until Stop.
func (c *cache) watch() {
	defer c.wg.Done()
	attempt := 0
	connected := true // so that the first failure is logged
	for {
		w, err := c.openStream()
		c.firstDialOnce.Do(func() { close(c.firstDial) })
		if errors.Is(err, errStopped) {
			return
		}
		if err != nil && c.refusesOneStream(err) {
			attempt = 0 // watched per service from now on: at once
			continue
		}
		if err == nil {
			if !connected {
				c.notify(log.InfoLevel, WatchReconnected, nil, "regcache: watch stream reconnected")
			}
			connected = true
			opened := c.now()
			err = c.consume(w)
			c.closeStream(w, err)
			if c.ctx.Err() != nil {
				return
			}
			if c.now().Sub(opened) >= policy.BackoffResetAfter {
				attempt = 0
			}
		}
		if c.ctx.Err() != nil {
			return
		}
		if connected {
			c.notify(log.WarnLevel, WatchDisconnected, err, "regcache: watch stream lost, reconnecting: %v", err)
			connected = false
		}
		c.mu.Lock()
		wait, probe := c.core.RedialWait(attempt+1, rand.Float64())
		c.mu.Unlock()
		if !probe {
			// Redials that are probes of a registry held down do not
			// grow the backoff: after an outage of any length, the next
			// stream lost is redialled within its first steps.
			attempt++
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.redial:
			// The registry answered a refresh: it is back, so the
			// stream should be too.
			attempt = 0
		case <-c.ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// refusesOneStream reports whether the cache switches to a watch per
// service after the one stream's Watch failed with err: the core says
// when to try a watch of one service (core.Refused), and if it opens, the
// registry watches one service at a time.
func (c *cache) refusesOneStream(err error) bool {
	c.mu.Lock()
	name := c.core.Refused(errors.Is(err, errOverdue))
	c.mu.Unlock()
	if name == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(c.ctx, policy.SlowCall)
	w, werr := guard.Watch(c.reg, ctx, registry.WatchService(name))
	cancel()
	if werr != nil {
		return false
	}
	guard.Stop(w)
	c.mu.Lock()
	c.core.WatchPerService()
	c.mu.Unlock()
	c.logf(log.WarnLevel, "regcache: registry %s refuses a watch of every service (%v) and accepts one of a single service: watching each cached service on its own",
		guard.Name{R: c.reg}, err)
	return true
}

// notify logs one line about the stream and tells the observer. The
// caller the logger shows is notify's.
func (c *cache) notify(level log.Level, kind EventKind, err error, format string, args ...any) {
	c.mu.Lock()
	c.core.Notice(core.EventKind(kind), err, c.now())
	c.unlock()
	c.opts.Logger.Logf(level, format, args...)
}

// openStream opens the watch stream and publishes it for Stop.
func (c *cache) openStream() (registry.Watcher, error) {
	c.mu.Lock()
	perService := c.core.PerService()
	c.mu.Unlock()
	if perService {
		return c.openServiceWatches()
	}
	w, err, started := c.dial()
	c.mu.Lock()
	now := c.now()
	c.core.Dialed()
	if err != nil {
		if c.ctx.Err() == nil {
			c.core.DialFailed(err, started, now)
		}
		c.unlock()
		return nil, err
	}
	if !c.core.Opened(false, now) {
		c.mu.Unlock()
		guard.Stop(w)
		return nil, errStopped
	}
	c.stream = w
	select {
	case <-c.redial: // this stream is what it asked for
	default:
	}
	c.unlock()
	return w, nil
}

// closeStream stops w unless Stop already took it, and tells the core
// that the stream ended with err.
func (c *cache) closeStream(w registry.Watcher, err error) {
	c.mu.Lock()
	mine := c.stream == w
	if mine {
		c.stream = nil
		c.core.Closed(err, c.ctx.Err() == nil, c.now())
	}
	c.unlock()
	if mine {
		guard.Stop(w)
	}
}

// maxDials bounds the Watch calls out at once: a registry whose Watch
// hangs sees a few calls, not one a probe interval for as long as it
// hangs.
const maxDials = 4

// errOverdue is a Watch call's failure once it has been out for
// policy.SlowCall.
var errOverdue = fmt.Errorf("Watch has not returned in %v", policy.SlowCall)

// dialCall is one Watch call. Its result goes to the dial that made it,
// or, once that dial has given up on it, is dealt with by the call's own
// goroutine.
type dialCall struct {
	mu        sync.Mutex
	abandoned bool
	done      chan dialResult // buffer of one
}

type dialResult struct {
	w   registry.Watcher
	err error
}

// dial calls Watch for the one stream of every service, with the cache's
// watch filter and scope in its context, and returns when it started. A
// call still out after policy.SlowCall is given up on: the watcher goes on
// without it, and should it succeed late, its stream is closed and the
// watcher redials at once.
func (c *cache) dial() (w registry.Watcher, err error, started time.Time) {
	started = c.now()
	select {
	case c.dialSlots <- struct{}{}:
	case <-c.ctx.Done():
		return nil, errStopped, started
	}
	dc := &dialCall{done: make(chan dialResult, 1)}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		w, err := guard.Watch(c.reg, c.watchContext(c.ctx))
		<-c.dialSlots
		dc.mu.Lock()
		abandoned := dc.abandoned
		if !abandoned {
			dc.done <- dialResult{w, err}
		}
		dc.mu.Unlock()
		if abandoned && err == nil {
			guard.Stop(w)
			select {
			case c.redial <- struct{}{}: // Watch answers: redial now
			default:
			}
		}
	}()
	t := time.NewTimer(policy.SlowCall)
	defer t.Stop()
	select {
	case r := <-dc.done:
		return r.w, r.err, started
	case <-t.C:
	case <-c.ctx.Done():
	}
	dc.mu.Lock()
	select {
	case r := <-dc.done:
		dc.mu.Unlock()
		return r.w, r.err, started
	default:
		dc.abandoned = true
	}
	dc.mu.Unlock()
	if c.ctx.Err() != nil {
		return nil, errStopped, started
	}
	return nil, fmt.Errorf("registry %s: %w", guard.Name{R: c.reg}, errOverdue), started
}

// consume applies events until the stream fails.
func (c *cache) consume(w registry.Watcher) error {
	empty := 0
	var maps svcdata.MapMemo
	for {
		res, err := guard.Next(c.reg, w, &empty)
		if err != nil {
			return err
		}
		c.apply(res, &maps)
	}
}

// apply applies one watch event, prepared without the lock against the
// data held (maps, which belongs to the caller's goroutine, prints its
// metadata; nil walks each). Events for services never looked up are
// ignored and never cause a registry call.
func (c *cache) apply(res *registry.Result, maps *svcdata.MapMemo) {
	st := &c.stats
	if res == nil || res.Service == nil {
		st.EventsIgnored.Add(1)
		return
	}
	st.Heard.Add(1)
	// The core's index, a Go map, finds an entry in fewer reads of memory
	// that the CPU's caches do not hold than the lock-free path's
	// sync.Map does, and an event looks one up in every pass.
	c.mu.Lock()
	e := c.core.Find(res.Service.Name)
	c.mu.Unlock()
	if e == nil {
		st.EventsIgnored.Add(1)
		return
	}
	// Prepared outside the lock: the event may alias the watcher's or the
	// registry's memory, so what it adds is copied on the way in, sharing
	// what the entry holds already; and an event that only repeats what
	// is held (an instance registering again) is neither copied nor
	// merged.
	snap := e.Data.Load()
	p := svcdata.Prepare(res, snap, c.opts.LastKnownNodes, maps)
	c.mu.Lock()
	c.core.Event(res, &p, e, snap, maps, c.now())
	c.unlock()
}
