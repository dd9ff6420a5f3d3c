package core

import (
	"time"

	"github.com/regcache/cache/internal/svcdata"
)

// An entry's mode tells the cache's lock-free path what a lookup may do
// without taking the lock: serve the data as fresh, as stale or as an
// event's, or ask the core. The core sets it after every change that can
// matter to a lookup, with a timer (the shell's) that puts it back to
// ModeSlow when its reason runs out; putting it back early only sends
// reads to the core, which decides again.

// Modes of an entry, which tell a lookup what it may do without the lock.
const (
	// ModeSlow: take the lock and ask the core.
	ModeSlow uint32 = iota
	// ModeFresh: serve the data and count a fresh hit.
	ModeFresh
	// ModeStale: serve the data and count a stale serve: nothing is to be
	// done about it now (a refresh is under way, or the retry window is
	// open).
	ModeStale
	// ModeEvent: as ModeStale, for data that an event announced less than
	// a TTL ago and no refresh has confirmed yet.
	ModeEvent
)

// timerLead is how early a mode's timer fires before the mode's reason runs
// out. From then on reads decide with the clock, so a read at or after the
// moment (a retry window closing, data expiring) always sees it.
const timerLead = time.Millisecond

// settle sets the entry's mode from its state at now, and asks for the
// timer that ends it. It is called after every change that can matter to a
// lookup.
func (k *Core) settle(e *Entry, now time.Time) {
	mode, until := k.mode(e, now)
	if !until.IsZero() && until.Sub(now) <= timerLead {
		mode = ModeSlow
	}
	e.Mode.Store(mode)
	if mode == ModeSlow || until.IsZero() {
		if e.timerAt != 0 {
			e.timerAt = 0
			k.rd.Timers = append(k.rd.Timers, TimerOp{Entry: e})
		}
		return
	}
	if e.timerAt == k.moment(until) && !e.TimerFired.Load() {
		// Armed for this end already (the usual case of an event, which
		// keeps the expiry), and not fired. The mode was stored before
		// the flag is read, and the timer sets the flag before it puts
		// the mode back, so a timer that fires meanwhile either puts
		// back the mode stored here or is seen to have fired.
		return
	}
	e.timerAt = k.moment(until)
	e.TimerFired.Store(false)
	k.rd.Timers = append(k.rd.Timers, TimerOp{Entry: e, Wait: until.Sub(now) - timerLead})
}

// mode is the mode a lookup of e may use at now, and until when (zero:
// until the state changes again).
func (k *Core) mode(e *Entry, now time.Time) (mode uint32, until time.Time) {
	s := e.Data.Load()
	if s == nil || k.stopped {
		return ModeSlow, time.Time{}
	}
	if now.Before(s.RefreshAt) {
		return ModeFresh, s.RefreshAt
	}
	// From here a read wants a refresh, unless one is under way, or the
	// retry window is open.
	var quietUntil time.Time // zero: quiet until the state changes
	switch {
	case e.phase == PhaseFetching || e.phase == PhaseQueued || e.phase == PhaseParked:
	case !k.allows(e, now):
		quietUntil = e.throttle.OpensAt(k.cfg.MinimumRetryInterval)
	default:
		return ModeSlow, time.Time{}
	}
	if now.Before(s.Expires) {
		return ModeFresh, earliest(s.Expires, quietUntil)
	}
	if k.cfg.MaxStale > 0 {
		limit := s.ConfirmedAt().Add(k.cfg.MaxStale)
		if now.After(limit) {
			return ModeSlow, time.Time{}
		}
		quietUntil = earliest(quietUntil, limit.Add(1))
	}
	if k.unconfirmed(s, now) {
		return ModeEvent, earliest(quietUntil, s.EventSince.Add(k.cfg.TTL))
	}
	return ModeStale, quietUntil
}

// unconfirmed reports whether expired data s is an event's that no
// refresh has confirmed yet, for less than a TTL: it is as current as the
// stream, and serving it is no sign of trouble, as a stale serve is. A
// TTL after the first such event it counts as stale again, however many
// events came since, so that events the registry never confirms do not
// hide a failure.
func (k *Core) unconfirmed(s *svcdata.Snapshot, now time.Time) bool {
	return s.Source == svcdata.FromEvent && s.Hold == svcdata.Current && now.Sub(s.EventSince) < k.cfg.TTL
}

// earliest returns the earlier of two times, where zero means never.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
