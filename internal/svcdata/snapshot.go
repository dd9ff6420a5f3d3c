package svcdata

import (
	"sync/atomic"
	"time"

	"go-micro.dev/v4/registry"
)

// Snapshot is one service's data at one moment. It is immutable once
// stored, but for when its nodes were last confirmed: refreshes and
// events build a new snapshot and swap the pointer, so readers need no
// lock.
type Snapshot struct {
	// Services is the data, the cache's own copy: no part of it is ever
	// changed in place.
	Services []*registry.Service
	// Expires is when the data turns stale. Events keep it; only a
	// successful refresh moves it forward.
	Expires time.Time
	// RefreshAt is when a read starts a refresh ahead of expiry; it equals
	// Expires unless WithRefreshAhead is set.
	RefreshAt time.Time
	// Refreshed is when the registry told the cache this service's nodes
	// as the snapshot holds them: an answer with nodes, or a create or
	// update event. An event that repeats them confirms them again later
	// (see Confirm); WithMaxStale measures from that.
	Refreshed time.Time
	// confirmed is how long after Refreshed the nodes were last
	// confirmed; it only grows, and is read without a lock. It is the one
	// field of a snapshot that changes once stored: a repeat would
	// otherwise take a new snapshot to move one time.
	confirmed atomic.Int64
	// Hold says whether the nodes are the registry's current ones, or the
	// last ones of a service that the registry or a delete event showed
	// with none, and why they are kept.
	Hold Hold
	// Source is what set Refreshed: a refresh, an event or the snapshot
	// file. Event data is served as unconfirmed rather than stale.
	Source Source
	// EventSince, for event data, is when the first event since the
	// registry last answered brought a node the cache did not hold: the
	// data has been unconfirmed since then, whatever events came after.
	EventSince time.Time
	// Known, with WithLastKnownNodes, is every node the registry showed
	// since its last answer: the answer's, and those that events created
	// or updated since. Deletes do not remove them, so that a lease storm
	// seen as one delete per node keeps the same nodes as one seen as an
	// empty answer. It shares the services' structs.
	Known []*registry.Service
	// Prints are the services' prints, nil for none (see PrintsOf).
	Prints Prints
}

// ConfirmedAt is when the registry last told the cache the nodes s holds.
func (s *Snapshot) ConfirmedAt() time.Time {
	return s.Refreshed.Add(time.Duration(s.confirmed.Load()))
}

// Confirm records that the registry told the nodes of s again at now:
// what storing a copy of s confirmed at now would do, without the copy.
// The time only moves forward. Calls to Confirm must not race one
// another (the cache makes them under its lock); ConfirmedAt may be
// called at any time.
func (s *Snapshot) Confirm(now time.Time) {
	if d := now.Sub(s.Refreshed); d > time.Duration(s.confirmed.Load()) {
		s.confirmed.Store(int64(d))
	}
}

// Stale returns a copy of s with services that is stale from now on.
func (s *Snapshot) Stale(services []*registry.Service, hold Hold) *Snapshot {
	c := &Snapshot{Services: services, Refreshed: s.ConfirmedAt(), Hold: hold, Known: s.Known, Source: s.Source, EventSince: s.EventSince}
	if SameArray(services, s.Services) {
		c.Prints = s.Prints
	}
	return c
}

// LastKnown is the last known nodes of s, kept as stale data for the
// reason hold gives.
func (s *Snapshot) LastKnown(hold Hold) *Snapshot {
	known := s.Known
	if !HasNodes(known) {
		known = s.Services
	}
	return &Snapshot{Services: known, Refreshed: s.ConfirmedAt(), Hold: hold, Known: known, Source: s.Source, EventSince: s.EventSince}
}

// Hold is why a snapshot holds the nodes it does.
type Hold uint8

const (
	// Current: the registry's nodes, as it answered or announced them.
	Current Hold = iota
	// Emptied: the last nodes of a service that a delete event left with
	// none, served until a create replaces them or the registry confirms
	// that none is left.
	Emptied
	// Kept: the last known nodes that WithLastKnownNodes keeps after the
	// registry showed none, until it shows nodes again.
	Kept
)

// Source is where a snapshot's nodes last came from.
type Source uint8

const (
	FromRefresh  Source = iota // a registry answer: GetService or ListServices
	FromEvent                  // a create or update event, not yet confirmed
	FromSnapshot               // the WithSnapshot file, loaded by New
)

// The names of where data came from, as the cache's Stats and the admin
// page show them (see SourceName).
const (
	SourceRefresh        = "refresh"
	SourceEvent          = "event"
	SourceSnapshot       = "snapshot"
	SourceLastKnownNodes = "last known nodes"
)

// SourceName is the name of where s came from, as Stats shows it.
func (s *Snapshot) SourceName() string {
	switch {
	case s.Hold != Current:
		return SourceLastKnownNodes
	case s.Source == FromEvent:
		return SourceEvent
	case s.Source == FromSnapshot:
		return SourceSnapshot
	}
	return SourceRefresh
}
