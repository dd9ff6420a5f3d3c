package cache

import (
	"time"

	"github.com/regcache/cache/internal/core"
	"github.com/regcache/cache/internal/svcdata"
)

// Stats is a view of a cache's cumulative counters and of its entries at
// one moment.
//
// Within one Stats value these always hold: Lookups equals FreshHits +
// EventServes + StaleServes + Throttled + Misses + Invalid, and
// RefreshErrors is at most Refreshes. Counters never go down from one
// Stats call to the next.
//
// A Stats value encodes to JSON (encoding/json) and back, as do
// ServiceStats and SelectorStats, in the style of the status page
// (package admin): each key is its field's name in snake_case
// ("fresh_hits"), a duration is a number of seconds under its name with
// "_seconds" after it ("down_time_seconds": 1.5), and a time is RFC 3339.
// A time that does not apply (the zero time) is left out, as are an empty
// error, source, list or map; numbers and flags are always there.
// Options.Logger, Options.Observer and Options.SelectorOptions are left
// out.
type Stats struct {
	// Lookups counts GetService and Lookup calls, each in exactly one of
	// the six outcomes below.
	Lookups   uint64 `json:"lookups"`
	FreshHits uint64 `json:"fresh_hits"` // answered with fresh data
	// EventServes counts lookups answered with data that a create or
	// update event announced less than a TTL ago and that the registry
	// has not confirmed yet: a service that just started or restarted,
	// between its event and the refresh that confirms it. It is normal
	// during a deploy; StaleServes is not.
	EventServes uint64 `json:"event_serves"`
	StaleServes uint64 `json:"stale_serves"` // answered with stale data, without waiting
	Throttled   uint64 `json:"throttled"`    // answered with the throttled error, or too stale
	Misses      uint64 `json:"misses"`       // nothing usable cached: waited for a refresh
	Invalid     uint64 `json:"invalid"`      // the empty name: answered with ErrEmptyName

	Refreshes     uint64 `json:"refreshes"`      // GetService calls to the registry
	RefreshErrors uint64 `json:"refresh_errors"` // registry calls that failed (not-found is an answer)
	Lists         uint64 `json:"lists"`          // ListServices calls, one per resync of many services

	EventsApplied      uint64 `json:"events_applied"`      // watch events applied to a cached service
	EventsIgnored      uint64 `json:"events_ignored"`      // watch events for services not cached
	EventsInvalidating uint64 `json:"events_invalidating"` // watch events that could not be applied
	WatchReconnects    uint64 `json:"watch_reconnects"`    // watch streams established after the first

	// ObserverDropped counts events a slow observer had no room for, and
	// events after Stop.
	ObserverDropped uint64 `json:"observer_dropped"`

	// RegistryDown is set while the cache holds the registry to be down,
	// since RegistryDownSince, because of RegistryError.
	RegistryDown      bool      `json:"registry_down"`
	RegistryDownSince time.Time `json:"registry_down_since,omitzero"`
	RegistryError     string    `json:"registry_error,omitempty"`
	// Outages counts the times the registry was held to be down, the
	// current one included, and DownTime adds up how long, up to now: each
	// outage from its first failure to the answer that ended it. Both move
	// as the registry's state does, whether or not a refresh was due.
	Outages  uint64        `json:"outages"`
	DownTime time.Duration `json:"down_time_seconds"`

	// Stream is the state of the watch stream: StreamNotStarted before the
	// first lookup, StreamConnected, StreamReconnecting or StreamStopped,
	// since StreamSince (zero before the first stream).
	Stream      StreamState `json:"stream"`
	StreamSince time.Time   `json:"stream_since,omitzero"`

	// SnapshotError is why the WithSnapshot file cannot be written: the
	// check that New makes of its folder, then the last write's failure.
	// Empty when the last check or write succeeded, or with no snapshot.
	SnapshotError string `json:"snapshot_error,omitempty"`

	// Entries is the number of services the cache holds state for, with
	// or without data.
	Entries int `json:"entries"`
	// StaleServedAge is how stale the data being served is now: the age,
	// since the registry last told the cache its nodes, of the oldest
	// stale data that was served and is still held; zero when none is, as
	// once the registry has answered for it again.
	StaleServedAge time.Duration `json:"stale_served_age_seconds"`

	// Options are the options in effect, after defaults.
	Options Options `json:"options"`
}

// StreamState is the state of the watch stream, as Stats.Stream shows it.
type StreamState string

// The states of the watch stream.
const (
	StreamNotStarted   StreamState = "not started"
	StreamConnected    StreamState = "connected"
	StreamReconnecting StreamState = "reconnecting"
	StreamStopped      StreamState = "stopped"
)

// Source is where a service's nodes came from, as ServiceStats.Source and
// the status page show it.
type Source string

// The sources of a service's nodes.
const (
	SourceRefresh        Source = svcdata.SourceRefresh        // a registry answer
	SourceEvent          Source = svcdata.SourceEvent          // a create or update event, not yet confirmed
	SourceSnapshot       Source = svcdata.SourceSnapshot       // the WithSnapshot file, loaded by New
	SourceLastKnownNodes Source = svcdata.SourceLastKnownNodes // nodes kept after the registry showed none
)

// ServiceStats describes one cached service.
type ServiceStats struct {
	Name string `json:"name"`
	// Nodes is the number of nodes cached, zero for a service with no
	// data.
	Nodes int `json:"nodes"`
	// Age is the time since the registry last told the cache this
	// service's nodes: a refresh, or an event announcing nodes.
	Age time.Duration `json:"age_seconds"`
	// Failures counts consecutive failed refreshes.
	Failures int `json:"failures"`
	// Source is where the nodes came from: SourceRefresh, SourceEvent,
	// SourceSnapshot or SourceLastKnownNodes; empty with no data.
	Source Source `json:"source,omitempty"`
	// LastError is the last refresh failure, empty once the registry
	// answers for the service again; LastErrorAt is when it failed.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// RetryAt is when the service's retry window closes, so that a
	// refresh may start; zero when one may start now.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Fresh is false once the TTL has run out, and for data that never
	// had one: an event's, the snapshot file's.
	Fresh bool `json:"fresh"`
	// Unconfirmed is set while the newest nodes came from an event less
	// than a TTL ago, and no refresh has confirmed them yet. Lookups of
	// such data past its expiry count as Stats.EventServes, not as stale.
	Unconfirmed bool `json:"unconfirmed"`
	// Refreshing is set while a refresh of the service is out.
	Refreshing bool `json:"refreshing"`
	// LastKnownNodes is set while WithLastKnownNodes keeps the nodes.
	LastKnownNodes bool `json:"last_known_nodes"`
	// NodeList has the nodes, filled by Cache.Services only.
	NodeList []NodeStats `json:"node_list,omitempty"`
}

// NodeStats describes one cached node of a service.
type NodeStats struct {
	Id      string `json:"id"`
	Address string `json:"address"`
	// Version is the version of the service that the node runs.
	Version string `json:"version"`
	// Metadata is a copy of the node's metadata.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Stats returns the cache's counters and the state of the registry, the
// stream and the snapshot file. It costs the same whatever the number of
// services; Services pages through their rows.
func (c *cache) Stats() Stats {
	s := &c.stats
	// Lookups is the sum of its outcomes, and errors are loaded before
	// refreshes, each error being counted after its refresh: so the
	// invariants hold in every snapshot.
	st := Stats{
		FreshHits:          s.FreshServes.Load(),
		EventServes:        s.EventServes.Load(),
		StaleServes:        s.StaleServes.Load(),
		Throttled:          s.Throttled.Load(),
		Misses:             s.Misses.Load(),
		RefreshErrors:      s.RefreshErrors.Load(),
		Refreshes:          s.Refreshes.Load(),
		Lists:              s.Lists.Load(),
		EventsApplied:      s.EventsApplied.Load(),
		EventsIgnored:      s.EventsIgnored.Load(),
		EventsInvalidating: s.EventsInvalidating.Load(),
		WatchReconnects:    s.Reconnects.Load(),
		ObserverDropped:    s.ObserverDropped.Load(),
		Options:            c.opts,
	}
	st.FreshHits += s.Hits.Load()
	st.StaleServes += s.StaleHits.Load()
	st.EventServes += s.EventHits.Load()
	st.Invalid = s.Invalid.Load()
	st.Lookups = st.FreshHits + st.EventServes + st.StaleServes + st.Throttled + st.Misses + st.Invalid

	now := c.now()
	st.StaleServedAge = c.core.StaleServedAge(now)
	var k core.State
	c.mu.Lock()
	c.core.State(now, &k)
	c.mu.Unlock()
	st.RegistryDown, st.RegistryDownSince, st.Outages, st.DownTime = k.RegistryDown, k.RegistryDownSince, k.Outages, k.DownTime
	if k.RegistryError != nil {
		st.RegistryError = k.RegistryError.Error()
	}
	st.Stream = streamStates[k.Stream]
	st.StreamSince = k.StreamSince
	if k.SnapshotError != nil {
		st.SnapshotError = k.SnapshotError.Error()
	}
	st.Entries = k.Entries
	return st
}

// streamStates are the core's stream states, by number.
var streamStates = [...]StreamState{
	core.StreamNotStarted:   StreamNotStarted,
	core.StreamConnected:    StreamConnected,
	core.StreamReconnecting: StreamReconnecting,
	core.StreamStopped:      StreamStopped,
}

// serviceStats is the row of the core's r.
func serviceStats(r core.Row) ServiceStats {
	row := ServiceStats{Name: r.Name, Nodes: r.Nodes, Age: r.Age, Failures: r.Failures, Source: Source(r.Source),
		LastErrorAt: r.LastErrorAt, RetryAt: r.RetryAt, Fresh: r.Fresh, Unconfirmed: r.Unconfirmed,
		Refreshing: r.Refreshing, LastKnownNodes: r.Last}
	if r.LastError != nil {
		row.LastError = r.LastError.Error()
	}
	return row
}
