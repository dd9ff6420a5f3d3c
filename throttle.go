package cache

import (
	"context"
	"time"

	log "go-micro.dev/v4/logger"

	"github.com/regcache/cache/internal/guard"
	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/watchset"
)

// The gate: every registry call about one service passes gateLocked, which
// decides with the service's retry window and the registry's health, and
// records the attempt before the call starts. Nothing else starts a
// GetService: a caller's refresh, a background refresh, a probe, a resync's
// re-validation and the re-asking of a doubted answer are all its callers.
// So the promise holds for all of them at once: one call per service at a
// time, none within its window, and one call an interval to a registry
// held down (the probe). The one exception, decided here and nowhere else,
// is the early call: once after each call that waited for its window, a
// service whose data the stream has put in doubt may be asked ahead of its
// window. The stream puts data in doubt when it is established or
// re-established (what it missed meanwhile), when the registry is back
// from an outage, when a late watch of the service opens, and when it
// tells of a delete that left the service with no node (confirmed before a
// lookup is refused). Whatever the resyncs, a service sees at most two
// calls in any one window. ListServices has a gate of its own,
// listGateLocked.

// DefaultProbeInterval is how often a cache sends one probe to a registry
// it holds to be down, when no WithProbeInterval option is given.
const DefaultProbeInterval = time.Second

// refusal is why the gate keeps a call from the registry.
type refusal uint8

const (
	admitted refusal = iota
	// busy: a call for the service is out; a caller joins it.
	busy
	// windowOpen: the service's retry window is open.
	windowOpen
	// registryDown: the registry is held down, and the probe is not due.
	registryDown
)

// gateLocked starts a registry call for e if its state and the registry's
// allow one at now, and says why not otherwise. A background call (no
// caller waits for it) holds a background slot. Before Stop the call runs
// in a goroutine that the cache owns; after Stop, inline is true and the
// caller must run it (c.refresh). The WaitGroup is added to under mu, where
// stopped is checked, so Stop's Wait never races with an Add.
func (c *cache) gateLocked(e *entry, now time.Time, background bool) (f *flight, inline bool, why refusal) {
	if e.flight != nil {
		return nil, false, busy
	}
	ok, early := e.throttle.Allows(now, c.opts.MinimumRetryInterval, c.resyncedLocked(e))
	if !ok {
		return nil, false, windowOpen
	}
	ok, probe := c.health.Allows(now)
	if !ok {
		return nil, false, registryDown
	}
	c.calls++
	f = &flight{
		done:        make(chan struct{}),
		epoch:       c.epoch,
		startEpoch:  c.epoch,
		seq:         c.calls,
		started:     now,
		probe:       probe,
		slot:        background,
		name:        e.name,
		prevAttempt: e.throttle.LastAttempt,
	}
	e.throttle.Attempt(now, early)
	e.throttleTold = false
	e.flight = f
	c.stats.refreshes.Add(1)
	if background {
		c.work.slots = append(c.work.slots, f)
	}
	if probe {
		c.health.Probing(f.seq, now)
	}
	c.settleLocked(e, now)
	if c.stopped {
		return f, true, admitted
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, refreshTimeout)
		defer cancel()
		c.refresh(e, f, ctx, true)
	}()
	return f, false, admitted
}

// allowsLocked reports whether e's retry window lets a call start at now.
func (c *cache) allowsLocked(e *entry, now time.Time) bool {
	ok, _ := e.throttle.Allows(now, c.opts.MinimumRetryInterval, c.resyncedLocked(e))
	return ok
}

// resyncedLocked reports whether e's data is in doubt since its last
// attempt: the answer it got predates a stream established since (whose gap
// it may have missed) or a late watch of it, the stream told of a delete
// that emptied it (the epoch is zeroed for both), or the failure it got
// was the outage's, which has ended since or may have (a stream
// established since).
func (c *cache) resyncedLocked(e *entry) bool {
	if t := &e.throttle; t.LastErr != nil {
		// A stream established after the failure, while the registry is
		// held down, may be the registry back: the service may be the
		// probe at once, rather than after the stream has proven it.
		return t.Outage(c.health.Back) || !c.streamOpened.IsZero() && t.LastAttempt.Before(c.streamOpened)
	}
	return e.epoch < c.epoch
}

// listGateLocked reports whether a resync may call ListServices at now: at
// most maxLists out at once, a new one only once the last has been out for
// SlowCall, and while the registry is held down only as the probe of its
// interval.
func (c *cache) listGateLocked(now time.Time) bool {
	switch l := c.work.lists; {
	case len(l) >= maxLists:
		return false
	case len(l) > 0 && now.Sub(l[len(l)-1].started) < policy.SlowCall:
		return false
	}
	if c.health.Down {
		if ok, _ := c.health.Allows(now); !ok {
			return false
		}
		c.health.LastProbe = now
	}
	return true
}

// healthLocked applies a verdict: the log line and observer event of a
// registry-wide change, and the resync when the registry comes back.
func (c *cache) healthLocked(v policy.Verdict, now time.Time, out *outbox) {
	h := &c.health
	switch {
	case v.WentDown:
		out.log(log.WarnLevel, "regcache: registry %s unreachable since %v (%v): %v; serving %d cached services from memory and refusing cold lookups, with one probe every %v until it answers",
			guard.Name{R: c.reg}, h.Since.Format(time.RFC3339), now.Sub(h.Since).Round(time.Millisecond), h.LastErr, c.withData, h.Interval)
		c.emitLocked(Event{Kind: RegistryDown, Err: h.LastErr, Time: now})
		c.wake() // the maintainer schedules the probes
	case v.WentUp:
		out.log(log.InfoLevel, "regcache: registry %s reachable again after %v (%d probes failed); re-validating %d cached services",
			guard.Name{R: c.reg}, now.Sub(h.Since).Round(time.Millisecond), h.Probes, c.withData)
		c.emitLocked(Event{Kind: RegistryUp, Time: now})
		if s, ok := c.stream.(*watchset.Set); ok {
			s.RedialNow()
		}
		if !c.work.resyncing {
			// (A resync running, whose list brought the registry
			// back, covers the outage already.)
			c.resyncLocked()
		}
		c.pumpLocked(now)
	}
}

// tellFailureLocked logs and tells the failure of one service, once. It is
// told once the service fails twice in a row while the registry is up: a
// single failure may be the start of a registry-wide one, told as such,
// and one that does not last is not worth a warning.
func (c *cache) tellFailureLocked(e *entry, now time.Time, out *outbox) {
	t := &e.throttle
	if t.Told || t.LastErr == nil {
		return
	}
	t.Told = true
	out.log(log.WarnLevel, "regcache: refresh of service %s failing: %v", quoteName(e.name), t.LastErr)
	c.emitLocked(Event{Kind: RefreshFailed, Service: e.name, Err: t.LastErr, Time: now})
}
