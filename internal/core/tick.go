package core

import (
	"time"

	"github.com/regcache/cache/internal/policy"
)

// Tick does the background work that is due at now, which no lookup
// triggers: resync rounds, queued refreshes waiting for a moment or a
// probe, dropping dataless and idle entries, writing the snapshot file.
// It returns when more is due (zero: when woken), or again when it should
// run once more at once; each call does a bounded amount of work.
func (k *Core) Tick(now time.Time) (next time.Time, again bool) {
	if k.stopped {
		return time.Time{}, false
	}
	k.sweepDue(now)
	more := k.promote(now)
	k.pump(now)
	if more {
		k.work.wakeAt = now
		return time.Time{}, true
	}
	if it := k.sweep.Peek(); it != nil {
		next = it.At
	}
	if it := k.work.later.Peek(); it != nil {
		next = earliest(next, it.At)
	}
	if h := &k.health; h.Down && k.work.pending() {
		next = earliest(next, h.NextProbe())
	} else if h.Down && k.streamDown() {
		next = earliest(next, k.probeCached(now))
	}
	if k.work.pending() {
		_, at := k.slotsAt(now)
		next = earliest(next, at)
	}
	next = earliest(next, k.proveStream(now, false))
	next = earliest(next, k.persistDue(now))
	if d := k.cfg.IdleEviction; d > 0 {
		if !now.Before(k.scans.nextEviction) {
			k.scans.evict = true
			k.scans.nextEviction = now.Add(d / 4)
		}
		next = earliest(next, k.scans.nextEviction)
	}
	if st := &k.stream; st.resyncPending {
		if !now.Before(st.resyncBy) {
			// The stream did not come back in time: resync without it.
			st.resyncPending = false
			k.advance()
		} else {
			next = earliest(next, st.resyncBy)
		}
	}
	if k.work.round == nil && k.work.lastRound < k.epoch {
		k.startRound(now)
	}
	if k.work.round != nil {
		at, more := k.stepRound(now)
		again = again || more
		next = earliest(next, at)
	}
	if k.scan(now) {
		again = true
	}
	k.work.wakeAt = next
	if again {
		k.work.wakeAt = now
	}
	return next, again
}

// sweepDue drops the dataless entries that are due. It costs O(log n)
// per entry dropped and O(1) otherwise, so the read path runs it on every
// lookup that takes the lock.
func (k *Core) sweepDue(now time.Time) {
	for {
		it := k.sweep.PopDue(now)
		if it == nil {
			return
		}
		if e := it.Value; e.phase == PhaseAbsent && e.item == it {
			e.item = nil
			k.move(e, PhaseGone, time.Time{}, now)
		}
	}
}

// scans are the walks over every entry that the maintainer makes a chunk
// per Tick: idle eviction, and the search for the oldest stale data
// served.
type scans struct {
	evict, stale     bool
	evictAt, staleAt int
	oldest           int64
	staleDirty       bool
	nextEviction     time.Time
}

// scan does a chunk of each scan under way, and reports whether more is
// left.
func (k *Core) scan(now time.Time) (more bool) {
	s := &k.scans
	if s.staleDirty && !s.stale {
		s.staleDirty, s.stale, s.staleAt, s.oldest = false, true, 0, 0
	}
	if s.evict {
		i := s.evictAt
		for n := 0; n < scanChunk && i < len(k.all); n++ {
			e := k.all[i]
			k.evictIdle(e, now)
			if i < len(k.all) && k.all[i] == e {
				i++
			} // else dropped: the last entry took its place, and is next
		}
		s.evictAt = i
		if s.evictAt >= len(k.all) {
			s.evict, s.evictAt = false, 0
		}
	}
	if s.stale {
		end := min(s.staleAt+scanChunk, len(k.all))
		for _, e := range k.all[s.staleAt:end] {
			if d := e.Data.Load(); d != nil && e.StaleRead.Load() {
				if m := int64(k.moment(d.ConfirmedAt())); s.oldest == 0 || m < s.oldest {
					s.oldest = m
				}
			}
		}
		s.staleAt = end
		if s.staleAt >= len(k.all) {
			k.Stats.StaleSince.Store(s.oldest)
			s.stale = false
		}
	}
	return s.evict || s.stale
}

// evictIdle drops e if it was not read for IdleEviction. A read since the
// last scan counts as a read at this one, so an entry is dropped between d
// and d + d/4 after its last read, never before. An open retry window is
// kept, even where a resync allows its early call: dropping it would let
// the next lookup call the registry too soon.
func (k *Core) evictIdle(e *Entry, now time.Time) {
	if e.Read.Swap(false) {
		e.lastRead = k.moment(now)
	} else if now.Sub(k.time(e.lastRead)) >= k.cfg.IdleEviction && k.windowClosed(e, now) {
		k.drop(e, now)
	}
}

// Stop records that the cache stopped at now: no background work starts
// from now on, calls are made by their callers, and every read decides
// with the clock. It reports whether this was the first Stop.
func (k *Core) Stop(now time.Time) (first bool) {
	first = !k.stopped
	if !first {
		return false
	}
	k.stopped, k.stoppedAt = true, now
	for _, e := range k.all {
		if e.timerAt != 0 {
			e.timerAt = 0
			k.rd.Timers = append(k.rd.Timers, TimerOp{Entry: e})
		}
		e.Mode.Store(ModeSlow)
	}
	return true
}

// SlowCall is how long a call may be out before the cache stops waiting
// for it to decide.
const SlowCall = policy.SlowCall

// Sweeping is the number of entries without data waiting to be dropped.
func (k *Core) Sweeping() int { return k.sweep.Len() }
