package core

import (
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// Event applies one watch event, res, to the entry it names, at now. p is
// res prepared outside the lock against the data of e, the entry found
// for it then (svcdata.Prepare); if the entry was dropped since, the
// event goes to the one that holds the name now, if any, and if the data
// changed, the event is prepared again here, through maps. Events for
// services never looked up are ignored and never cause a registry call.
// An event never extends an expiry: the TTL refresh is the safety net for
// the events that real plugins lose.
func (k *Core) Event(res *registry.Result, p *svcdata.Prepared, e *Entry, against *svcdata.Snapshot, maps *svcdata.MapMemo, now time.Time) {
	k.proveStream(now, true)
	if e.phase == PhaseGone {
		if e = k.byName[res.Service.Name]; e == nil {
			// A lookup since starts afresh, from the registry.
			k.Stats.EventsIgnored.Add(1)
			return
		}
	}
	if e.Data.Load() != against {
		// Refreshed, or the entry made anew, meanwhile.
		*p = svcdata.Prepare(res, e.Data.Load(), k.cfg.LastKnownNodes, maps)
	}
	k.apply(e, p, now)
}

// apply applies p to e, with or without data.
func (k *Core) apply(e *Entry, p *svcdata.Prepared, now time.Time) {
	if c := e.call; c != nil {
		c.record(p.Event(), k.moment(now))
	}
	for _, l := range k.work.lists {
		l.record(p.Event(), k.moment(now))
	}
	snap := e.Data.Load()
	if p.Repeat {
		// Nodes the registry announces again, as held: the data is
		// confirmed as current, and nothing else changes.
		k.Stats.EventsApplied.Add(1)
		if snap.Prints != nil || p.Prints == nil {
			k.confirm(e, snap, now)
			return
		}
		// Printed by this repeat: stored with its prints.
		k.store(e, &svcdata.Snapshot{Services: snap.Services, Expires: snap.Expires, RefreshAt: snap.RefreshAt,
			Refreshed: now, Known: snap.Known, Source: snap.Source, EventSince: snap.EventSince, Prints: p.Prints}, now)
		return
	}
	if snap == nil {
		k.announce(e, p.Event(), now)
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
		if snap.Hold != svcdata.Current {
			// The last nodes, kept after the registry or a delete showed
			// none: deletes change nothing, and nodes the registry
			// announces replace them.
			if ev.Action == "delete" {
				k.Stats.EventsApplied.Add(1)
				return
			}
			base = nil
		}
		var ok bool
		if next, news, ok = svcdata.MergeEvent(base, ev); !ok {
			k.invalidate(e, snap, now)
			return
		}
		announced = svcdata.Announces(ev)
	}
	k.Stats.EventsApplied.Add(1)
	refreshed, known, src, since := snap.ConfirmedAt(), snap.Known, snap.Source, snap.EventSince
	if announced {
		refreshed = now
		if src != svcdata.FromEvent && news {
			src, since = svcdata.FromEvent, now
		}
		if k.cfg.LastKnownNodes {
			if kn, ok := svcdata.ApplyEvent(known, p.Event()); ok {
				known = kn
			}
		}
	}
	switch {
	case !svcdata.HasNodes(next) && k.cfg.LastKnownNodes:
		k.log(Warn, "regcache: a delete event left service %s with no nodes; keeping the last known ones", quoteName(e.Name))
		k.emit(Event{Kind: LastKnownNodesKept, Service: e.Name, Time: now})
		k.store(e, snap.LastKnown(svcdata.Kept), now)
	case !svcdata.HasNodes(next):
		k.emptiedByDelete(e, snap, now, now)
	case snap.Hold != svcdata.Current:
		if snap.Hold == svcdata.Kept {
			k.log(Info, "regcache: service %s has nodes again; last known nodes released", quoteName(e.Name))
			k.emit(Event{Kind: LastKnownNodesReleased, Service: e.Name, Time: now})
		}
		s := &svcdata.Snapshot{Services: next, Refreshed: refreshed, Source: src, EventSince: since}
		if k.cfg.LastKnownNodes {
			s.Known = next
		}
		k.store(e, s, now)
	default:
		s := spare
		if s == nil {
			s = new(svcdata.Snapshot)
		}
		*s = svcdata.Snapshot{Services: next, Expires: snap.Expires, RefreshAt: snap.RefreshAt,
			Refreshed: refreshed, Known: known, Source: src, EventSince: since, Prints: prints}
		k.store(e, s, now)
	}
}

// announce applies ev to e, which holds no data (a not-found, the last
// node deleted and confirmed, a throttled cold lookup): the nodes the
// registry announces are servable at once, stale, for a refresh to
// confirm.
func (k *Core) announce(e *Entry, ev *registry.Result, now time.Time) {
	next, ok := svcdata.ApplyEvent(nil, ev)
	if !ok || !svcdata.Announces(ev) {
		k.Stats.EventsIgnored.Add(1)
		return
	}
	k.Stats.EventsApplied.Add(1)
	e.staleTold = true // never fresh, so it did not turn stale
	s := &svcdata.Snapshot{Services: next, Refreshed: now, Source: svcdata.FromEvent, EventSince: now}
	if k.cfg.LastKnownNodes {
		s.Known = next
	}
	k.store(e, s, now)
	e.epoch = k.epoch
}

// invalidate makes e's data stale at once, for an event that cannot be
// applied: the next reader refreshes it under the throttle.
func (k *Core) invalidate(e *Entry, snap *svcdata.Snapshot, now time.Time) {
	k.Stats.EventsInvalidating.Add(1)
	if !e.staleTold {
		e.staleTold = true
		k.emit(Event{Kind: ServiceStale, Service: e.Name, Time: now})
	}
	k.store(e, snap.Stale(snap.Services, snap.Hold), now)
}
