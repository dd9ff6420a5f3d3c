package cache

import (
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// apply applies one watch event to the entry it names. Events for services
// never looked up are ignored and never cause a registry call.
func (c *cache) apply(res *registry.Result) {
	if res == nil || res.Service == nil {
		c.stats.eventsIgnored.Add(1)
		return
	}
	c.heard.Add(1)
	name := res.Service.Name
	held, ok := c.entries.Load(name)
	if !ok {
		c.stats.eventsIgnored.Add(1)
		return
	}
	// Copy on the way in, outside the lock: the event may alias the
	// watcher's or the registry's memory. What the entry holds already is
	// shared rather than copied again.
	ev, err := cloneEvent(res, heldServices(held.(*entry)))
	if err != nil {
		// Too large or malformed to copy: with no node, it cannot be
		// applied, which invalidates the entry.
		ev = &registry.Result{Action: res.Action, Service: &registry.Service{Name: name}}
	}

	var out outbox
	c.mu.Lock()
	c.proveStreamLocked(c.now(), true, &out)
	if e := held.(*entry); !e.gone {
		c.applyLocked(e, ev, c.now(), &out)
	} else {
		// Dropped meanwhile: a lookup since starts afresh, from the
		// registry.
		c.stats.eventsIgnored.Add(1)
	}
	c.mu.Unlock()
	c.flush(&out)
}

// announces reports whether ev tells of nodes that exist.
func announces(ev *registry.Result) bool {
	return (ev.Action == "create" || ev.Action == "update") && len(ev.Service.Nodes) > 0
}

// applyLocked applies ev to e, with or without data. An event never extends
// an expiry: the TTL refresh is the safety net for the events that real
// plugins lose.
func (c *cache) applyLocked(e *entry, ev *registry.Result, now time.Time, out *outbox) {
	if f := e.flight; f != nil {
		if len(f.events) < maxFlightEvents {
			f.events = append(f.events, ev)
		} else {
			f.overflow = true
		}
	}
	c.work.record(ev)
	snap := e.data.Load()
	if snap == nil {
		if next, ok := applyEvent(nil, ev); ok && announces(ev) {
			// Nothing cached (a not-found, the last node deleted, a
			// throttled cold lookup): the nodes the registry announces
			// are servable at once, stale, for a refresh to confirm.
			c.stats.eventsApplied.Add(1)
			e.staleTold = true // never fresh, so it did not turn stale
			s := &snapshot{services: next, refreshed: now, source: fromEvent, eventSince: now}
			if c.opts.LastKnownNodes {
				s.known = next
			}
			c.storeLocked(e, s, now)
			e.epoch = c.epoch
			return
		}
		c.stats.eventsIgnored.Add(1)
		return
	}
	base := snap.services
	if snap.kept {
		// Last known nodes kept by WithLastKnownNodes: deletes change
		// nothing, and nodes the registry shows replace them.
		if ev.Action == "delete" {
			c.stats.eventsApplied.Add(1)
			return
		}
		base = nil
	}
	next, ok := applyEvent(base, ev)
	if !ok {
		// Invalidate: stale now, refreshed by the next reader under the
		// throttle.
		c.stats.eventsInvalidating.Add(1)
		if !e.staleTold {
			e.staleTold = true
			c.emitLocked(Event{Kind: ServiceStale, Service: e.name, Time: now})
		}
		c.storeLocked(e, snap.stale(snap.services, snap.kept), now)
		return
	}
	c.stats.eventsApplied.Add(1)
	refreshed, known, src, since := snap.refreshed, snap.known, snap.source, snap.eventSince
	if announces(ev) {
		refreshed = now
		if src != fromEvent && announcesNew(base, ev) {
			src, since = fromEvent, now
		}
		if c.opts.LastKnownNodes {
			if k, ok := applyEvent(known, ev); ok {
				known = k
			}
		}
	}
	switch {
	case !hasNodes(next) && c.opts.LastKnownNodes:
		out.log(log.WarnLevel, "regcache: a delete event left service %s with no nodes; keeping the last known ones", quoteName(e.name))
		c.emitLocked(Event{Kind: LastKnownNodesKept, Service: e.name, Time: now})
		c.storeLocked(e, snap.keptSnapshot(), now)
	case !hasNodes(next):
		// Kept for a retry interval, so that the create event of a
		// restarting instance finds the entry.
		c.storeLocked(e, nil, now)
		c.forgetLocked(e, now.Add(c.opts.MinimumRetryInterval), now)
	case snap.kept:
		out.log(log.InfoLevel, "regcache: service %s has nodes again; last known nodes released", quoteName(e.name))
		c.emitLocked(Event{Kind: LastKnownNodesReleased, Service: e.name, Time: now})
		s := &snapshot{services: next, refreshed: refreshed, source: src, eventSince: since}
		if c.opts.LastKnownNodes {
			s.known = next
		}
		c.storeLocked(e, s, now)
	default:
		c.storeLocked(e, &snapshot{services: next, expires: snap.expires, refreshAt: snap.refreshAt,
			refreshed: refreshed, known: known, source: src, eventSince: since}, now)
	}
}
