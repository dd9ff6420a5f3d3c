package core

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// failureMemory is how long a service with nothing cached keeps the record
// of a failed refresh, so that a failure that lasts is logged and told once
// rather than once per retry window.
const failureMemory = time.Minute

// Outcome is how a GetService call ended, as the shell saw it.
type Outcome struct {
	// Services is the cache's own copy of the answer, and Prints its
	// prints, when Err and Unusable are nil.
	Services []*registry.Service
	Prints   svcdata.Prints
	// Err is the registry's error, a panic turned into one included.
	Err error
	// Unusable is set when the answer could not be copied (too large,
	// malformed): the service's failure, not the registry's.
	Unusable error
	// Cancelled is set when the call failed because its context ended:
	// Stop's, or after Stop the caller's. That is no outcome of the
	// registry's.
	Cancelled bool
}

// ErrCancelled is a call's result when its context ended before the
// registry answered. A caller waiting for it asks again.
var ErrCancelled = errors.New("regcache: refresh cancelled")

// Answer records how call c ended at now, stores its result and sets what
// the callers waiting for it get, before the shell wakes them.
func (k *Core) Answer(c *Call, o Outcome, now time.Time) {
	e := c.entry
	if c.Background {
		k.work.slots = slices.DeleteFunc(k.work.slots, func(g *Call) bool { return g == c })
	}
	if k.probe == c {
		k.probe = nil
	}
	if c.Probe && k.health.Probed(c.ID, now) {
		k.wake() // to schedule the next probe
	} else {
		c.Probe = false // overtaken by a later probe, and counted then
	}
	svcs := o.Services
	answered := o.Err == nil || errors.Is(o.Err, registry.ErrNotFound)
	until := time.Time{} // how long an entry left without data is kept
	switch {
	case o.Cancelled:
		// No outcome of the registry's, and no attempt to throttle the
		// next lookup by.
		e.throttle.LastAttempt = c.prevAttempt
		c.Err = ErrCancelled
	case o.Unusable != nil:
		e.throttle.LastAttempt = now
		k.answer(e.Name, now)
		until = k.failed(e, c, o.Unusable, false, now)
	case o.Err == nil && k.doubted(e, svcs, c.events, c.Started, now):
		// Evidence about the registry only while nothing else is heard
		// from it: otherwise the registry answers, and the doubt is the
		// service's own.
		e.throttle.LastAttempt = now
		until = k.failed(e, c, errUnheard, e.doubt.since == 0, now)
	case answered:
		if o.Err != nil {
			svcs = nil // whatever came with an error is not data
		}
		e.doubt = emptyDoubt{}
		epoch := k.epoch
		k.recovered(e, now)
		k.answer(e.Name, now)
		if c.epoch == epoch {
			// A resync that this answer started (the registry heard
			// from again) has nothing to re-validate here.
			c.epoch = k.epoch
		}
		// The retry window runs from the end of the attempt: a registry
		// call that takes as long as the interval must not leave the next
		// caller free to start another at once.
		e.throttle.LastAttempt = now
		c.Services, c.Err = k.storeAnswer(e, c, svcs, o.Prints, now)
	default:
		e.throttle.LastAttempt = now
		until = k.failed(e, c, o.Err, true, now)
	}
	if e.Data.Load() == nil && !o.Cancelled {
		// Nothing held to doubt: a resync re-validates it only if this
		// attempt came before it.
		e.epoch = max(e.epoch, c.epoch)
	}
	if c.reopen && e.Data.Load() == nil && e.throttle.LastErr == nil {
		// The answer may predate a change that a watch started late
		// missed: the next lookup asks again, as a re-validation.
		e.epoch = 0
	}
	if c.overflow {
		e.epoch = 0
	}
	c.events = nil
	if e.phase == PhaseFetching && e.call == c {
		// The data in doubt, whatever the outcome (a re-validation that
		// failed included), is asked for again: at once if the gate
		// allows, at the end of its window if not.
		k.rest(e, until, e.epoch < k.epoch && !o.Cancelled, now)
	}
	k.pump(now)
	k.settle(e, now)
	k.rd.Done = append(k.rd.Done, c)
}

// errUnheard is the failure a refresh records when the registry answered
// no nodes and no error for a service that holds nodes, and the answer is
// not yet believed.
var errUnheard = errors.New("registry answered no nodes and no error, which may mean that it heard from nobody in time; keeping the nodes held until it is heard from again")

// emptyDoubt is an entry's record of answers without nodes and without an
// error, for nodes it holds, that are not yet believed (see doubted).
type emptyDoubt struct {
	// on is set while the last answers were such, mark is Counters.Heard
	// at the last of them, and since is when the first that came while
	// the registry was heard from otherwise ended.
	on    bool
	mark  uint64
	since moment
}

// doubted reports whether an empty answer with no error for e (svcs,
// with the events that raced the call) is to be doubted rather than
// believed. The NATS plugin and mdns ask their peers and answer with what
// they heard before a timeout: the same empty list, with no error, for a
// service that is gone, for a registry they cannot reach, and for an
// answer that came a little late. ErrNotFound, which stores such as etcd
// return, is the registry saying no, and is always believed.
//
// A doubted answer is a failure: the nodes held are kept, stale, and asked
// for again under the throttle. While nothing else is heard from the
// registry, it counts towards the registry's health. The answer is
// believed once it is repeated in a later retry window (at least
// max(MinimumRetryInterval, a second) after the first), each time after
// the registry was heard from (an answer with nodes, or a watch event,
// since the answer before). An empty answer that confirms a delete the
// stream told is two sources agreeing, and believed.
func (k *Core) doubted(e *Entry, svcs []*registry.Service, events []*registry.Result, started, now time.Time) bool {
	cur := e.Data.Load()
	if cur == nil || !svcdata.HasNodes(cur.Services) || len(svcs) > 0 || cur.Hold == svcdata.Emptied {
		return false
	}
	if fresh, _, _ := svcdata.Replay(svcs, events); svcdata.HasNodes(fresh) {
		return false
	}
	heard := k.Stats.Heard.Load()
	d := &e.doubt
	switch {
	case !d.on:
		*d = emptyDoubt{on: true, mark: heard}
		return true
	case heard == d.mark:
		return true // nothing heard since: the registry may be out
	}
	d.mark = heard
	if d.since == 0 {
		d.since = k.moment(now)
		return true
	}
	if started.Sub(k.time(d.since)) < max(k.cfg.MinimumRetryInterval, time.Second) {
		return true
	}
	*d = emptyDoubt{}
	return false
}

// recovered clears e's failures, and tells of its recovery if its failure
// was told.
func (k *Core) recovered(e *Entry, now time.Time) {
	if e.throttle.Succeeded() {
		k.log(Info, "regcache: refresh of service %s recovered", quoteName(e.Name))
		k.emit(Event{Kind: RefreshRecovered, Service: e.Name, Time: now})
	}
}

// failed records a failed call c for e, and returns until when e is kept
// if it is left without data. registry is false when the registry
// answered and only the answer was unusable: that tells nothing about the
// registry's health, and is told at once.
func (k *Core) failed(e *Entry, c *Call, err error, registry bool, now time.Time) (until time.Time) {
	k.Stats.RefreshErrors.Add(1)
	e.throttle.Failed(err, k.cfg.MinimumRetryInterval, k.cfg.MaxRetryInterval, k.cfg.Rand(), k.health.Back)
	e.throttle.ErrAt = now
	if registry {
		k.stream.failedSince = true
		if c.Probe && k.health.Down {
			k.health.Probes++
		}
		k.verdict(k.health.Failed(e.Name, err, c.Started, now), now)
	}
	if !k.health.Down && (!registry || k.health.Interval <= 0 || e.throttle.Failures >= 2) {
		k.tellFailure(e, now)
	}
	if prev := e.Data.Load(); prev != nil {
		// Stale data wins over an error, and keeps its expiry: an outcome
		// that did not succeed never renews it.
		c.Services, c.Err = k.serve(e.Name, prev, now, err)
		return time.Time{}
	}
	c.Err = fmt.Errorf("regcache: lookup of service %s: %w", quoteName(e.Name), err)
	return now.Add(max(e.throttle.Interval(k.cfg.MinimumRetryInterval), failureMemory))
}

// tellFailure logs and tells the failure of one service, once.
func (k *Core) tellFailure(e *Entry, now time.Time) {
	t := &e.throttle
	if t.Told || t.LastErr == nil {
		return
	}
	t.Told = true
	k.log(Warn, "regcache: refresh of service %s failing: %v", quoteName(e.Name), t.LastErr)
	k.emit(Event{Kind: RefreshFailed, Service: e.Name, Err: t.LastErr, Time: now})
}

// storeAnswer stores what the registry answered for e in call c (a
// GetService, or a list's entry), found or not, after replaying the
// events that raced the call, and returns what a caller waiting for the
// answer gets. prints are svcs', made before the lock was taken.
func (k *Core) storeAnswer(e *Entry, c *Call, svcs []*registry.Service, prints svcdata.Prints, now time.Time) ([]*registry.Service, error) {
	events := c.events
	if c.List {
		events = c.list.raced[e.Name]
	}
	cur := e.Data.Load()
	// (No call that started after this one has stored data: a list
	// stores none for a service whose call is out, and one that started
	// before the data held was fetched stores none either: ListStore.)
	e.seq = c.ID
	if c.overflow && c.warm && cur != nil {
		// More events raced the call than were kept for replay: neither
		// the answer nor the events alone are the registry's state. What
		// is held, every event applied to the data held before the call,
		// is served as stale, and the service is asked for again at
		// once, as a re-validation (Answer).
		k.store(e, cur.Stale(cur.Services, cur.Hold), now)
		return cur.Services, nil
	}
	fresh, ok, news := svcdata.Replay(svcs, events)
	if c.overflow {
		// Too many events for a service that held nothing before the
		// call: what the events built lacks what the answer has, so the
		// answer with the events kept is served, stale, and asked for
		// again at once.
		ok = false
	}
	switch {
	case svcdata.HasNodes(fresh) || len(fresh) > 0 && !(cur != nil && k.cfg.LastKnownNodes):
		// Nodes, or versions without nodes (Consul's answer when every
		// node is critical), served as they came, as go-micro's cache
		// serves them. Only nodes show the registry reaches the services
		// it lists (doubted).
		if svcdata.HasNodes(fresh) {
			k.Stats.Heard.Add(1)
		}
		s := k.freshSnapshot(fresh, now)
		s.Prints = prints
		if news {
			// An event that raced the call brought nodes that its
			// answer, which predates it, cannot confirm.
			s.Source, s.EventSince = svcdata.FromEvent, now
		}
		if len(events) > 0 {
			s.Prints = svcdata.PrintsOf(fresh)
		}
		if !ok {
			s = s.Stale(fresh, svcdata.Current)
		}
		if cur != nil && cur.Hold == svcdata.Kept {
			k.log(Info, "regcache: service %s has nodes again; last known nodes released", quoteName(e.Name))
			k.emit(Event{Kind: LastKnownNodesReleased, Service: e.Name, Time: now})
		}
		k.store(e, s, now)
		e.epoch = c.epoch
		return fresh, nil
	case svcdata.HasNodes(svcs) && !k.cfg.LastKnownNodes:
		// The answer had nodes, and a delete that raced the call left
		// none: the delete's, not the registry's, word, which waits for
		// a create or a confirmation as a delete on the stream does.
		at := k.time(c.deleteAt) // (a list's deletes are any service's: from now)
		if cur != nil && cur.Hold == svcdata.Emptied {
			at = k.time(e.emptied)
		}
		if at.IsZero() || c.List {
			at = now
		}
		e.epoch = c.epoch
		last := cur
		if last == nil || cur.Hold != svcdata.Emptied {
			last = k.freshSnapshot(lastNodes(svcs, events), now)
		}
		k.emptiedByDelete(e, last, at, now)
		return k.serve(e.Name, e.Data.Load(), now, registry.ErrNotFound)
	case cur != nil && k.cfg.LastKnownNodes:
		// An empty answer for a service that had nodes: keep them, stale.
		if cur.Hold != svcdata.Kept {
			k.log(Warn, "regcache: registry shows no nodes for service %s; keeping the last known ones", quoteName(e.Name))
			k.emit(Event{Kind: LastKnownNodesKept, Service: e.Name, Time: now})
		}
		kept := cur
		if cur.Hold != svcdata.Kept {
			kept = cur.LastKnown(svcdata.Kept)
		}
		kept = kept.Stale(kept.Services, svcdata.Kept)
		k.store(e, kept, now)
		e.epoch = c.epoch
		return k.serve(e.Name, kept, now, registry.ErrNotFound)
	default:
		k.store(e, nil, now)
		e.epoch = c.epoch
		return nil, registry.ErrNotFound
	}
}

// emptiedByDelete is the one rule for a delete that leaves a service with
// no node, on the stream (events.go) and replayed onto an answer that had
// nodes alike: registries can deliver the delete of an old node before
// the create of its replacement (go-micro's memory registry, mdns), so
// the last nodes, last, are served, stale, until a create replaces them
// or the registry confirms that none is left. The confirmation is the
// early call the gate allows, once the replacement has had
// ReplacementGrace from the delete, at, to announce itself.
func (k *Core) emptiedByDelete(e *Entry, last *svcdata.Snapshot, at, now time.Time) {
	if last.Hold != svcdata.Emptied {
		last = last.LastKnown(svcdata.Emptied)
	}
	k.store(e, last, now)
	e.epoch = 0
	e.emptied = k.moment(at)
	k.park(e, k.graceEnd(e), now)
}

// ReplacementGrace is how long a delete that left a held service with no
// node waits for the create of a replacement before the registry is asked
// to confirm it: registries that reorder the two deliver them
// milliseconds apart, and the answer would otherwise catch the service
// between its instances.
const ReplacementGrace = 250 * time.Millisecond

// graceEnd returns when the last delete that emptied e has had
// ReplacementGrace for a create to replace it; zero unless e holds the
// nodes such a delete left.
func (k *Core) graceEnd(e *Entry) time.Time {
	if s := e.Data.Load(); s == nil || s.Hold != svcdata.Emptied {
		return time.Time{}
	}
	return k.time(e.emptied).Add(ReplacementGrace)
}

// lastNodes replays events onto svcs, which have nodes, and returns the
// data as it stood before the event that left it with none.
func lastNodes(svcs []*registry.Service, events []*registry.Result) []*registry.Service {
	for _, ev := range events {
		next, ok := svcdata.ApplyEvent(svcs, ev)
		if !ok {
			continue
		}
		if !svcdata.HasNodes(next) {
			return svcs
		}
		svcs = next
	}
	return svcs
}

// freshSnapshot stamps services from a successful refresh with their
// expiry, spread by TTLJitter, and their refresh-ahead point.
func (k *Core) freshSnapshot(services []*registry.Service, now time.Time) *svcdata.Snapshot {
	ttl := k.cfg.TTL
	if j := k.cfg.TTLJitter; j > 0 {
		ttl = saturate(float64(ttl) * (1 + j*(2*k.cfg.Rand()-1)))
	}
	s := &svcdata.Snapshot{Services: services, Expires: now.Add(ttl), Refreshed: now}
	if k.cfg.LastKnownNodes {
		s.Known = services
	}
	s.RefreshAt = s.Expires
	if ra := k.cfg.RefreshAhead; ra > 0 {
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
