package core

import (
	"time"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/timeq"
)

// maxBackground bounds the refreshes that no caller waits for (of stale
// data, ahead of expiry, and re-validations) running at once. While every
// slot has been taken for policy.SlowCall, one more refresh may start: a
// few services whose calls hang then do not keep every other service
// waiting, and a registry that hangs as a whole gets one more call a
// second until its calls time out and it is held down. Their callers are
// served at once, so nothing is lost by queueing them, and a registry that
// starts failing or hanging sees a handful of calls before the cache
// notices, not one per stale service.
const maxBackground = 4

// scanChunk is how many entries one input handles at most per pass over
// many (the line, a resync, a scan), so that the lock is released between
// chunks and lookups never wait long behind a large cache's work.
const scanChunk = 64

// ScanChunk is scanChunk, for the shell's walks over many entries.
const ScanChunk = scanChunk

// workQueue is the background work: the line of entries waiting for a
// refresh slot (PhaseQueued), and the entries waiting for a moment before
// they can join it (PhaseParked). Every operation costs O(1), or O(log n)
// for the timed ones, so a resync of n services costs O(n log n) in all.
type workQueue struct {
	// line holds the queued entries in order; an entry that left the
	// line (its ticket no longer matches) is skipped when reached.
	line  []ticket
	head  int
	later timeq.Queue[*Entry]
	// slots are the background calls out that count against
	// maxBackground.
	slots []*Call
	// lists are the ListServices calls out.
	lists []*Call
	// namesOnly is set once ListServices returned services without nodes:
	// the registry lists names only (mdns does), so resyncs ask per
	// service.
	namesOnly bool
	// round is the resync running, if any, and lastRound the epoch of
	// the last one started.
	round     *round
	lastRound uint64
	// wakeAt is when the maintainer runs next: zero while it sleeps until
	// woken.
	wakeAt time.Time
}

// ticket is an entry's place in the line.
type ticket struct {
	e *Entry
	n uint32
}

// next takes the next entry still in line, or nil.
func (w *workQueue) next() *Entry {
	for w.head < len(w.line) {
		t := w.line[w.head]
		w.line[w.head] = ticket{}
		w.head++
		if w.head == len(w.line) {
			w.line, w.head = w.line[:0], 0
		} else if w.head > 1024 && w.head > len(w.line)/2 {
			w.line = append(w.line[:0], w.line[w.head:]...)
			w.head = 0
		}
		if t.e.phase == PhaseQueued && t.e.ticket == t.n {
			return t.e
		}
	}
	return nil
}

// pending reports whether the line may hold an entry.
func (w *workQueue) pending() bool { return w.head < len(w.line) }

// park has e wait until at before it queues for a background refresh,
// unless it is queued already, or waits for an earlier moment. An entry
// whose call is out is left to the call's end (rest).
func (k *Core) park(e *Entry, at, now time.Time) {
	if k.stopped {
		return
	}
	switch e.phase {
	case PhaseIdle:
		k.move(e, PhaseParked, at, now)
	case PhaseParked:
		if e.item.At.After(at) {
			k.work.later.Move(e.item, at)
			if k.work.later.Peek() == e.item {
				k.schedule(at)
			}
		}
	}
	k.settle(e, now)
}

// enqueue puts e, which has data, in line for a background refresh,
// unless it is there already, waits for a moment, or has a call out.
func (k *Core) enqueue(e *Entry, now time.Time) {
	if e.phase == PhaseIdle && !k.stopped && e.Data.Load() != nil {
		k.move(e, PhaseQueued, time.Time{}, now)
	}
}

// slotsAt returns how many background refreshes may run now, and when
// that may grow (zero: only when a refresh lands).
func (k *Core) slotsAt(now time.Time) (limit int, next time.Time) {
	limit = maxBackground
	if k.health.Suspect != "" {
		// A failure with no answer since: one at a time, until the next
		// outcome tells whether the registry is down.
		limit = 1
	}
	slots := k.work.slots
	if len(slots) < limit {
		return limit, time.Time{}
	}
	newest := slots[0].Started
	for _, c := range slots[1:] {
		if c.Started.After(newest) {
			newest = c.Started
		}
	}
	if now.Sub(newest) >= policy.SlowCall {
		return len(slots) + 1, time.Time{}
	}
	return limit, newest.Add(policy.SlowCall)
}

// needsRefresh reports whether e needs a call: its data is due for a
// refresh, or e, with data or without, predates the last resync.
func (k *Core) needsRefresh(e *Entry, now time.Time) bool {
	s := e.Data.Load()
	return e.epoch < k.epoch || s != nil && !now.Before(s.RefreshAt)
}

// pump starts queued refreshes while slots are free and the registry's
// health allows. While the registry is down, one of them is the probe.
func (k *Core) pump(now time.Time) {
	w := &k.work
	if k.resyncDue() {
		// The resync refreshes every entry, with one ListServices where
		// it can: queued refreshes wait for it, and then find most
		// entries current.
		return
	}
	limit, _ := k.slotsAt(now)
	for skipped := 0; len(w.slots) < limit && w.pending() && !k.stopped; skipped++ {
		if skipped == scanChunk {
			// Entries that start nothing are passed over a chunk at a
			// time, so that one input never holds the lock for a whole
			// resync's worth.
			k.wake()
			return
		}
		if ok, _ := k.health.Allows(now); !ok {
			k.schedule(k.health.NextProbe())
			return
		}
		e := w.next()
		if e == nil {
			break
		}
		if at := k.graceEnd(e); now.Before(at) {
			// Emptied by a delete less than ReplacementGrace ago: its
			// replacement's create may be on its way.
			k.move(e, PhaseParked, at, now)
			continue
		}
		if !k.needsRefresh(e, now) {
			k.passed(e, now)
			continue
		}
		switch _, _, why := k.gate(e, now, true); {
		case why == admitted:
		case e.Data.Load() == nil:
			k.passed(e, now) // kept for its window
		case why == windowOpen && k.graceEnd(e) != (time.Time{}):
			// The confirmation of a delete that emptied it cannot go
			// before its window: the delete is believed, as go-micro's
			// cache believes it, rather than the dead nodes served for a
			// window. No create came in ReplacementGrace.
			k.store(e, nil, now)
		case why == windowOpen:
			k.move(e, PhaseParked, e.throttle.OpensAt(k.cfg.MinimumRetryInterval), now) // still quiet
			k.settle(e, now)
		default:
			k.passed(e, now)
		}
	}
	if w.pending() && !k.stopped {
		// Every slot is taken: the maintainer starts one more when they
		// have been held for long enough.
		if _, at := k.slotsAt(now); !at.IsZero() {
			k.schedule(at)
		}
	}
}

// passed puts e, which the line reached and which starts nothing, back
// where it rests: idle with data, kept for its window without.
func (k *Core) passed(e *Entry, now time.Time) {
	if e.Data.Load() == nil {
		k.forget(e, time.Time{}, now)
		return
	}
	k.move(e, PhaseIdle, time.Time{}, now)
	k.settle(e, now)
}

// promote moves the entries whose moment has come from later to the
// line, a chunk at a time, and reports whether more are due.
func (k *Core) promote(now time.Time) (more bool) {
	w := &k.work
	for n := 0; n < scanChunk; n++ {
		it := w.later.Peek()
		if it == nil || it.At.After(now) {
			return false
		}
		k.move(it.Value, PhaseQueued, time.Time{}, now)
	}
	it := w.later.Peek()
	return it != nil && !it.At.After(now)
}

// unpark moves a chunk of the entries waiting for a moment to the line,
// and reports whether more wait: after a resync, each may make the one
// early call the resync allows, and the gate decides again.
func (k *Core) unpark(now time.Time) (more bool) {
	w := &k.work
	for n := 0; n < scanChunk; n++ {
		it := w.later.Peek()
		if it == nil {
			return false
		}
		k.move(it.Value, PhaseQueued, time.Time{}, now)
	}
	return w.later.Len() > 0
}

// probeCached starts a probe while the registry is held down, its stream
// is down and no refresh waits: a re-validation of a cached service, whose
// data nothing keeps current meanwhile. It returns when to try again
// (zero: a probe started or is out).
func (k *Core) probeCached(now time.Time) time.Time {
	if ok, probe := k.health.Allows(now); !ok || !probe {
		return k.health.NextProbe()
	}
	var pick *Entry
	for i := 0; i < min(len(k.all), scanChunk); i++ {
		e := k.all[i]
		if e.phase == PhaseIdle && k.allows(e, now) {
			pick = e
			break
		}
	}
	if pick == nil {
		return now.Add(k.health.Interval)
	}
	k.gate(pick, now, true)
	return time.Time{}
}
