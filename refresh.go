package cache

import (
	"context"
	"errors"
	"fmt"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// refresh makes the one registry call of flight f, and stores (SPEC rule 8),
// logs and tells its outcome before any waiter wakes. ctx goes to the
// registry.
func (c *cache) refresh(name string, e *entry, f *flight, ctx context.Context) {
	svcs, err := c.fetch(name, ctx)
	if err == nil {
		svcs, err = cloneInLike(svcs, heldServices(e)) // an answer too large to copy fails like the registry
	}
	answered := err == nil || errors.Is(err, registry.ErrNotFound)

	var out outbox
	c.mu.Lock()
	now := c.now()
	prev := e.data.Load()
	e.flight = nil
	// The retry window runs from the end of the attempt: a registry call
	// that takes as long as the interval (a timeout during an outage) must
	// not leave the next caller free to start another at once.
	e.throttle.lastAttempt = now
	if f.revalidation {
		c.reval--
	}
	if answered {
		if e.throttle.succeeded() {
			out.log(log.InfoLevel, "regcache: refresh of service %q recovered", name)
			out.event(RefreshRecovered, name, nil, now)
			c.resyncLocked(f)
		}
		c.storeAnswerLocked(name, e, f, prev, svcs, now, &out)
	} else {
		base, ceiling := c.opts.MinimumRetryInterval, c.opts.MaxRetryInterval
		c.stats.refreshErrors.Add(1)
		if e.throttle.failed(err, base, ceiling, c.rand()) {
			out.log(log.WarnLevel, "regcache: refresh of service %q failing: %v", name, err)
			out.event(RefreshFailed, name, err, now)
		}
		if prev != nil {
			// Stale data wins over an error, and keeps its expiry: an
			// outcome that did not succeed never renews it.
			f.services, f.err = c.serve(name, prev, now, err)
		} else {
			c.forgetLocked(name, e, now)
			f.err = fmt.Errorf("regcache: lookup of service %q: %w", name, err)
		}
	}
	f.events = nil
	// While entries await re-validation, a refresh landing may be what the
	// maintainer waits for: a free revalidation slot, or data from before
	// the stream that is now stored and due for re-validation.
	pending := c.revalidated < c.epoch
	c.mu.Unlock()
	// Log and tell before waking the waiters, so that what a caller does
	// next (a throttled lookup, say) is never told before the outcome that
	// caused it. Log lines come only with state changes.
	c.flush(&out)
	close(f.done)
	if pending {
		c.wake()
	}
}

// resyncLocked re-validates every entry after a refresh recovers from
// failures. A failing registry was probably unreachable, and real watch
// streams lose what changed meanwhile without returning an error: go-micro's
// etcd plugin v1.2.0 blocks through an outage, then passes on only the first
// change of the batch etcd replays. So recovery is treated like a
// reconnect. The recovered refresh itself counts as re-validated.
func (c *cache) resyncLocked(f *flight) {
	c.epoch++
	f.epoch = c.epoch
	c.wake()
}

// storeAnswerLocked stores what the registry answered, found or not, after
// replaying the events that raced with the call.
func (c *cache) storeAnswerLocked(name string, e *entry, f *flight, prev *snapshot,
	svcs []*registry.Service, now time.Time, out *outbox) {
	fresh, ok := replay(svcs, f.events)
	switch {
	case hasNodes(fresh):
		s := c.freshSnapshot(fresh, now)
		if !ok || f.overflow {
			s = s.stale(fresh, false)
		}
		if prev != nil && prev.kept {
			out.log(log.InfoLevel, "regcache: service %q has nodes again; last known nodes released", name)
			out.event(LastKnownNodesReleased, name, nil, now)
		}
		c.storeLocked(e, s)
		e.epoch = f.epoch
		f.services = fresh
		c.startWatcherLocked()
		if c.opts.SnapshotPath != "" && !c.dirty {
			c.dirty = true
			c.wake()
		}
	case prev != nil && c.opts.LastKnownNodes:
		// An empty answer for a service that had nodes: keep them, stale.
		if !prev.kept {
			out.log(log.WarnLevel, "regcache: registry shows no nodes for service %q; keeping the last known ones", name)
			out.event(LastKnownNodesKept, name, nil, now)
		}
		kept := prev.stale(prev.services, true)
		c.storeLocked(e, kept)
		e.epoch = f.epoch
		f.services, f.err = c.serve(name, kept, now, registry.ErrNotFound)
	default:
		c.storeLocked(e, nil)
		c.forgetLocked(name, e, now)
		f.err = registry.ErrNotFound
	}
}

// serve is what a caller waiting on a refresh gets from stale data after
// the refresh failed with cause: the data, unless it is too stale.
func (c *cache) serve(name string, s *snapshot, now time.Time, cause error) ([]*registry.Service, error) {
	if c.usable(s, now) == nil {
		return nil, c.tooStale(name, s, now, cause)
	}
	return s.services, nil
}

// freshSnapshot stamps services from a successful refresh with their
// expiry, spread by WithTTLJitter, and their refresh-ahead point.
func (c *cache) freshSnapshot(services []*registry.Service, now time.Time) *snapshot {
	ttl := c.opts.TTL
	if j := c.opts.TTLJitter; j > 0 {
		ttl = time.Duration(float64(ttl) * (1 + j*(2*c.rand()-1)))
	}
	s := &snapshot{services: services, expires: now.Add(ttl), refreshed: now}
	s.refreshAt = s.expires
	if ra := c.opts.RefreshAhead; ra > 0 {
		s.refreshAt = s.expires.Add(-time.Duration(ra * float64(ttl)))
	}
	return s
}

// fetch asks the registry once. A panic in the registry becomes an error.
func (c *cache) fetch(name string, ctx context.Context) (svcs []*registry.Service, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("registry %s panicked: %v", c.reg.String(), r)
		}
	}()
	if ctx == nil {
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
