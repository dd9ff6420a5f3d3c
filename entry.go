package cache

import (
	"sync/atomic"
	"time"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/svcdata"
	"github.com/regcache/cache/internal/timeq"
	"go-micro.dev/v4/registry"
)

// confirmLocked records that the registry told the nodes of s, the data
// e holds, again at now: what storing a copy of s confirmed at now would
// do, without the copy. The caller holds c.mu.
func (c *cache) confirmLocked(e *entry, s *svcdata.Snapshot, now time.Time) {
	old := s.ConfirmedAt()
	s.Confirm(now)
	if e.staleRead.Swap(false) {
		c.staleEndedLocked(old, now)
	}
	if now.Before(s.Expires) {
		e.staleTold = false
	}
	if c.opts.SnapshotPath != "" {
		c.markDirtyLocked()
	}
	if c.opts.MaxStale > 0 {
		// The limit moved; nothing else that sets the mode did.
		e.mode.Store(modeSlow)
		c.settleLocked(e, now)
	}
}

// A moment is a time kept per service, as the nanoseconds since the
// cache's base: 8 bytes where a time.Time takes 24, and an entry is the
// cache's cost per service. Moments of the times c.now gives keep their
// monotonic reading. The zero moment is no time.
type moment int64

// moment returns t as a moment; the zero time gives the zero moment.
func (c *cache) moment(t time.Time) moment {
	if t.IsZero() {
		return 0
	}
	return moment(t.Sub(c.base))
}

// time returns m as a time; the zero moment gives the zero time.
func (c *cache) time(m moment) time.Time {
	if m == 0 {
		return time.Time{}
	}
	return c.base.Add(time.Duration(m))
}

// Modes of an entry, which tell a lookup what it may do without the lock.
const (
	// modeSlow: take the slow path, which decides with the clock.
	modeSlow uint32 = iota
	// modeFresh: serve the data and count a fresh hit.
	modeFresh
	// modeStale: serve the data and count a stale serve; nothing is to be
	// done about it now (a refresh is in flight or queued, or the retry
	// window is open).
	modeStale
	// modeEvent: as modeStale, for data that an event announced less than
	// a TTL ago and that no refresh has confirmed yet: counted apart, as
	// an event serve.
	modeEvent
)

// entry is the state of one service. data, mode, read and staleRead are
// read without a lock; every other field is guarded by cache.mu.
type entry struct {
	name string
	data atomic.Pointer[svcdata.Snapshot] // nil when nothing is cached
	// mode is modeSlow unless the data may be served without the lock. The
	// lock-free path trusts it instead of reading the clock, which costs
	// more than the rest of a hit: settleLocked sets it with a timer that
	// puts it back to modeSlow when the reason runs out. Putting it back
	// early only sends reads down the slow path, which decides again.
	mode atomic.Uint32
	// read is set by lookups and cleared by the idle-eviction scan, which
	// turns it into lastRead; only kept with WithIdleEviction.
	read atomic.Bool
	// staleRead is set the first time the current stale data is served, so
	// that its age counts towards Stats.OldestStaleServed.
	staleRead atomic.Bool
	// timerFired is set by the mode timer when it fires, before it puts
	// the mode back.
	timerFired atomic.Bool

	// The flags come together, and the words after them, so that the
	// entry takes no padding between them: an entry is the cache's cost
	// per service.

	// parked is the entry's place in the queue of refreshes that wait for
	// a time (work.later), while it waits there: a park for an earlier
	// time moves it.
	parked *timeq.Item[*entry]

	// queued is set while the entry waits in the background queue; gone
	// once it is dropped from the map, so that code holding it can tell
	// without a map lookup.
	queued, gone bool
	// staleTold and throttleTold remember that the observer was told, so
	// that it hears of each state change once.
	staleTold, throttleTold bool
	// unheard is set while the registry's last answers were no nodes and
	// no error for the nodes the entry holds, not yet believed. heardMark
	// is cache.heard at the last of them, and heardEmpty is when the first
	// that came while the registry was heard from otherwise ended.
	unheard bool

	timer *time.Timer // sets mode to modeSlow when the mode's reason runs out
	// timerFor is the end of the mode the timer is armed for; zero while
	// it is stopped.
	timerFor moment
	lastRead moment  // last read, to the eviction scan's period
	flight   *flight // the refresh in progress, if any
	throttle policy.Throttle
	// sweepAt is when a dataless entry is dropped; zero while it has data.
	sweepAt moment
	// emptied is when the last delete that left e with no node came: its
	// confirmation waits replacementGrace from then.
	emptied moment
	// epoch is the resync epoch in which the cached data was fetched. Data
	// from an earlier epoch may have missed changes, and is re-validated.
	// seq is the number of the call that fetched it (cache.calls).
	epoch, seq uint64
	heardMark  uint64
	heardEmpty moment
}

// heldServices is the data e holds now, for svcdata.CloneInLike.
// Snapshots are immutable, so it needs no lock.
func heldServices(e *entry) []*registry.Service {
	if s := e.data.Load(); s != nil {
		return s.Services
	}
	return nil
}

// entryLocked returns the entry for name, creating and storing it if there
// is none.
func (c *cache) entryLocked(name string) *entry {
	if v, ok := c.entries.Load(name); ok {
		return v.(*entry)
	}
	e := &entry{name: name, lastRead: c.moment(c.now())}
	c.entries.Store(name, e)
	c.byName[name] = e
	c.count++
	c.servicesChangedLocked(name, true)
	return e
}

// dropLocked removes e from the cache, unless something still needs it.
func (c *cache) dropLocked(e *entry) {
	if e.flight != nil || e.queued {
		return
	}
	if !e.gone {
		e.gone = true
		c.entries.Delete(e.name)
		delete(c.byName, e.name)
		c.count--
		c.servicesChangedLocked(e.name, false)
		if e.data.Load() != nil {
			c.withData--
			if c.opts.SnapshotPath != "" {
				c.markDirtyLocked()
			}
		}
		if e.timer != nil {
			e.timer.Stop()
			e.timerFor = 0
		}
	}
}

// storeLocked makes s the entry's data (nil for none) and settles the mode.
// The mode goes to modeSlow before the data changes, so that a lock-free
// reader never pairs the new data with the old data's mode.
func (c *cache) storeLocked(e *entry, s *svcdata.Snapshot, now time.Time) {
	e.mode.Store(modeSlow)
	old := e.data.Swap(s)
	switch {
	case old == nil && s != nil:
		c.withData++
		e.sweepAt = 0
	case old != nil && s == nil:
		c.withData--
	}
	if old != nil && e.staleRead.Swap(false) {
		c.staleEndedLocked(old.ConfirmedAt(), now)
	}
	if s != nil && now.Before(s.Expires) {
		e.staleTold = false
	}
	if c.opts.SnapshotPath != "" {
		c.markDirtyLocked()
	}
	c.settleLocked(e, now)
}

// timerLead is how early a mode's timer fires before the mode's reason runs
// out. From then on reads decide with the clock, so a read at or after the
// moment (a retry window closing, data expiring) always sees it, unless the
// timer is later than that.
const timerLead = time.Millisecond

// settleLocked sets the entry's mode from its state at now, and arms the
// timer that ends it. It is called after every change that can matter to a
// lookup: data stored, a refresh started or landed, the entry queued or
// taken from the queue.
func (c *cache) settleLocked(e *entry, now time.Time) {
	mode, until := c.modeLocked(e, now)
	if !until.IsZero() && until.Sub(now) <= timerLead {
		mode = modeSlow
	}
	e.mode.Store(mode)
	if mode == modeSlow || until.IsZero() {
		if e.timer != nil {
			e.timer.Stop()
			e.timerFor = 0
		}
		return
	}
	if e.timerFor == c.moment(until) && !e.timerFired.Load() {
		// Armed for this end already (the usual case of an event, which
		// keeps the expiry), and not fired: arming it again would cost
		// more than the rest of the event. now may be a time read before
		// the lock was taken, so it cannot tell that the timer has not
		// fired; the flag does. The mode was stored before the flag is
		// read, and the timer sets the flag before it puts the mode
		// back, so a timer that fires meanwhile either puts back the
		// mode stored here or is seen to have fired.
		return
	}
	e.timerFor = c.moment(until)
	e.timerFired.Store(false)
	wait := until.Sub(now) - timerLead
	if e.timer == nil {
		e.timer = time.AfterFunc(wait, func() {
			e.timerFired.Store(true)
			e.mode.Store(modeSlow)
		})
		return
	}
	e.timer.Reset(wait)
}

// modeLocked is the mode a lookup of e may use at now, and until when
// (zero: until the state changes again).
func (c *cache) modeLocked(e *entry, now time.Time) (mode uint32, until time.Time) {
	s := e.data.Load()
	if s == nil || c.stopped {
		return modeSlow, time.Time{}
	}
	if now.Before(s.RefreshAt) {
		return modeFresh, s.RefreshAt
	}
	// From here a read wants a refresh, unless one is in flight or queued,
	// or the retry window is open.
	var quietUntil time.Time // zero: quiet until the state changes
	switch {
	case e.flight != nil || e.queued:
	case !c.allowsLocked(e, now):
		quietUntil = e.throttle.OpensAt(c.opts.MinimumRetryInterval)
	default:
		return modeSlow, time.Time{}
	}
	if now.Before(s.Expires) {
		return modeFresh, earliest(s.Expires, quietUntil)
	}
	if c.opts.MaxStale > 0 {
		limit := s.ConfirmedAt().Add(c.opts.MaxStale)
		if now.After(limit) {
			return modeSlow, time.Time{}
		}
		quietUntil = earliest(quietUntil, limit.Add(1))
	}
	if c.unconfirmed(s, now) {
		return modeEvent, earliest(quietUntil, s.EventSince.Add(c.opts.TTL))
	}
	return modeStale, quietUntil
}

// unconfirmed reports whether expired data s is an event's that no
// refresh has confirmed yet, for less than a TTL: it is as current as the
// stream, and serving it is no sign of trouble, as a stale serve is. A
// TTL after the first such event it counts as stale again, however many
// events came since, so that events the registry never confirms (a
// crash-looping instance, re-registrations) do not hide a failure.
func (c *cache) unconfirmed(s *svcdata.Snapshot, now time.Time) bool {
	return s.Source == svcdata.FromEvent && !s.Kept && now.Sub(s.EventSince) < c.opts.TTL
}

// earliest returns the earlier of two times, where zero means never.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
