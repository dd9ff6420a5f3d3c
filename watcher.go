package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/regcache/cache/internal/guard"
	"github.com/regcache/cache/internal/policy"
	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// The watcher keeps the cache current between refreshes: one goroutine
// that reads one watch stream of every service (or, with
// WithWatchPerService, the set of per-service watches of package watchset) and
// applies its events.
//
// A stream is a hint, never the truth: real plugins lose events, and
// etcd's client hides an outage behind its own reconnects. So every stream
// established is followed by a resync of the data fetched before it, a
// stream lost counts towards the registry's health, and while the stream
// is down with nothing else answering, its redial is the probe: about one
// Watch a probe interval rather than an exponential backoff, so that the
// stream, and the resync it brings, are back within a probe interval of
// the registry's return. The backoff is for a Watch that fails while the
// registry answers.

var errStopped = errors.New("regcache: stopped")

// startWatcherLocked starts the watcher and the maintainer with the first
// lookup. They never start after Stop.
func (c *cache) startWatcherLocked() {
	if c.watching || c.stopped {
		return
	}
	c.watching = true
	c.wg.Add(2)
	go c.watch()
	go c.maintain()
}

// watch owns the watch stream: it opens it, applies its events and reopens
// it until Stop.
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
			// Watched per service from now on: at once.
			attempt = 0
			continue
		}
		if err == nil {
			if !connected {
				c.notify(log.InfoLevel, WatchReconnected, nil, "regcache: watch stream reconnected")
			}
			connected = true
			opened := c.now()
			err = c.consume(w)
			c.closeStream(w)
			if c.ctx.Err() != nil {
				return
			}
			if c.now().Sub(opened) >= policy.BackoffResetAfter {
				attempt = 0
			}
			c.streamLost(err)
		}
		if c.ctx.Err() != nil {
			return
		}
		if connected {
			c.notify(log.WarnLevel, WatchDisconnected, err, "regcache: watch stream lost, reconnecting: %v", err)
			connected = false
		}
		wait, probe := c.redialWait(attempt + 1)
		if !probe {
			// Redials that are probes of a registry held down do not
			// grow the backoff: after an outage of any length, the
			// next stream lost is redialled within its first steps,
			// and a new outage is seen as soon as the first.
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

// oneStreamRefusals is how many Watch calls of every service in a row must
// fail, while the registry answers lookups, before the cache tries a watch
// of one service.
const oneStreamRefusals = 3

// refusesOneStream records that the one stream's Watch failed with err,
// and reports whether the cache switches to a watch per service: a
// registry whose watches are of one service at a time (go-micro's Consul
// registry: "Must specify a single service to watch") refuses the one
// stream at once every time while it answers GetService, and its changes
// would reach the cache only with the TTL. After oneStreamRefusals such
// failures in a row, a watch of one service held is tried, once in the
// cache's life: if it opens, the registry watches one service at a time.
// A Watch that fails while the registry is held down or before it ever
// answered, or that hangs, is an outage; one that fails for every service
// is the stream's own trouble, which the backoff is for.
func (c *cache) refusesOneStream(err error) bool {
	c.mu.Lock()
	switch {
	case c.opts.WatchPerService || c.perService || c.triedPerService:
		c.mu.Unlock()
		return false
	case c.health.Down || c.health.LastAnswer.IsZero() || errors.Is(err, errOverdue):
		c.refusals = 0
	default:
		c.refusals++
	}
	var name string
	if c.refusals >= oneStreamRefusals {
		for n := range c.byName {
			name = n
			break
		}
	}
	c.triedPerService = name != ""
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
	c.perService = true
	c.mu.Unlock()
	c.logf(log.WarnLevel, "regcache: registry %s refuses a watch of every service (%v) and accepts one of a single service: watching each cached service on its own",
		guard.Name{R: c.reg}, err)
	return true
}

// redialWait is the wait before redial attempt n. While the registry is
// held down (the stream lost and its redial failed, with nothing answering
// since), the redials come a probe interval apart, and never closer than
// the backoff's first step: they are probes, and what finds the registry
// back when no refresh is due. Otherwise Watch fails while the registry
// answers, and the backoff applies. probe tells the first case.
func (c *cache) redialWait(n int) (wait time.Duration, probe bool) {
	c.mu.Lock()
	interval, down := c.health.Interval, c.health.Down
	c.mu.Unlock()
	if down && interval > 0 {
		return max(interval, policy.BackoffBase), true
	}
	return policy.Backoff(n, rand.Float64()), false
}

// streamLost records a stream lost as a failure towards the registry's
// health: with a redial that fails next, or a refresh, it takes the
// registry down.
func (c *cache) streamLost(err error) {
	c.streamFailed(policy.StreamSuspect, err, c.now())
}

// redialFailed records a failed or overdue Watch call that started at
// started. Only the first failure after a stream counts as evidence: a
// Watch that keeps failing is the stream's own trouble.
func (c *cache) redialFailed(err error, started time.Time) {
	c.mu.Lock()
	if c.health.Down {
		c.health.Probes++
	}
	c.mu.Unlock()
	c.streamFailed(policy.RedialSuspect, err, started)
}

// streamFailed applies a failure of the stream to the registry's health;
// suspect stands for what failed.
func (c *cache) streamFailed(suspect string, err error, started time.Time) {
	var out outbox
	c.mu.Lock()
	now := c.now()
	c.healthLocked(c.health.Failed(suspect, err, started, now), now, &out)
	c.mu.Unlock()
	c.flush(&out)
}

// notify logs one line about the stream and tells the observer. The
// caller the logger shows is notify's.
func (c *cache) notify(level log.Level, kind EventKind, err error, format string, args ...any) {
	c.mu.Lock()
	c.emitLocked(Event{Kind: kind, Err: err, Time: c.now()})
	c.mu.Unlock()
	c.opts.Logger.Logf(level, format, args...)
}

// openStream opens the watch stream and publishes it for Stop. Each stream
// established starts a resync of the data fetched before it, and is an
// answer from the registry; while the registry is held down, only once it
// has proven itself (see streamOpened).
func (c *cache) openStream() (registry.Watcher, error) {
	c.mu.Lock()
	perService := c.opts.WatchPerService || c.perService
	c.mu.Unlock()
	if perService {
		return c.openServiceWatches()
	}
	w, err := c.dial()
	c.mu.Lock()
	if err != nil {
		if c.resyncPending {
			// The registry came back but its stream did not: resync
			// without waiting for it.
			c.resyncPending = false
			c.epoch++
			c.wake()
		}
		c.mu.Unlock()
		return nil, err
	}
	if c.stopped {
		c.mu.Unlock()
		guard.Stop(w)
		return nil, errStopped
	}
	var out outbox
	defer c.flush(&out)
	defer c.mu.Unlock()
	c.publishLocked(w)
	now := c.now()
	c.health.Cleared(policy.StreamSuspect)
	c.health.Cleared(policy.RedialSuspect)
	if c.health.Down {
		// The resync's list, or the stream's first event or second,
		// brings the registry up.
		c.streamOpened = now
		c.scheduleLocked(now.Add(policy.SlowCall))
		c.epoch++
		c.wake()
	} else {
		c.streamAnsweredLocked(now, &out)
	}
	c.resyncPending = false
	return w, nil
}

// streamAnsweredLocked records the stream as an answer from the registry:
// a resync of the data fetched before it.
func (c *cache) streamAnsweredLocked(now time.Time, out *outbox) {
	c.streamOpened = time.Time{}
	v := c.health.Answered("", now)
	c.healthLocked(v, now, out) // back up: resyncs, the stream being set
	if !v.WentUp {
		c.epoch++
		c.wake()
	}
}

// proveStreamLocked brings the registry up on the evidence of a stream
// established while it was held down, once the stream has delivered an
// event (event) or lasted policy.SlowCall. It returns when to look again (zero:
// nothing to prove).
func (c *cache) proveStreamLocked(now time.Time, event bool, out *outbox) time.Time {
	at := c.streamOpened
	if at.IsZero() || c.stream == nil {
		return time.Time{}
	}
	if !event && now.Sub(at) < policy.SlowCall {
		return at.Add(policy.SlowCall)
	}
	c.streamOpened = time.Time{}
	if c.health.Down {
		c.healthLocked(c.health.Answered("", now), now, out)
	}
	return time.Time{}
}

// publishLocked makes w the stream that Stop closes.
func (c *cache) publishLocked(w registry.Watcher) {
	c.stream = w
	c.refusals = 0
	c.streamSince = c.now()
	c.streams++
	if c.streams > 1 {
		c.stats.reconnects.Add(1)
	}
	select {
	case <-c.redial: // this stream is what it asked for
	default:
	}
}

// maxDials bounds the Watch calls out at once: a registry whose Watch
// hangs sees a few calls, not one a probe interval for as long as it
// hangs.
const maxDials = maxBackground

// errOverdue is a Watch call's failure once it has been out for policy.SlowCall.
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
// watch filter (holds) in its context. A call still out after policy.SlowCall
// counts as a failed redial towards the registry's health, and the watcher
// goes on without it: a Watch that hangs (etcd's client waiting for a
// connection) holds nothing back. Should it succeed late, its stream is
// closed and the watcher redials at once.
func (c *cache) dial() (registry.Watcher, error) {
	started := c.now()
	if err := c.waitDialSlot(); err != nil {
		return nil, err
	}
	dc := &dialCall{done: make(chan dialResult, 1)}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		w, err := guard.Watch(c.reg, c.watchContext(c.ctx))
		dc.mu.Lock()
		abandoned := dc.abandoned
		if !abandoned {
			dc.done <- dialResult{w, err}
		}
		dc.mu.Unlock()
		c.mu.Lock()
		c.dialsOut--
		c.mu.Unlock()
		select {
		case c.dialFreed <- struct{}{}:
		default:
		}
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
		if r.err != nil && c.ctx.Err() == nil {
			c.redialFailed(r.err, started)
		}
		return r.w, r.err
	case <-t.C:
	case <-c.ctx.Done():
	}
	dc.mu.Lock()
	select {
	case r := <-dc.done:
		dc.mu.Unlock()
		if r.err != nil && c.ctx.Err() == nil {
			c.redialFailed(r.err, started)
		}
		return r.w, r.err
	default:
		dc.abandoned = true
	}
	dc.mu.Unlock()
	if c.ctx.Err() != nil {
		return nil, errStopped
	}
	err := fmt.Errorf("registry %s: %w", c.reg.String(), errOverdue)
	c.redialFailed(err, started)
	return nil, err
}

// waitDialSlot waits until fewer than maxDials Watch calls are out, and
// counts the one about to start.
func (c *cache) waitDialSlot() error {
	for {
		c.mu.Lock()
		if c.dialsOut < maxDials {
			c.dialsOut++
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
		select {
		case <-c.dialFreed:
		case <-c.ctx.Done():
			return errStopped
		}
	}
}

// closeStream stops w unless Stop already took it.
func (c *cache) closeStream(w registry.Watcher) {
	c.mu.Lock()
	mine := c.stream == w
	if mine {
		c.stream = nil
		c.streamSince = c.now()
	}
	c.mu.Unlock()
	if mine {
		guard.Stop(w)
	}
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
		c.applyWith(res, &maps)
	}
}
