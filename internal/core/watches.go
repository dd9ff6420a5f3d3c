package core

import (
	"time"
)

// The per-service watches of WatchPerService (package watchset), and the
// late watches of a scoped stream (watchscope), as inputs.

// WatchOpened records the watch of service established at now, keys being
// its suspects in the registry's health: an answer from the registry
// unless it is held down (unproven then, until it has lasted SlowCall:
// WatchProven), and the service's data, fetched before it, re-validated.
// told says that its failure was told, so that its return is too;
// reopened that it opened before.
func (k *Core) WatchOpened(service string, told, reopened bool, keys []string, now time.Time) (unproven bool) {
	if reopened {
		k.Stats.Reconnects.Add(1)
	}
	for _, key := range keys {
		k.health.Cleared(key)
	}
	k.stream.cleared(service)
	if k.health.Down {
		unproven = true
	} else {
		k.verdict(k.health.Answered("", now), now)
		if told {
			k.log(Info, "regcache: watch of service %s is back", quoteName(service))
			k.emit(Event{Kind: WatchReconnected, Service: service, Time: now})
		}
	}
	k.Revalidate(service, now)
	return unproven
}

// WatchProven brings the registry up on the evidence of a watch that has
// lasted SlowCall since it opened while the registry was held down.
func (k *Core) WatchProven(now time.Time) {
	if k.health.Down {
		k.verdict(k.health.Answered("", now), now)
	}
}

// WatchFailed records a failure of service's watch (lost, or a redial
// failed or overdue) that started at started, suspect standing for it in
// the registry's health. With tell it is logged and told, unless the
// registry is held down; it reports whether it was.
func (k *Core) WatchFailed(service, suspect string, err error, started time.Time, tell bool, now time.Time) (told bool) {
	if k.stream.failing == nil {
		k.stream.failing = map[string]struct{}{}
	}
	if k.byName[service] != nil {
		k.stream.failing[service] = struct{}{}
	}
	if tell && !k.health.Down {
		told = true
		k.log(Warn, "regcache: watch of service %s failing, redialling: %v", quoteName(service), err)
		k.emit(Event{Kind: WatchDisconnected, Service: service, Err: err, Time: now})
	}
	k.verdict(k.health.Failed(suspect, err, started, now), now)
	return told
}

// WatchesRedialed lets a resync that waited for the watches, when the
// registry came back, go now, so that one round covers the gap and the
// watches.
func (k *Core) WatchesRedialed() {
	if k.stream.resyncPending {
		k.stream.resyncPending = false
		k.advance()
	}
}

// Revalidate has name's data, fetched before its watch opened, refreshed
// once its retry window allows: the data it holds, or the answer of the
// call out. A service held without data, after a not-found answered
// before the watch opened, may have been registered since, unseen by the
// watch: its next lookup asks the registry at once, and so does the one
// after an answer still out.
func (k *Core) Revalidate(name string, now time.Time) {
	e := k.byName[name]
	if e == nil {
		return
	}
	if e.Data.Load() == nil && e.call != nil {
		e.call.reopen = true // for its answer
	}
	if k.epoch == 0 {
		return
	}
	before := k.epoch - 1
	e.epoch = min(e.epoch, before) // a re-validation, early
	if c := e.call; c != nil {
		// Its answer is queued for re-validation when it lands.
		c.epoch = min(c.epoch, before)
		return
	}
	if e.Data.Load() != nil {
		k.enqueue(e, now)
		k.pump(now)
	}
}
