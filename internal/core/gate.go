package core

import (
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/svcdata"
)

// The gate: every registry call about one service passes gate, which
// decides with the service's retry window and the registry's health, and
// records the attempt before the call starts. Nothing else starts a
// GetService: a caller's refresh, a background refresh, a probe, a
// resync's re-validation and the confirmation of a delete are all its
// callers. So the promise holds for all of them at once: one call per
// service at a time, none within its window, and one call an interval to
// a registry held down (the probe). The one exception, decided here and
// nowhere else, is the early call: once after each call that waited for
// its window, a service whose data the stream has put in doubt may be
// asked ahead of its window. The stream puts data in doubt when it is
// established or re-established (what it missed meanwhile), when the
// registry is back from an outage, when a late watch of the service
// opens, and when it tells of a delete that left the service with no node.
// Whatever the resyncs, a service sees at most two calls in any one
// window. ListServices has a gate of its own, listGate.

// refusal is why the gate keeps a call from the registry.
type refusal uint8

const (
	admitted refusal = iota
	// busy: a call for the service is out; a caller joins it.
	busy
	// windowOpen: the service's retry window is open.
	windowOpen
	// registryDown: the registry is held down, and the probe is not due.
	registryDown
)

// Call is one registry call: a GetService of one service, or a
// ListServices of a resync. The core fills in its result before it lists
// the call in Ready.Done; the shell reads them only after.
type Call struct {
	// ID numbers the call among those that fetch data.
	ID   uint64
	Name string
	// List is set for a ListServices call.
	List bool
	// Background is set for a call that no caller waits for; Probe for
	// the one call that may go to a registry held down.
	Background, Probe bool
	// AwaitDial asks the shell to wait for the watcher's first Watch call
	// to return (or FirstDialWait) before it asks the registry, then to
	// tell the core (Sending).
	AwaitDial bool
	Started   time.Time

	entry *Entry
	// epoch is the resync epoch of the data the call fetches: when it
	// started, or when it was sent (Sending); startEpoch is the epoch when
	// it started, and prevAttempt the service's last attempt before, put
	// back if Stop cancels the call.
	epoch, startEpoch uint64
	prevAttempt       time.Time
	// events are the watch events that arrived while the call was out,
	// replayed onto its answer so that an event newer than the answer is
	// not undone by it; overflow is set when there were too many to keep.
	// deleteAt is when the last delete among them came.
	events   []*registry.Result
	overflow bool
	deleteAt moment
	// warm is set when the service held data as the call started.
	warm bool
	// reopen is set when a watch that started late asked for the service
	// again while the call was out: an answer without data leaves the
	// retry window open.
	reopen bool
	// list is a list call's own state.
	list *listCall

	// Services and Err are the call's result for the callers that wait.
	Services []*registry.Service
	Err      error
	// Waiters is the shell's, for what its callers wait on.
	Waiters any
}

// Held returns the data the call's service holds now, for a copy of the
// answer to share. It needs no lock.
func (c *Call) Held() []*registry.Service {
	if c.entry == nil {
		return nil
	}
	return c.entry.Services()
}

// Data returns the snapshot the call's service holds now, or nil. It
// needs no lock.
func (c *Call) Data() *svcdata.Snapshot {
	if c.entry == nil {
		return nil
	}
	return c.entry.Data.Load()
}

// MaxCallEvents bounds the events kept for replay during one call.
const MaxCallEvents = 1024

// record keeps ev, come at at, for replay onto c's answer.
func (c *Call) record(ev *registry.Result, at moment) {
	limit := MaxCallEvents
	if c.List {
		limit = maxListEvents
	}
	if len(c.events) >= limit {
		c.overflow = true
		return
	}
	c.events = append(c.events, ev)
	if ev.Action == "delete" {
		c.deleteAt = at
	}
}

// gate starts a registry call for e if its state and the registry's allow
// one at now, and says why not otherwise. A background call (no caller
// waits for it) holds a background slot. After Stop, run is set: the
// caller makes the call itself.
func (k *Core) gate(e *Entry, now time.Time, background bool) (c *Call, run bool, why refusal) {
	if e.phase == PhaseFetching {
		return nil, false, busy
	}
	ok, early := e.throttle.Allows(now, k.cfg.MinimumRetryInterval, k.resynced(e))
	why = windowOpen
	probe := false
	if ok {
		ok, probe = k.health.Allows(now)
		why = registryDown
		if !ok && !background {
			ok, probe = k.triedAtWindowEnd(e, now), true
		}
	}
	if !ok {
		return nil, false, why
	}
	k.calls++
	c = &Call{
		ID:          k.calls,
		Name:        e.Name,
		Background:  background,
		Probe:       probe,
		AwaitDial:   !background && !k.stream.dialed && !k.stopped,
		Started:     now,
		entry:       e,
		epoch:       k.epoch,
		startEpoch:  k.epoch,
		prevAttempt: e.throttle.LastAttempt,
		warm:        e.Data.Load() != nil,
	}
	e.throttle.Attempt(now, early)
	e.throttleTold = false
	k.move(e, PhaseFetching, time.Time{}, now)
	e.call = c
	k.Stats.Refreshes.Add(1)
	if background {
		k.work.slots = append(k.work.slots, c)
	}
	if probe {
		k.health.Probing(c.ID, now)
		k.probe = c
	}
	k.settle(e, now)
	if k.stopped {
		return c, true, admitted
	}
	k.rd.Calls = append(k.rd.Calls, c)
	return c, false, admitted
}

// triedAtWindowEnd reports whether e, a service that a caller asks for
// with nothing to serve (no data, or too stale) while the registry is down
// and the probe is not due, may go as the probe: its window has ended
// (TryAt) and no probe has tried the registry since. A probe that has
// stands in for its try, and the next is a window after that probe. So
// each such service is tried as its window ends, as a throttle of its own
// would try it; services whose windows end together share one call, and
// any of them may make the next; and the probes of the interval go on
// among the services whose windows have ended.
func (k *Core) triedAtWindowEnd(e *Entry, now time.Time) bool {
	t := &e.throttle
	end := t.TryAt(k.cfg.MinimumRetryInterval)
	if now.Before(end) {
		return false
	}
	at, tried := k.health.TriedSince(end)
	if tried && at.After(t.Stood) {
		t.Stood = at
	}
	return !tried
}

// Sending tells that c, which waited for the watcher's first Watch call
// (AwaitDial), goes to the registry now: its data is covered by the
// stream if one opened meanwhile.
func (k *Core) Sending(c *Call) {
	if c.epoch == c.startEpoch { // (a late watch lowers it, for a re-validation)
		c.epoch = k.epoch
	}
}

// allows reports whether e's retry window lets a call start at now.
func (k *Core) allows(e *Entry, now time.Time) bool {
	ok, _ := e.throttle.Allows(now, k.cfg.MinimumRetryInterval, k.resynced(e))
	return ok
}

// windowClosed reports whether e's retry window has closed, the early
// call that a resync allows aside.
func (k *Core) windowClosed(e *Entry, now time.Time) bool {
	ok, _ := e.throttle.Allows(now, k.cfg.MinimumRetryInterval, false)
	return ok
}

// resynced reports whether e's data is in doubt since its last attempt:
// the answer it got predates a resync (a stream established, a late watch
// of it, a delete that emptied it), or the failure it got was the
// outage's, which has ended since or may have (a stream established
// since).
func (k *Core) resynced(e *Entry) bool {
	if t := &e.throttle; t.LastErr != nil {
		// A stream established after the failure, while the registry is
		// held down, may be the registry back: the service may be the
		// probe at once, rather than after the stream has proven it.
		return t.Outage(k.health.Back) || !k.stream.openedDown.IsZero() && t.LastAttempt.Before(k.stream.openedDown)
	}
	return e.epoch < k.epoch
}

// listGate reports whether a resync may call ListServices at now: at
// most maxLists out at once, a new one only once the last has been out
// for SlowCall, and while the registry is held down only as the probe of
// its interval.
func (k *Core) listGate(now time.Time) bool {
	switch l := k.work.lists; {
	case len(l) >= maxLists:
		return false
	case len(l) > 0 && now.Sub(l[len(l)-1].Started) < policy.SlowCall:
		return false
	}
	if k.health.Down {
		if ok, _ := k.health.Allows(now); !ok {
			return false
		}
		k.health.ListProbing(now)
	}
	return true
}
