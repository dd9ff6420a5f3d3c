package cache

import (
	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/timeq"
	"github.com/regcache/cache/internal/watchset"
	"time"
)

// maxBackground bounds the refreshes that no caller waits for (of stale
// data, ahead of expiry, and re-validations) running at once. While every
// slot has been taken for policy.SlowCall, one more refresh may start: a
// few services whose calls hang (keys that time out) then do not keep
// every other service waiting, and a registry that hangs as a whole gets
// one more call a second until its calls time out and it is held down. Their callers
// are served at once, so nothing is lost by queueing them, and a registry
// that starts failing or hanging sees a handful of calls before the cache
// notices, not one per stale service.
const maxBackground = 4

// workQueue is the background work: entries waiting for a refresh slot, in
// order, and entries waiting for their retry window before they can take
// one. Every operation costs O(1), or O(log n) for the timed ones, so a
// resync of n services costs O(n log n) in all.
type workQueue struct {
	fifo  []*entry
	head  int
	later timeq.Queue[*entry] // waiting for their retry window, by its end
	// slots are the background refreshes in flight that count against
	// maxBackground.
	slots []*flight
	// round is the epoch of the last resync started; resyncing is set
	// while it runs.
	round     uint64
	resyncing bool
	// lists are the ListServices calls out, each recording the events
	// that race it.
	lists []*bulkRecord
	// namesOnly is set once ListServices returned services without nodes:
	// the registry lists names only (mdns does), so resyncs ask per
	// service.
	namesOnly bool
	// wakeAt is when the maintainer runs next: zero while it sleeps until
	// woken. Work due at a later moment is scheduled against it.
	wakeAt time.Time
}

func (w *workQueue) pending() bool { return w.head < len(w.fifo) }

func (w *workQueue) pop() *entry {
	e := w.fifo[w.head]
	w.fifo[w.head] = nil
	w.head++
	if w.head == len(w.fifo) {
		w.fifo, w.head = w.fifo[:0], 0
	} else if w.head > 1024 && w.head > len(w.fifo)/2 {
		w.fifo = append(w.fifo[:0], w.fifo[w.head:]...)
		w.head = 0
	}
	return e
}

// slotsLocked returns how many background refreshes may run now, and when
// that may grow (zero: only when a refresh lands).
func (c *cache) slotsLocked(now time.Time) (limit int, next time.Time) {
	limit = maxBackground
	if c.health.Suspect != "" {
		// A failure with no answer since: one at a time, until the next
		// outcome tells whether the registry is down.
		limit = 1
	}
	slots := c.work.slots
	if len(slots) < limit {
		return limit, time.Time{}
	}
	newest := slots[0].started
	for _, f := range slots[1:] {
		if f.started.After(newest) {
			newest = f.started
		}
	}
	if now.Sub(newest) >= policy.SlowCall {
		return len(slots) + 1, time.Time{}
	}
	return limit, newest.Add(policy.SlowCall)
}

// enqueueLocked queues e for a background refresh.
func (c *cache) enqueueLocked(e *entry) {
	if e.queued || c.stopped {
		return
	}
	e.queued = true
	c.work.fifo = append(c.work.fifo, e)
}

// emptiedLocked reports whether e holds the last nodes that a delete event
// left it without, waiting for a create or the registry's confirmation.
// (WithLastKnownNodes keeps such nodes for good instead.)
func (c *cache) emptiedLocked(e *entry) bool {
	s := e.data.Load()
	return s != nil && s.Kept && !c.opts.LastKnownNodes
}

// graceEndLocked returns when the last delete that emptied e has had
// replacementGrace for a create to replace it; zero unless e holds the
// nodes such a delete left.
func (c *cache) graceEndLocked(e *entry) time.Time {
	if !c.emptiedLocked(e) {
		return time.Time{}
	}
	return c.time(e.emptied).Add(replacementGrace)
}

// parkLocked queues e for a background refresh that starts no earlier than
// at, unless it is queued already: to start sooner, or waiting in later for
// a time after at, where it is moved to at.
func (c *cache) parkLocked(e *entry, at, now time.Time) {
	if c.stopped {
		return
	}
	switch {
	case !e.queued:
		e.queued = true
		if c.laterLocked(e, at) {
			c.scheduleLocked(at)
		}
	case e.parked.Queued() && e.parked.At.After(at):
		c.work.later.Move(e.parked, at)
		if c.work.later.Peek() == e.parked {
			c.scheduleLocked(at)
		}
	}
	c.settleLocked(e, now)
}

// laterLocked puts e, queued, in the queue of refreshes that wait for a
// time, to start no earlier than at, and reports whether it is the first
// due there (the maintainer's wake-up may have to come sooner).
func (c *cache) laterLocked(e *entry, at time.Time) (first bool) {
	e.parked = c.work.later.Push(e, at)
	return c.work.later.Peek() == e.parked
}

// requeueLaterLocked puts e, just popped by the pump, back in the queue of
// refreshes that wait for a time, to start no earlier than at; the
// maintainer wakes to set its timer if e is now the first due there.
func (c *cache) requeueLaterLocked(e *entry, at time.Time) {
	e.queued = true
	if c.laterLocked(e, at) {
		c.wake()
	}
}

// wantRefreshLocked is called when a read finds e's data due for a
// refresh and its retry window open: the refresh is queued, and starts at
// once if a slot is free and the registry is up.
func (c *cache) wantRefreshLocked(e *entry, now time.Time) {
	if e.flight != nil || c.stopped {
		return
	}
	c.enqueueLocked(e)
	c.pumpLocked(now)
	if e.queued && c.health.Down {
		c.wake() // to schedule the next probe
	}
}

// needsRefreshLocked reports whether e has data that is due for a refresh
// or predates the last resync, and no refresh in flight.
func (c *cache) needsRefreshLocked(e *entry, now time.Time) bool {
	s := e.data.Load()
	return s != nil && e.flight == nil && (!now.Before(s.RefreshAt) || e.epoch < c.epoch)
}

// pumpLocked starts queued refreshes while slots are free and the registry
// health allows. While the registry is down, one of them is the probe.
func (c *cache) pumpLocked(now time.Time) {
	w := &c.work
	if c.resyncDueLocked() {
		// The resync refreshes every entry, with one ListServices where
		// it can: queued refreshes wait for it, and then find most
		// entries current.
		return
	}
	limit, _ := c.slotsLocked(now)
	for skipped := 0; len(w.slots) < limit && w.pending() && !c.stopped; skipped++ {
		if skipped == scanChunk {
			// Entries that start nothing (current, or inside their
			// window) are passed over a chunk at a time, so that one
			// call never holds the lock for a whole resync's worth.
			c.wake()
			return
		}
		if ok, _ := c.health.Allows(now); !ok {
			c.scheduleLocked(c.health.NextProbe())
			return
		}
		e := w.pop()
		e.queued = false
		if at := c.graceEndLocked(e); now.Before(at) {
			// Emptied by a delete less than replacementGrace ago: its
			// replacement's create may be on its way.
			c.requeueLaterLocked(e, at)
			continue
		}
		if c.needsRefreshLocked(e, now) {
			if _, _, why := c.gateLocked(e, now, true); why == admitted {
				continue
			} else if why == windowOpen && c.emptiedLocked(e) {
				// The confirmation of a delete that emptied it cannot
				// go before its window: the delete is believed, as
				// go-micro's cache believes it, rather than the dead
				// nodes served for a window. No create came in
				// replacementGrace.
				c.storeLocked(e, nil, now)
				c.forgetLocked(e, e.throttle.OpensAt(c.opts.MinimumRetryInterval), now)
			} else if why == windowOpen {
				c.requeueLaterLocked(e, e.throttle.OpensAt(c.opts.MinimumRetryInterval)) // still quiet
			}
		}
		c.settleLocked(e, now)
	}
	if w.pending() && !c.stopped {
		// Every slot is taken: the maintainer starts one more when they
		// have been held for long enough.
		if _, at := c.slotsLocked(now); !at.IsZero() {
			c.scheduleLocked(at)
		}
	}
}

// streamDownLocked reports whether the watch stream is down: the single
// stream, or a per-service watch.
func (c *cache) streamDownLocked() bool {
	if s, ok := c.stream.(*watchset.Set); ok {
		return s.Failing()
	}
	return c.stream == nil && c.watching
}

// probeCachedLocked starts a probe while the registry is held down, its
// stream is down and no refresh waits: a re-validation of a cached
// service, whose data nothing keeps current meanwhile. Without it, a
// registry held down on a Watch that fails while GetService answers would
// stay down for as long as no refresh falls due. It returns when to try
// again (zero: a probe started or is out).
func (c *cache) probeCachedLocked(now time.Time) time.Time {
	if ok, probe := c.health.Allows(now); !ok || !probe {
		return c.health.NextProbe()
	}
	n := 0
	var pick *entry
	c.entries.Range(func(_, v any) bool {
		e := v.(*entry)
		if e.data.Load() != nil && e.flight == nil && !e.queued && !e.gone && c.allowsLocked(e, now) {
			pick = e
			return false
		}
		n++
		return n < scanChunk
	})
	if pick == nil {
		return now.Add(c.health.Interval)
	}
	c.gateLocked(pick, now, true)
	return time.Time{}
}

// scheduleLocked makes sure that the maintainer runs at at or earlier: it
// wakes the maintainer unless that is already due to run by then. Without
// it, work left for later by a lookup (a refresh waiting for a slot to
// free up) would wait for whatever woke the maintainer next.
func (c *cache) scheduleLocked(at time.Time) {
	if w := &c.work; w.wakeAt.IsZero() || at.Before(w.wakeAt) {
		w.wakeAt = at
		c.wake()
	}
}

// promoteLocked moves the entries whose retry window has closed from later
// back to the queue, a chunk at a time, so that a resync whose windows all
// close together does not hold the lock for all of them at once. It reports
// whether more are due.
func (c *cache) promoteLocked(now time.Time) (more bool) {
	w := &c.work
	for n := 0; n < scanChunk; n++ {
		it := w.later.PopDue(now)
		if it == nil {
			return false
		}
		w.fifo = append(w.fifo, it.Value) // still queued
	}
	it := w.later.Peek()
	return it != nil && !it.At.After(now)
}

// maintain runs the background work that no lookup triggers: resyncs,
// queued refreshes waiting for a window or a probe, dropping dataless and
// idle entries, and writing the snapshot file. It sleeps until there is
// work, and exits on Stop.
func (c *cache) maintain() {
	defer c.wg.Done()
	for {
		wait, again := c.maintainOnce()
		if again {
			continue
		}
		var t *time.Timer
		var timer <-chan time.Time
		if wait > 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-c.ctx.Done():
		case <-c.kick:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if c.ctx.Err() != nil {
			return
		}
	}
}

// wake tells the maintainer that there is work. It never blocks.
func (c *cache) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// maintainOnce does the work that is due, and returns how long until more
// is due (0: nothing is), or again when it should run once more at once.
func (c *cache) maintainOnce() (wait time.Duration, again bool) {
	now := c.now()
	var out outbox
	defer c.flush(&out)
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return 0, false
	}
	c.sweepLocked(now)
	more := c.promoteLocked(now)
	c.pumpLocked(now)
	if more {
		c.work.wakeAt = now
		c.mu.Unlock()
		return 0, true
	}
	var next time.Time
	if it := c.sweep.Peek(); it != nil {
		next = it.At
	}
	if it := c.work.later.Peek(); it != nil {
		next = earliest(next, it.At)
	}
	if h := &c.health; h.Down && c.work.pending() {
		next = earliest(next, h.NextProbe())
	} else if h.Down && c.streamDownLocked() {
		next = earliest(next, c.probeCachedLocked(now))
	}
	if c.work.pending() {
		_, at := c.slotsLocked(now)
		next = earliest(next, at)
	}
	next = earliest(next, c.proveStreamLocked(now, false, &out))
	write := false
	if c.dirty {
		if due := c.lastWrite.Add(SnapshotInterval); !now.Before(due) {
			write = true
		} else {
			next = earliest(next, due)
		}
	}
	evict := false
	if d := c.opts.IdleEviction; d > 0 {
		if !now.Before(c.nextEviction) {
			evict = true
			c.nextEviction = now.Add(d / 4)
		}
		next = earliest(next, c.nextEviction)
	}
	if c.resyncPending {
		if !now.Before(c.resyncBy) {
			// The stream did not come back in time: resync without it.
			c.resyncPending = false
			c.epoch++
		} else {
			next = earliest(next, c.resyncBy)
		}
	}
	staleDirty := c.staleDirty
	c.staleDirty = false
	epoch := c.epoch
	round := c.work.round < epoch
	c.work.round = epoch
	c.work.resyncing = round
	c.work.wakeAt = next
	if round {
		c.work.wakeAt = now
	}
	c.mu.Unlock()

	if round {
		c.resync(epoch)
		c.mu.Lock()
		c.work.resyncing = false
		c.pumpLocked(c.now())
		c.mu.Unlock()
	}
	if evict {
		c.evictIdle(now)
	}
	if staleDirty {
		c.findStaleSince()
	}
	if write {
		c.persist()
	}
	if round {
		return 0, true
	}
	if next.IsZero() {
		return 0, false
	}
	return max(next.Sub(now), time.Millisecond), false
}
