package core

import (
	"sync/atomic"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/svcdata"
	"github.com/regcache/cache/internal/timeq"
)

// Phase is where an entry stands in its life. Every change of phase goes
// through move, along the table in table.go.
type Phase uint8

const (
	// PhaseAbsent: no data and nothing under way. The entry is kept while
	// its retry window (or the memory of a failure) lasts, in the sweep
	// queue, and dropped when it ends.
	PhaseAbsent Phase = iota
	// PhaseIdle: data, and nothing under way.
	PhaseIdle
	// PhaseQueued: data, waiting in line for a background refresh.
	PhaseQueued
	// PhaseParked: data, waiting for a moment before it queues: its retry
	// window to close, or a delete's grace to end.
	PhaseParked
	// PhaseFetching: a registry call for the service is out.
	PhaseFetching
	// PhaseGone: dropped from the cache; code that still holds the entry
	// sees it.
	PhaseGone

	phases
)

var phaseNames = [phases]string{"absent", "idle", "queued", "parked", "fetching", "gone"}

func (p Phase) String() string {
	if p < phases {
		return phaseNames[p]
	}
	return "phase?"
}

// A moment is a time kept per entry, as the nanoseconds since
// Config.Base: 8 bytes where a time.Time takes 24. The zero moment is no
// time.
type moment int64

func (k *Core) moment(t time.Time) moment {
	if t.IsZero() {
		return 0
	}
	return moment(t.Sub(k.cfg.Base))
}

func (k *Core) time(m moment) time.Time {
	if m == 0 {
		return time.Time{}
	}
	return k.cfg.Base.Add(time.Duration(m))
}

// Entry is the state of one service.
//
// Data, Mode, Read, StaleRead and TimerFired are read without the lock, by
// the cache's lock-free path; Timer is the shell's, armed as Ready.Timers
// say. Every other field belongs to the core.
type Entry struct {
	Name string
	// Data is the service's data, nil for none. A snapshot is never
	// changed once stored, but for its confirmation time.
	Data atomic.Pointer[svcdata.Snapshot]
	// Mode is ModeSlow unless Data may be served without the lock; the
	// shell's timer puts it back to ModeSlow when its reason runs out.
	Mode atomic.Uint32
	// Read is set by lookups, with idle eviction, and cleared by the
	// eviction scan; StaleRead is set the first time the stale data held
	// is served; TimerFired by the mode timer when it fires.
	Read, StaleRead, TimerFired atomic.Bool
	// Timer is the shell's mode timer.
	Timer *time.Timer

	phase Phase
	// staleTold and throttleTold remember that the observer was told.
	staleTold, throttleTold bool
	// ticket is the entry's place in the line, while PhaseQueued.
	ticket uint32
	// call is the registry call out, while PhaseFetching.
	call *Call
	// item is the entry's place in the timed queue of its phase: later
	// while PhaseParked, the sweep while PhaseAbsent.
	item *timeq.Item[*Entry]
	// index is the entry's in Core.all.
	index int

	throttle policy.Throttle
	// epoch is the resync epoch in which the data was fetched, and seq
	// the number of the call that fetched it.
	epoch, seq uint64
	// emptied is when the last delete that left the entry with no node
	// came: its confirmation waits ReplacementGrace from then.
	emptied moment
	// doubt is the record of answers without nodes not yet believed.
	doubt emptyDoubt
	// lastRead is the last read the eviction scan saw; timerAt is when
	// the mode timer fires, zero while it is stopped; keep is when an
	// entry without data goes (forget).
	lastRead, timerAt, keep moment
}

// Phase returns the entry's phase.
func (e *Entry) Phase() Phase { return e.phase }

// Call returns the registry call out for the entry, or nil.
func (e *Entry) Call() *Call { return e.call }

// Services is the data the entry holds now, or nil. It needs no lock.
func (e *Entry) Services() []*registry.Service {
	if s := e.Data.Load(); s != nil {
		return s.Services
	}
	return nil
}

// entry returns the entry for name, creating it if there is none.
func (k *Core) entry(name string, now time.Time) *Entry {
	if e := k.byName[name]; e != nil {
		return e
	}
	e := &Entry{Name: name, lastRead: k.moment(now), index: len(k.all)}
	k.byName[name] = e
	k.all = append(k.all, e)
	k.heldSeq++
	k.rd.Index = append(k.rd.Index, IndexChange{Entry: e, Held: true, Seq: k.heldSeq})
	return e
}

// Find returns the entry for name, or nil.
func (k *Core) Find(name string) *Entry { return k.byName[name] }

// Len is the number of entries.
func (k *Core) Len() int { return len(k.all) }

// Current returns the entry that holds e's name now: e, unless it was
// dropped and the name taken again.
func (k *Core) Current(e *Entry) *Entry {
	if e.phase == PhaseGone {
		if s := k.byName[e.Name]; s != nil {
			return s
		}
	}
	return e
}

// move is the one place where an entry changes phase. It takes the entry
// out of what held it in its old phase (the line is left lazily: a stale
// ticket is skipped) and puts it where the new one keeps it: the line, the
// queue of later refreshes (due at), the sweep (at: when it goes; at once
// if that is not after now), or out of the cache. A move the table does
// not allow is a bug of the core: it is logged and counted (the tests
// fail on it), and made.
func (k *Core) move(e *Entry, to Phase, at, now time.Time) {
	from := e.phase
	if k.moves != nil {
		*k.moves = append(*k.moves, Move{e.Name, from, to})
	}
	if !allowed[from][to] {
		k.Violations++
		k.log(Error, "regcache: internal error: service %s moved from %v to %v, which the transition table does not allow", quoteName(e.Name), from, to)
	}
	switch from {
	case PhaseParked:
		k.work.later.Remove(e.item)
		e.item = nil
	case PhaseAbsent:
		if e.item != nil {
			k.sweep.Remove(e.item)
			e.item = nil
		}
	case PhaseFetching:
		if to != PhaseFetching {
			e.call = nil
		}
	}
	e.phase = to
	switch to {
	case PhaseQueued:
		e.ticket++
		k.work.line = append(k.work.line, ticket{e, e.ticket})
	case PhaseParked:
		e.item = k.work.later.Push(e, at)
		if k.work.later.Peek() == e.item {
			k.schedule(at)
		}
	case PhaseAbsent:
		if !at.After(now) {
			k.drop(e, now)
			return
		}
		e.item = k.sweep.Push(e, at)
		if k.sweep.Peek() == e.item {
			k.schedule(at)
		}
	case PhaseGone:
		k.remove(e, now)
	}
}

// remove takes a dropped entry out of the cache at now.
func (k *Core) remove(e *Entry, now time.Time) {
	delete(k.byName, e.Name)
	last := len(k.all) - 1
	k.all[e.index] = k.all[last]
	k.all[e.index].index = e.index
	k.all[last] = nil
	k.all = k.all[:last]
	k.heldSeq++
	k.rd.Index = append(k.rd.Index, IndexChange{Entry: e, Held: false, Seq: k.heldSeq})
	k.stream.cleared(e.Name)
	if s := e.Data.Load(); s != nil {
		k.withData--
		k.markDirty()
		if e.StaleRead.Swap(false) {
			// The stale data served goes with it: it no longer ages.
			k.staleEnded(s.ConfirmedAt())
		}
	}
	if e.timerAt != 0 {
		e.timerAt = 0
		k.rd.Timers = append(k.rd.Timers, TimerOp{Entry: e})
	}
}

// drop drops e at now, unless something still needs it: a call out, a place in
// the line or the queue of later refreshes.
func (k *Core) drop(e *Entry, now time.Time) {
	switch e.phase {
	case PhaseAbsent, PhaseIdle:
		k.move(e, PhaseGone, time.Time{}, now)
	}
}

// rest puts e, whose call has just ended, where its data says: without
// data it is kept until until, or its retry window's end if later; with
// the last nodes a delete left it waits for the delete's grace, then for
// the registry's confirmation; with data in doubt (doubted: the call
// started before the last resync) it queues; otherwise it is idle. It is
// the one rule for where an entry goes once its call is done, whatever
// the call's outcome.
func (k *Core) rest(e *Entry, until time.Time, doubted bool, now time.Time) {
	s := e.Data.Load()
	switch {
	case s == nil:
		k.forget(e, until, now)
	case k.stopped:
		k.move(e, PhaseIdle, time.Time{}, now)
	case s.Hold == svcdata.Emptied && now.Before(k.graceEnd(e)):
		k.move(e, PhaseParked, k.graceEnd(e), now)
	case doubted || s.Hold == svcdata.Emptied:
		k.move(e, PhaseQueued, time.Time{}, now)
	default:
		k.move(e, PhaseIdle, time.Time{}, now)
	}
}

// forget arranges for e, which holds no data, to be dropped at until, or
// once its retry window closes if that is later, or at the time it was
// to go before, if that is later still: an entry back from the line, its
// re-validation refused, keeps the memory of its failure.
func (k *Core) forget(e *Entry, until, now time.Time) {
	if w := e.throttle.OpensAt(k.cfg.MinimumRetryInterval); w.After(until) {
		until = w
	}
	if kept := k.time(e.keep); kept.After(until) && e.throttle.LastErr != nil {
		until = kept
	}
	e.keep = k.moment(until)
	if e.phase == PhaseAbsent && e.item != nil && e.item.At.Equal(until) {
		return
	}
	k.move(e, PhaseAbsent, until, now)
}

// store makes s the entry's data (nil for none), and settles the mode. The
// mode goes to ModeSlow before the data changes, so that a lock-free
// reader never pairs the new data with the old data's mode. An entry that
// loses its data while nothing is under way is forgotten at once, kept
// for its retry window: on every path.
func (k *Core) store(e *Entry, s *svcdata.Snapshot, now time.Time) {
	e.Mode.Store(ModeSlow)
	old := e.Data.Swap(s)
	switch {
	case old == nil && s != nil:
		k.withData++
		if e.phase == PhaseAbsent {
			k.move(e, PhaseIdle, time.Time{}, now)
		}
	case old != nil && s == nil:
		k.withData--
	}
	if old != nil && e.StaleRead.Swap(false) {
		k.staleEnded(old.ConfirmedAt())
	}
	if s != nil && now.Before(s.Expires) {
		e.staleTold = false
	}
	k.markDirty()
	if s == nil {
		switch e.phase {
		case PhaseIdle, PhaseQueued, PhaseParked:
			k.forget(e, time.Time{}, now)
		}
	}
	k.settle(e, now)
}

// confirm records that the registry told the nodes of s, the data e holds,
// again at now: what storing a copy of s confirmed at now would do,
// without the copy.
func (k *Core) confirm(e *Entry, s *svcdata.Snapshot, now time.Time) {
	old := s.ConfirmedAt()
	s.Confirm(now)
	if e.StaleRead.Swap(false) {
		k.staleEnded(old)
	}
	if now.Before(s.Expires) {
		e.staleTold = false
	}
	k.markDirty()
	if k.cfg.MaxStale > 0 {
		// The limit moved; nothing else that sets the mode did.
		e.Mode.Store(ModeSlow)
		k.settle(e, now)
	}
}

// Epoch is the resync epoch in which the entry's data was fetched: below
// the core's Epoch, the data is due a re-validation.
func (e *Entry) Epoch() uint64 { return e.epoch }

// Failures counts the entry's failed calls in a row, and RetryInterval is
// its retry interval, base being the minimum.
func (e *Entry) Failures() int { return e.throttle.Failures }

func (e *Entry) RetryInterval(base time.Duration) time.Duration { return e.throttle.Interval(base) }
