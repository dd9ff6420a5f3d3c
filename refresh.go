package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/regcache/cache/internal/guard"
	"github.com/regcache/cache/internal/svcdata"
	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// failureMemory is how long a service with nothing cached keeps the record
// of a failed refresh, so that a failure that lasts is logged and told once
// rather than once per retry window.
const failureMemory = time.Minute

// refreshTimeout bounds the registry calls of the cache's own refreshes,
// for registries that honour their context: a registry that hangs then
// fails, and is seen down, rather than leaving every refresh out for good.
// It is twice the etcd plugin's own timeout, so that a registry that is
// merely slow is never cut off.
const refreshTimeout = 10 * time.Second

// refresh makes the one registry call of flight f, and stores, logs and
// tells its outcome before any waiter wakes. ctx goes to the registry;
// owned is set when it derives from the cache's, so that Stop cancels it.
func (c *cache) refresh(e *entry, f *flight, ctx context.Context, owned bool) {
	if owned && !f.slot {
		c.awaitFirstDial(f, ctx)
	}
	svcs, err := guard.GetService(c.reg, e.name, ctx)
	var unusable error // an answer the cache refuses to copy
	if err != nil {
		// Whatever came with an error, even ErrNotFound, is not data.
		svcs = nil
	} else if svcs, unusable = svcdata.CloneInLike(svcs, heldServices(e)); unusable != nil {
		svcs = nil
	}
	prints := svcdata.PrintsLike(svcs, e.data.Load())
	cancelled := err != nil && owned && c.ctx.Err() != nil
	answered := err == nil || errors.Is(err, registry.ErrNotFound)

	var out outbox
	c.mu.Lock()
	now := c.now()
	e.flight = nil
	if f.slot {
		c.work.slots = slices.DeleteFunc(c.work.slots, func(g *flight) bool { return g == f })
	}
	if f.probe && c.health.Probed(f.seq, now) {
		c.wake() // to schedule the next probe
	} else {
		f.probe = false // overtaken by a later probe, and counted then
	}
	switch {
	case cancelled:
		// Stop cancelled the call: no outcome of the registry's, and no
		// attempt to throttle the next lookup by.
		e.throttle.LastAttempt = f.prevAttempt
		f.err = errCancelled
	case unusable != nil:
		// The registry answered, with data too large or malformed to
		// cache: the service's failure, not the registry's.
		e.throttle.LastAttempt = now
		c.answerLocked(e.name, now, &out)
		c.failedLocked(e, f, unusable, false, now, &out)
	case err == nil && c.doubtLocked(e, svcs, f.events, f.started, now):
		// Evidence about the registry only while nothing else is heard
		// from it: otherwise the registry answers, and the doubt is the
		// service's own.
		e.throttle.LastAttempt = now
		c.failedLocked(e, f, errUnheard, e.heardEmpty == 0, now, &out)
	case answered:
		e.unheard, e.heardEmpty = false, 0
		epoch := c.epoch
		c.answeredLocked(e, now, &out)
		if f.epoch == epoch {
			// A resync that this answer started (the registry heard
			// from again) has nothing to re-validate here.
			f.epoch = c.epoch
		}
		// The retry window runs from the end of the attempt: a registry
		// call that takes as long as the interval must not leave the next
		// caller free to start another at once.
		e.throttle.LastAttempt = now
		f.services, f.err = c.storeAnswerLocked(e, f.epoch, f.seq, svcs, prints, f.events, f.overflow, now, &out)
	default:
		e.throttle.LastAttempt = now
		c.failedLocked(e, f, err, true, now, &out)
	}
	f.events = nil
	if f.reopen && e.data.Load() == nil && e.throttle.LastErr == nil {
		// The answer may predate a change that a watch started late
		// missed: the next lookup asks again, as a re-validation.
		e.epoch = 0
	}
	if f.epoch < c.epoch && e.data.Load() != nil {
		// The call started before the last resync began: its data may
		// have missed what the resync is for.
		c.enqueueLocked(e)
	}
	c.pumpLocked(now)
	c.settleLocked(e, now)
	c.mu.Unlock()
	// Log before waking the waiters, so that what a caller does next is
	// never logged before the outcome that caused it. Log lines come only
	// with state changes; observer events were queued under the lock.
	c.flush(&out)
	close(f.done)
}

// firstDialWait bounds how long a cold lookup waits for the watcher's
// first Watch call before it asks the registry: long enough for a
// registry that answers, short against one that hangs.
const firstDialWait = 100 * time.Millisecond

// awaitFirstDial waits, for a refresh that a caller waits for, until the
// watcher's first Watch call has returned, or firstDialWait. The first
// lookups of a process race the stream that they start: data fetched
// before the stream is established may miss a change made meanwhile, and
// is re-validated once it is. Fetched after, it is not, which saves the
// registry a second call per service at every cold start.
func (c *cache) awaitFirstDial(f *flight, ctx context.Context) {
	select {
	case <-c.firstDial:
	default:
		t := time.NewTimer(firstDialWait)
		select {
		case <-c.firstDial:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	c.mu.Lock()
	if f.epoch == f.startEpoch { // (a late watch lowers it, for a re-validation)
		f.epoch = c.epoch
	}
	c.mu.Unlock()
}

// errUnheard is the failure a refresh records when the registry answered
// no nodes and no error for a service that holds nodes, and the answer is
// not yet confirmed.
var errUnheard = errors.New("registry answered no nodes and no error, which may mean that it heard from nobody in time; keeping the nodes held until it is heard from again")

// doubtLocked reports whether an empty answer with no error for e (svcs,
// with the events that raced the call) is to be doubted rather than
// believed. The NATS plugin and mdns ask their peers and answer with what
// they heard before a timeout: the same empty list, with no error, for a
// service that is gone, for a registry they cannot reach, and for an
// answer that came a little late. ErrNotFound, which stores such as etcd
// return, is the registry saying no, and is always believed.
//
// A doubted answer is a failure: the nodes held are kept, stale, and asked
// for again under the throttle. While nothing else is heard from the
// registry, it counts towards the registry's health, so that two services
// answered empty take the registry down and its first answer with nodes
// resyncs every entry. The answer is believed once it is repeated in a
// later retry window (at least max(MinimumRetryInterval, a second) after
// the first), each time after the registry was heard from (an answer with
// nodes, or a watch event, since the answer before): the registry reaches
// the services that exist, and this one stays empty. Once is not enough:
// right after an outage, or under load, a query now and then misses its
// timeout, and the probe and the resync that follow an outage ask twice
// in a row.
func (c *cache) doubtLocked(e *entry, svcs []*registry.Service, events []*registry.Result, started, now time.Time) bool {
	cur := e.data.Load()
	if cur == nil || !svcdata.HasNodes(cur.Services) || len(svcs) > 0 || c.emptiedLocked(e) {
		// (An empty answer that confirms a delete the stream told is
		// two sources agreeing.)
		return false
	}
	if fresh, _, _ := svcdata.Replay(svcs, events); svcdata.HasNodes(fresh) {
		return false
	}
	heard := c.heard.Load()
	if !e.unheard {
		e.unheard, e.heardMark, e.heardEmpty = true, heard, 0
		return true
	}
	if heard == e.heardMark {
		return true // nothing heard since: the registry may be out
	}
	e.heardMark = heard
	if e.heardEmpty == 0 {
		e.heardEmpty = c.moment(now)
		return true
	}
	if started.Sub(c.time(e.heardEmpty)) < max(c.opts.MinimumRetryInterval, time.Second) {
		return true
	}
	e.unheard, e.heardEmpty = false, 0
	return false
}

// answeredLocked records that the registry answered a refresh of e.
func (c *cache) answeredLocked(e *entry, now time.Time, out *outbox) {
	c.recoveredLocked(e, now, out)
	c.answerLocked(e.name, now, out)
}

// recoveredLocked clears e's failures, and tells of its recovery if its
// failure was told.
func (c *cache) recoveredLocked(e *entry, now time.Time, out *outbox) {
	if e.throttle.Succeeded() {
		out.log(log.InfoLevel, "regcache: refresh of service %s recovered", quoteName(e.name))
		c.emitLocked(Event{Kind: RefreshRecovered, Service: e.name, Time: now})
	}
}

// answerLocked records that the registry answered: service's refresh, or
// with service "" a list or a watch stream. The first answer after failures
// also cuts the watch stream's reconnect backoff: the registry is back, so
// the stream should be too.
func (c *cache) answerLocked(service string, now time.Time, out *outbox) {
	v := c.health.Answered(service, now)
	c.healthLocked(v, now, out)
	if v.Resync && !v.WentUp {
		c.resyncLocked()
	}
	if c.stream == nil && c.watching && c.failedSince {
		c.failedSince = false
		select {
		case c.redial <- struct{}{}:
		default:
		}
	}
}

// failedLocked records a failed refresh of e. registry is false when the
// registry answered and only the answer was unusable: that tells nothing
// about the registry's health, and is told at once.
func (c *cache) failedLocked(e *entry, f *flight, err error, registry bool, now time.Time, out *outbox) {
	c.stats.refreshErrors.Add(1)
	e.throttle.Failed(err, c.opts.MinimumRetryInterval, c.opts.MaxRetryInterval, c.rand(), c.health.Back)
	e.throttle.ErrAt = now
	if registry {
		c.failedSince = true
		if f.probe && c.health.Down {
			c.health.Probes++
		}
		c.healthLocked(c.health.Failed(e.name, err, f.started, now), now, out)
	}
	if !c.health.Down && (!registry || c.health.Interval <= 0 || e.throttle.Failures >= 2) {
		c.tellFailureLocked(e, now, out)
	}
	if prev := e.data.Load(); prev != nil {
		// Stale data wins over an error, and keeps its expiry: an outcome
		// that did not succeed never renews it.
		f.services, f.err = c.serve(e.name, prev, now, err)
		return
	}
	c.forgetLocked(e, now.Add(max(e.throttle.Interval(c.opts.MinimumRetryInterval), failureMemory)), now)
	f.err = fmt.Errorf("regcache: lookup of service %s: %w", quoteName(e.name), err)
}

// storeAnswerLocked stores what the registry answered for e, found or not,
// after replaying the events that raced the call, and returns what a caller
// waiting for the answer gets. epoch is the resync epoch when the call
// started, and seq the call's number. prints are svcs', made before the
// lock was taken.
func (c *cache) storeAnswerLocked(e *entry, epoch, seq uint64, svcs []*registry.Service, prints svcdata.Prints,
	events []*registry.Result, overflow bool, now time.Time, out *outbox) ([]*registry.Service, error) {
	cur := e.data.Load()
	if seq < e.seq {
		// The data was fetched by a call that started after this one
		// (a lookup during a slow ListServices): this answer is older
		// than what the cache holds.
		if cur == nil {
			return nil, registry.ErrNotFound
		}
		return cur.Services, nil
	}
	e.seq = seq
	if overflow {
		// More events raced the call than were kept for replay: neither
		// the answer nor the events alone are the registry's state. What
		// is held (every event applied), or else the answer with the
		// events kept, is served as stale, and the service is asked for
		// again at once, as a re-validation.
		defer c.revalidateNowLocked(e)
		if cur != nil {
			c.storeLocked(e, cur.Stale(cur.Services, cur.Kept), now)
			return cur.Services, nil
		}
	}
	fresh, ok, news := svcdata.Replay(svcs, events)
	switch {
	case svcdata.HasNodes(fresh) || len(fresh) > 0 && !(cur != nil && c.opts.LastKnownNodes):
		// Nodes, or versions without nodes (Consul's answer when every
		// node is critical), which are served as they came, as
		// go-micro's cache serves them. Only nodes show the registry
		// reaches the services it lists (doubtLocked).
		if svcdata.HasNodes(fresh) {
			c.heard.Add(1)
		}
		s := c.freshSnapshot(fresh, now)
		s.Prints = prints
		if news {
			// An event that raced the call brought nodes that its
			// answer, which predates it, cannot confirm.
			s.Source, s.EventSince = svcdata.FromEvent, now
		}
		if len(events) > 0 {
			// Printed here, under the lock, where the replay merged
			// the events: once per refresh that events raced.
			s.Prints = svcdata.PrintsOf(fresh)
		}
		if !ok || overflow {
			s = s.Stale(fresh, false)
		}
		if cur != nil && cur.Kept && c.opts.LastKnownNodes {
			out.log(log.InfoLevel, "regcache: service %s has nodes again; last known nodes released", quoteName(e.name))
			c.emitLocked(Event{Kind: LastKnownNodesReleased, Service: e.name, Time: now})
		}
		c.storeLocked(e, s, now)
		e.epoch = epoch
		return fresh, nil
	case cur != nil && c.opts.LastKnownNodes:
		// An empty answer for a service that had nodes: keep them, stale.
		if !cur.Kept {
			out.log(log.WarnLevel, "regcache: registry shows no nodes for service %s; keeping the last known ones", quoteName(e.name))
			c.emitLocked(Event{Kind: LastKnownNodesKept, Service: e.name, Time: now})
		}
		kept := cur
		if !cur.Kept {
			kept = cur.LastKnown()
		}
		kept = kept.Stale(kept.Services, true)
		c.storeLocked(e, kept, now)
		e.epoch = epoch
		return c.serve(e.name, kept, now, registry.ErrNotFound)
	default:
		c.storeLocked(e, nil, now)
		e.epoch = epoch
		c.forgetLocked(e, e.throttle.OpensAt(c.opts.MinimumRetryInterval), now)
		return nil, registry.ErrNotFound
	}
}

// revalidateNowLocked has e, whose data may have missed changes, fetched
// again as soon as its gate lets it: at once, as the early call that a
// resync allows, unless its last call was one.
func (c *cache) revalidateNowLocked(e *entry) {
	e.epoch = 0
	if e.data.Load() != nil {
		c.enqueueLocked(e)
	}
}

// serve is what a caller waiting on a refresh gets from stale data after
// the refresh failed with cause: the data, unless it is too stale.
func (c *cache) serve(name string, s *svcdata.Snapshot, now time.Time, cause error) ([]*registry.Service, error) {
	if c.usable(s, now) == nil {
		return nil, c.tooStale(name, s, now, cause)
	}
	return s.Services, nil
}

// freshSnapshot stamps services from a successful refresh with their
// expiry, spread by WithTTLJitter, and their refresh-ahead point.
func (c *cache) freshSnapshot(services []*registry.Service, now time.Time) *svcdata.Snapshot {
	ttl := c.opts.TTL
	if j := c.opts.TTLJitter; j > 0 {
		ttl = saturate(float64(ttl) * (1 + j*(2*c.rand()-1)))
	}
	s := &svcdata.Snapshot{Services: services, Expires: now.Add(ttl), Refreshed: now}
	if c.opts.LastKnownNodes {
		s.Known = services
	}
	s.RefreshAt = s.Expires
	if ra := c.opts.RefreshAhead; ra > 0 {
		s.RefreshAt = s.Expires.Add(-saturate(ra * float64(ttl)))
	}
	return s
}

// saturate converts nanoseconds to a Duration, saturating instead of
// overflowing.
func saturate(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}
