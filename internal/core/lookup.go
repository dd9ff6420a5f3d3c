package core

import (
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/svcdata"
)

// Read is what a lookup that the lock-free path could not answer does:
// serve Services, fail with Err, wait for Call (after Stop, Run says
// that the caller makes the call itself), or wait for Await, the probe
// out, until it ends or Until passes, and then ask again (AfterProbe).
type Read struct {
	Services []*registry.Service
	Err      error
	Call     *Call
	Run      bool
	Await    *Call
	Until    time.Time
}

// Ask is which time one lookup asks.
type Ask uint8

const (
	// First is a lookup's first ask.
	First Ask = iota
	// AfterCancel is an ask again after the call the lookup waited for
	// was cancelled: the lookup was counted already.
	AfterCancel
	// AfterProbe is an ask again after the lookup waited for a probe
	// (Read.Await): it was not counted, and it waits for no other.
	AfterProbe
)

// Lookup is the read path for a lookup of name that the entry's mode does
// not cover.
func (k *Core) Lookup(name string, ask Ask, now time.Time) Read {
	again := ask == AfterCancel
	k.sweepDue(now)
	k.startWatcher()
	e := k.entry(name, now)
	if k.cfg.IdleEviction > 0 {
		e.Read.Store(true)
	}
	snap := e.Data.Load()
	usable := k.usable(snap, now)
	pending := e.phase == PhaseFetching || (usable != nil && (e.phase == PhaseQueued || e.phase == PhaseParked))
	var held policy.Data
	if usable != nil {
		held = policy.Data{Held: true, RefreshAt: usable.RefreshAt, Expires: usable.Expires}
	}
	d := policy.Decide(now, held, pending, k.allows(e, now))

	if usable != nil {
		if d == policy.StartRefresh {
			k.wantRefresh(e, now)
		}
		if !now.Before(usable.Expires) && !e.staleTold && !k.health.Down && !k.unconfirmed(usable, now) {
			// (While the registry is down, RegistryDown tells it for
			// every service at once.)
			e.staleTold = true
			k.emit(Event{Kind: ServiceStale, Service: name, Time: now})
		}
		k.settle(e, now)
		if !again {
			k.served(e, usable, now)
		}
		return Read{Services: usable.Services}
	}
	c, run, why := e.call, false, busy
	switch d {
	case policy.StartRefresh:
		c, run, why = k.gate(e, now, false)
	case policy.RefuseThrottled:
		why = windowOpen
	}
	if (why == registryDown || why == windowOpen && e.throttle.LastErr != nil) && ask == First &&
		k.health.Down && k.probe != nil && !k.stopped {
		// Nothing to serve but a failure, and the probe out says whether
		// the registry is back: the caller waits for its answer, SlowCall
		// at most, rather than fail now. (A not-found answer within its
		// window is served as it is.)
		k.dropUnfilled(e, snap, now)
		return Read{Await: k.probe, Until: k.probe.Started.Add(policy.SlowCall)}
	}
	if why == windowOpen || why == registryDown {
		return Read{Err: k.refuse(e, snap, now, why == registryDown, again)}
	}
	if !again {
		k.Stats.Misses.Add(1)
	}
	return Read{Call: c, Run: run}
}

// GaveUp counts a lookup that waited for the probe (Read.Await) and
// ended, its context done, before it asked again: refused.
func (k *Core) GaveUp() {
	k.Stats.Throttled.Add(1)
}

// startWatcher asks for the watcher and the maintainer, with the first
// lookup, never after Stop.
func (k *Core) startWatcher() {
	if k.watching || k.stopped {
		return
	}
	k.watching = true
	k.rd.StartWatcher = true
}

// refuse is the error of a lookup with nothing usable that makes no
// registry call: registry.ErrNotFound itself within the window of a
// not-found answer, and otherwise the throttled error, by the service's
// retry window after a failure or (down) by the registry's health.
func (k *Core) refuse(e *Entry, snap *svcdata.Snapshot, now time.Time, down, again bool) error {
	if !again {
		k.Stats.Throttled.Add(1)
	}
	if !down && snap == nil && e.throttle.LastErr == nil {
		// Within the window of an answer that the registry has no such
		// service: that answer, as the registry gives it, so that
		// err == registry.ErrNotFound holds as through go-micro's cache.
		return registry.ErrNotFound
	}
	te := &ThrottledError{Service: e.Name, Events: k.stream.open}
	if down {
		te.RegistryDown = true
		te.RetryIn = max(0, k.health.NextProbe().Sub(now))
	} else {
		te.RetryIn = e.throttle.RetryIn(now, k.cfg.MinimumRetryInterval, k.resynced(e))
		if !e.throttleTold {
			e.throttleTold = true
			k.emit(Event{Kind: ThrottleStarted, Service: e.Name, Time: now})
		}
	}
	var err error = te
	if snap != nil {
		err = k.tooStale(e.Name, snap, now, err)
	}
	k.dropUnfilled(e, snap, now)
	return err
}

// dropUnfilled drops e, a new entry that no call filled, unless it has a
// window to keep it for.
func (k *Core) dropUnfilled(e *Entry, snap *svcdata.Snapshot, now time.Time) {
	if snap == nil && e.phase == PhaseAbsent && e.item == nil {
		k.forget(e, time.Time{}, now)
	}
}

// served counts data served from the slow path.
func (k *Core) served(e *Entry, s *svcdata.Snapshot, now time.Time) {
	switch {
	case now.Before(s.Expires):
		k.Stats.FreshServes.Add(1)
	case k.unconfirmed(s, now):
		k.Stats.EventServes.Add(1)
	default:
		k.Stats.StaleServes.Add(1)
		k.StaleServed(e, s)
	}
}

// usable returns snap unless it is too stale to serve under MaxStale.
func (k *Core) usable(snap *svcdata.Snapshot, now time.Time) *svcdata.Snapshot {
	if snap == nil || k.cfg.MaxStale <= 0 || now.Before(snap.Expires) ||
		now.Sub(snap.ConfirmedAt()) <= k.cfg.MaxStale {
		return snap
	}
	return nil
}

func (k *Core) tooStale(name string, snap *svcdata.Snapshot, now time.Time, cause error) error {
	return &TooStaleError{Service: name, Age: now.Sub(snap.ConfirmedAt()), Limit: k.cfg.MaxStale, Cause: cause}
}

// serve is what a caller waiting on a call gets from stale data after the
// call failed with cause: the data, unless it is too stale.
func (k *Core) serve(name string, s *svcdata.Snapshot, now time.Time, cause error) ([]*registry.Service, error) {
	if k.usable(s, now) == nil {
		return nil, k.tooStale(name, s, now, cause)
	}
	return s.Services, nil
}

// wantRefresh is called when a read finds e's data due for a refresh and
// its retry window open: the refresh is queued, and starts at once if a
// slot is free and the registry is up.
func (k *Core) wantRefresh(e *Entry, now time.Time) {
	if e.phase != PhaseIdle || k.stopped {
		return
	}
	k.move(e, PhaseQueued, time.Time{}, now)
	k.pump(now)
	if e.phase == PhaseQueued && k.health.Down {
		k.wake() // to schedule the next probe
	}
}
