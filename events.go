package cache

import (
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// apply applies one watch event to the entry it names. Events for services
// never looked up are ignored and never cause a registry call.
func (c *cache) apply(res *registry.Result) {
	c.applyWith(res, nil)
}

// applyWith is apply, printing the event's maps through maps (nil to walk
// each), which belongs to the caller's goroutine.
func (c *cache) applyWith(res *registry.Result, maps *mapMemo) {
	if res == nil || res.Service == nil {
		c.stats.eventsIgnored.Add(1)
		return
	}
	c.heard.Add(1)
	name := res.Service.Name
	c.mu.Lock()
	e := c.byName[name]
	c.mu.Unlock()
	if e == nil {
		c.stats.eventsIgnored.Add(1)
		return
	}
	// Prepared outside the lock: the event may alias the watcher's or the
	// registry's memory, so what it adds is copied on the way in, sharing
	// what the entry holds already; and an event that only repeats what
	// is held (an instance registering again) is neither copied nor
	// merged.
	snap := e.data.Load()
	p := prepareEvent(res, snap, c.opts.LastKnownNodes, maps)

	var out outbox
	c.mu.Lock()
	now := c.now()
	c.proveStreamLocked(now, true, &out)
	if !e.gone {
		if e.data.Load() != snap {
			// Refreshed meanwhile: prepared again, under the lock,
			// against the data held now.
			p = prepareEvent(res, e.data.Load(), c.opts.LastKnownNodes, maps)
		}
		c.applyLocked(e, p, now, &out)
	} else {
		// Dropped meanwhile: a lookup since starts afresh, from the
		// registry.
		c.stats.eventsIgnored.Add(1)
	}
	c.mu.Unlock()
	c.flush(&out)
}

// preparedEvent is a watch event made ready to apply to an entry's data.
type preparedEvent struct {
	// raw is the event as the watcher gave it; read only until apply
	// returns.
	raw *registry.Result
	// held is the data prepared against; repeat is set when raw tells
	// nothing that held does not hold (see repeats), and ev is then nil.
	held   []*registry.Service
	repeat bool
	// prints are held's, for the data kept by a repeat: the snapshot's,
	// or made when the repeat was found by comparing with held.
	prints printSet
	// ev is the cache's own copy of the event, sharing what equals held.
	ev *registry.Result
	// change is set instead of ev for a change to the nodes alone of a
	// version held with prints (see changeNodes).
	change change
}

// prepareEvent prepares res against snap, the entry's data (nil for none).
func prepareEvent(res *registry.Result, snap *snapshot, lastKnown bool, maps *mapMemo) preparedEvent {
	p := preparedEvent{raw: res}
	if snap != nil && !snap.kept {
		p.held, p.prints = snap.services, snap.prints
	}
	if !lastKnown {
		if p.prints == nil && p.held != nil && announces(res) {
			// Left unprinted by a delete, or by a change to the
			// version: printed now, outside the lock, so that this
			// event, repeat or change, and the ones after it are told
			// by prints rather than copied.
			p.prints = printsOf(p.held)
		}
		heard := eventPrints{maps: maps}
		repeat, told, version := p.prints.repeats(res, &heard)
		if !told && repeats(p.held, res) {
			// Found by comparing with held: data that prints cannot
			// stand for.
			repeat = true
		}
		if repeat {
			p.repeat = true
			return p
		}
		if version {
			var ok bool
			if p.change, ok = changeNodes(p.held[0], res.Service, p.prints, &heard); ok {
				return p
			}
		}
	}
	p.ev = copyEvent(res, p.held)
	return p
}

// event returns the cache's own copy of the event, made now if it was a
// repeat: a refresh or a list in flight keeps it, to replay onto its
// answer.
func (p *preparedEvent) event() *registry.Result {
	if p.ev == nil {
		p.ev = copyEvent(p.raw, p.held)
	}
	return p.ev
}

// copyEvent copies res with cloneEvent, sharing what equals held; an event
// too large or malformed to copy is kept as one with no node, which
// cannot be applied and so invalidates the entry.
func copyEvent(res *registry.Result, held []*registry.Service) *registry.Result {
	ev, err := cloneEvent(res, held)
	if err != nil {
		return &registry.Result{Action: res.Action, Service: &registry.Service{Name: res.Service.Name}}
	}
	return ev
}

// announces reports whether ev tells of nodes that exist.
func announces(ev *registry.Result) bool {
	return (ev.Action == "create" || ev.Action == "update") && len(ev.Service.Nodes) > 0
}

// applyLocked applies p to e, with or without data. An event never
// extends an expiry: the TTL refresh is the safety net for the events that
// real plugins lose.
func (c *cache) applyLocked(e *entry, p preparedEvent, now time.Time, out *outbox) {
	if f := e.flight; f != nil {
		if len(f.events) < maxFlightEvents {
			f.events = append(f.events, p.event())
		} else {
			f.overflow = true
		}
	}
	if c.work.recording() {
		c.work.record(p.event())
	}
	snap := e.data.Load()
	if p.repeat {
		// Nodes the registry announces again, as held: the data is
		// confirmed as current, and nothing else changes.
		c.stats.eventsApplied.Add(1)
		if snap.prints != nil || p.prints == nil {
			c.confirmLocked(e, snap, now)
			return
		}
		// Printed by this repeat: stored with its prints.
		c.storeLocked(e, &snapshot{services: snap.services, expires: snap.expires, refreshAt: snap.refreshAt,
			refreshed: now, known: snap.known, source: snap.source, eventSince: snap.eventSince, prints: p.prints}, now)
		return
	}
	if snap == nil {
		// A change is prepared only against data held.
		ev := p.ev
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
	var (
		next            []*registry.Service
		news, announced bool
		prints          printSet
		spare           *snapshot
	)
	if ch := p.change; ch.next != nil {
		// Prepared against snap, which holds nodes in one version.
		next, news, announced, prints, spare = ch.next, ch.news, true, ch.prints, ch.snap
	} else {
		ev := p.ev
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
		var ok bool
		if next, news, ok = mergeEvent(base, ev); !ok {
			// Invalidate: stale now, refreshed by the next reader under
			// the throttle.
			c.stats.eventsInvalidating.Add(1)
			if !e.staleTold {
				e.staleTold = true
				c.emitLocked(Event{Kind: ServiceStale, Service: e.name, Time: now})
			}
			c.storeLocked(e, snap.stale(snap.services, snap.kept), now)
			return
		}
		announced = announces(ev)
	}
	c.stats.eventsApplied.Add(1)
	refreshed, known, src, since := snap.confirmedAt(), snap.known, snap.source, snap.eventSince
	if announced {
		refreshed = now
		if src != fromEvent && news {
			src, since = fromEvent, now
		}
		if c.opts.LastKnownNodes {
			if k, ok := applyEvent(known, p.event()); ok {
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
		// Registries can deliver the delete of an old node before the
		// create of its replacement (go-micro's memory registry, mdns):
		// the last nodes are served, stale, until a create replaces
		// them, or the registry confirms that none is left (one call,
		// through the service's gate).
		c.storeLocked(e, snap.keptSnapshot(), now)
		c.enqueueLocked(e)
		c.pumpLocked(now)
	case snap.kept:
		if c.opts.LastKnownNodes {
			out.log(log.InfoLevel, "regcache: service %s has nodes again; last known nodes released", quoteName(e.name))
			c.emitLocked(Event{Kind: LastKnownNodesReleased, Service: e.name, Time: now})
		}
		s := &snapshot{services: next, refreshed: refreshed, source: src, eventSince: since}
		if c.opts.LastKnownNodes {
			s.known = next
		}
		c.storeLocked(e, s, now)
	default:
		s := spare
		if s == nil {
			s = new(snapshot)
		}
		*s = snapshot{services: next, expires: snap.expires, refreshAt: snap.refreshAt,
			refreshed: refreshed, known: known, source: src, eventSince: since, prints: prints}
		c.storeLocked(e, s, now)
	}
}
