package cache

import (
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// apply applies one watch event to the entry it names. Events for services
// never looked up are ignored and never cause a registry call.
func (c *cache) apply(res *registry.Result) {
	c.applyWith(res, nil)
}

// applyWith is apply, printing the event's maps through maps (nil to walk
// each), which belongs to the caller's goroutine.
func (c *cache) applyWith(res *registry.Result, maps *svcdata.MapMemo) {
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
	p := svcdata.Prepare(res, snap, c.opts.LastKnownNodes, maps)

	var out outbox
	c.mu.Lock()
	now := c.now()
	c.proveStreamLocked(now, true, &out)
	if !e.gone {
		if e.data.Load() != snap {
			// Refreshed meanwhile: prepared again, under the lock,
			// against the data held now.
			p = svcdata.Prepare(res, e.data.Load(), c.opts.LastKnownNodes, maps)
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

// replacementGrace is how long a delete that left a held service with no
// node waits for the create of a replacement before the registry is asked
// to confirm it: registries that reorder the two deliver them
// milliseconds apart, and the answer would otherwise catch the service
// between its instances.
const replacementGrace = 250 * time.Millisecond

// applyLocked applies p to e, with or without data. An event never
// extends an expiry: the TTL refresh is the safety net for the events that
// real plugins lose.
func (c *cache) applyLocked(e *entry, p svcdata.Prepared, now time.Time, out *outbox) {
	if f := e.flight; f != nil {
		if len(f.events) < maxFlightEvents {
			f.events = append(f.events, p.Event())
		} else {
			f.overflow = true
		}
	}
	if c.work.recording() {
		c.work.record(p.Event())
	}
	snap := e.data.Load()
	if p.Repeat {
		// Nodes the registry announces again, as held: the data is
		// confirmed as current, and nothing else changes.
		c.stats.eventsApplied.Add(1)
		if snap.Prints != nil || p.Prints == nil {
			c.confirmLocked(e, snap, now)
			return
		}
		// Printed by this repeat: stored with its prints.
		c.storeLocked(e, &svcdata.Snapshot{Services: snap.Services, Expires: snap.Expires, RefreshAt: snap.RefreshAt,
			Refreshed: now, Known: snap.Known, Source: snap.Source, EventSince: snap.EventSince, Prints: p.Prints}, now)
		return
	}
	if snap == nil {
		// A change is prepared only against data held.
		ev := p.Event()
		if next, ok := svcdata.ApplyEvent(nil, ev); ok && svcdata.Announces(ev) {
			// Nothing cached (a not-found, the last node deleted, a
			// throttled cold lookup): the nodes the registry announces
			// are servable at once, stale, for a refresh to confirm.
			c.stats.eventsApplied.Add(1)
			e.staleTold = true // never fresh, so it did not turn stale
			s := &svcdata.Snapshot{Services: next, Refreshed: now, Source: svcdata.FromEvent, EventSince: now}
			if c.opts.LastKnownNodes {
				s.Known = next
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
		prints          svcdata.Prints
		spare           *svcdata.Snapshot
	)
	if ch := p.Change; ch.Next != nil {
		// Prepared against snap, which holds nodes in one version.
		next, news, announced, prints, spare = ch.Next, ch.News, true, ch.Prints, ch.Snap
	} else {
		ev := p.Event()
		base := snap.Services
		if snap.Kept {
			// Last known nodes kept by WithLastKnownNodes: deletes change
			// nothing, and nodes the registry shows replace them.
			if ev.Action == "delete" {
				c.stats.eventsApplied.Add(1)
				return
			}
			base = nil
		}
		var ok bool
		if next, news, ok = svcdata.MergeEvent(base, ev); !ok {
			// Invalidate: stale now, refreshed by the next reader under
			// the throttle.
			c.stats.eventsInvalidating.Add(1)
			if !e.staleTold {
				e.staleTold = true
				c.emitLocked(Event{Kind: ServiceStale, Service: e.name, Time: now})
			}
			c.storeLocked(e, snap.Stale(snap.Services, snap.Kept), now)
			return
		}
		announced = svcdata.Announces(ev)
	}
	c.stats.eventsApplied.Add(1)
	refreshed, known, src, since := snap.ConfirmedAt(), snap.Known, snap.Source, snap.EventSince
	if announced {
		refreshed = now
		if src != svcdata.FromEvent && news {
			src, since = svcdata.FromEvent, now
		}
		if c.opts.LastKnownNodes {
			if k, ok := svcdata.ApplyEvent(known, p.Event()); ok {
				known = k
			}
		}
	}
	switch {
	case !svcdata.HasNodes(next) && c.opts.LastKnownNodes:
		out.log(log.WarnLevel, "regcache: a delete event left service %s with no nodes; keeping the last known ones", quoteName(e.name))
		c.emitLocked(Event{Kind: LastKnownNodesKept, Service: e.name, Time: now})
		c.storeLocked(e, snap.LastKnown(), now)
	case !svcdata.HasNodes(next):
		// Registries can deliver the delete of an old node before the
		// create of its replacement (go-micro's memory registry, mdns):
		// the last nodes are served, stale, until a create replaces
		// them, or the registry confirms that none is left. The stream
		// is a hint: the data held is in doubt, as after a resync, and
		// the confirmation is the early call its gate allows, once the
		// replacement has had replacementGrace to announce itself.
		c.storeLocked(e, snap.LastKnown(), now)
		e.epoch = 0
		e.emptied = c.moment(now)
		c.parkLocked(e, now.Add(replacementGrace), now)
	case snap.Kept:
		if c.opts.LastKnownNodes {
			out.log(log.InfoLevel, "regcache: service %s has nodes again; last known nodes released", quoteName(e.name))
			c.emitLocked(Event{Kind: LastKnownNodesReleased, Service: e.name, Time: now})
		}
		s := &svcdata.Snapshot{Services: next, Refreshed: refreshed, Source: src, EventSince: since}
		if c.opts.LastKnownNodes {
			s.Known = next
		}
		c.storeLocked(e, s, now)
	default:
		s := spare
		if s == nil {
			s = new(svcdata.Snapshot)
		}
		*s = svcdata.Snapshot{Services: next, Expires: snap.Expires, RefreshAt: snap.RefreshAt,
			Refreshed: refreshed, Known: known, Source: src, EventSince: since, Prints: prints}
		c.storeLocked(e, s, now)
	}
}
