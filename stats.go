package cache

import (
	"github.com/regcache/cache/internal/counter"
	"github.com/regcache/cache/internal/svcdata"
	"sync/atomic"
	"time"
)

// Stats is a view of a cache's cumulative counters and of its entries at
// one moment.
//
// Within one Stats value these always hold: Lookups equals FreshHits +
// EventServes + StaleServes + Throttled + Misses + Invalid, and
// RefreshErrors is at most Refreshes. Counters never go down from one
// Stats call to the next.
//
// A Stats value encodes to JSON (encoding/json), with the Go field names
// as keys, durations in nanoseconds and times in RFC 3339. Options.Logger
// and Options.Observer are left out.
type Stats struct {
	// Lookups counts GetService and Lookup calls, each in exactly one of
	// the six outcomes below.
	Lookups   uint64
	FreshHits uint64 // answered with fresh data
	// EventServes counts lookups answered with data that a create or
	// update event announced less than a TTL ago and that the registry
	// has not confirmed yet: a service that just started or restarted,
	// between its event and the refresh that confirms it. It is normal
	// during a deploy; StaleServes is not.
	EventServes uint64
	StaleServes uint64 // answered with stale data, without waiting
	Throttled   uint64 // answered with the throttled error, or too stale
	Misses      uint64 // nothing usable cached: waited for a refresh
	Invalid     uint64 // the empty name: answered with ErrEmptyName

	Refreshes     uint64 // GetService calls to the registry
	RefreshErrors uint64 // registry calls that failed (not-found is an answer)
	Lists         uint64 // ListServices calls, one per resync of many services

	EventsApplied      uint64 // watch events applied to a cached service
	EventsIgnored      uint64 // watch events for services not cached
	EventsInvalidating uint64 // watch events that could not be applied
	WatchReconnects    uint64 // watch streams established after the first

	// ObserverDropped counts events a slow observer had no room for, and
	// events after Stop.
	ObserverDropped uint64

	// RegistryDown is set while the cache holds the registry to be down,
	// since RegistryDownSince, because of RegistryError.
	RegistryDown      bool
	RegistryDownSince time.Time
	RegistryError     string
	// Outages counts the times the registry was held to be down, the
	// current one included, and DownTime adds up how long, up to now: each
	// outage from its first failure to the answer that ended it. Both move
	// as the registry's state does, whether or not a refresh was due.
	Outages  uint64
	DownTime time.Duration

	// Stream is the state of the watch stream: StreamNotStarted before the
	// first lookup, StreamConnected, StreamReconnecting or StreamStopped,
	// since StreamSince (zero before the first stream).
	Stream      StreamState
	StreamSince time.Time

	// SnapshotError is why the WithSnapshot file cannot be written: the
	// check that New makes of its folder, then the last write's failure.
	// Empty when the last check or write succeeded, or with no snapshot.
	SnapshotError string

	// Entries is the number of services the cache holds state for, with
	// or without data.
	Entries int
	// OldestStaleServed is the largest age, since the registry last told
	// the cache its nodes, that stale data served so far has reached.
	OldestStaleServed time.Duration

	// Options are the options in effect, after defaults.
	Options Options
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
	Name string
	// Nodes is the number of nodes cached, zero for a service with no
	// data.
	Nodes int
	// Age is the time since the registry last told the cache this
	// service's nodes: a refresh, or an event announcing nodes.
	Age time.Duration
	// Failures counts consecutive failed refreshes.
	Failures int
	// Source is where the nodes came from: SourceRefresh, SourceEvent,
	// SourceSnapshot or SourceLastKnownNodes; empty with no data.
	Source Source
	// LastError is the last refresh failure, empty once the registry
	// answers for the service again; LastErrorAt is when it failed.
	LastError   string
	LastErrorAt time.Time
	// RetryAt is when the service's retry window closes, so that a
	// refresh may start; zero when one may start now.
	RetryAt time.Time
	// Fresh is false once the TTL has run out, and for data that never
	// had one: an event's, the snapshot file's.
	Fresh bool
	// Unconfirmed is set while the newest nodes came from an event less
	// than a TTL ago, and no refresh has confirmed them yet. Lookups of
	// such data past its expiry count as Stats.EventServes, not as stale.
	Unconfirmed bool
	// Refreshing is set while a refresh of the service is out.
	Refreshing bool
	// LastKnownNodes is set while WithLastKnownNodes keeps the nodes.
	LastKnownNodes bool
	// NodeList has the nodes, filled by Cache.Services only.
	NodeList []NodeStats `json:",omitempty"`
}

// NodeStats describes one cached node of a service.
type NodeStats struct {
	Id      string
	Address string
	// Version is the version of the service that the node runs.
	Version string
	// Metadata is a copy of the node's metadata.
	Metadata map[string]string `json:",omitempty"`
}

// counters are the cumulative figures behind Stats.
type counters struct {
	// hits and staleHits count lookups served without the lock, from
	// every core at once, so they are sharded;

	// eventHits likewise, for unconfirmed event data.
	hits, staleHits, eventHits counter.Sharded

	freshHits, staleServes, throttled, misses, invalid atomic.Uint64
	eventServes                                        atomic.Uint64
	refreshes, refreshErrors, lists                    atomic.Uint64
	eventsApplied, eventsIgnored, eventsInvalidating   atomic.Uint64
	reconnects, observerDropped                        atomic.Uint64
	// oldestStale is the largest age of stale data that was served and
	// then replaced; Stats adds the data still served.
	oldestStale atomic.Int64
	// staleSince is the moment the registry last told the nodes of the
	// oldest stale data that is held and was served; zero for none.
	staleSince atomic.Int64
}

// staleServed records the first serve of e's stale data s: the oldest
// moment of the stale data served and still held, staleSince, moves back
// to s's if s is older. It runs once a snapshot, lock-free.
func (c *cache) staleServed(e *entry, s *svcdata.Snapshot) {
	if e.staleRead.Swap(true) {
		return
	}
	m := int64(c.moment(s.ConfirmedAt()))
	for {
		cur := c.stats.staleSince.Load()
		if cur != 0 && cur <= m || c.stats.staleSince.CompareAndSwap(cur, m) {
			return
		}
	}
}

// staleEndedLocked records that stale data confirmed at confirmed, and
// served, is no longer held at now: its age goes into the oldest served,
// and if it was the oldest held, the maintainer finds the next.
func (c *cache) staleEndedLocked(confirmed, now time.Time) {
	c.stats.noteStaleAge(now.Sub(confirmed))
	if int64(c.moment(confirmed)) == c.stats.staleSince.Load() {
		c.staleDirty = true
		c.wake()
	}
}

// findStaleSince recomputes staleSince from the entries, a chunk at a
// time, for the maintainer.
func (c *cache) findStaleSince() {
	var oldest int64
	c.eachEntry(func(e *entry) {
		if s := e.data.Load(); s != nil && e.staleRead.Load() {
			if m := int64(c.moment(s.ConfirmedAt())); oldest == 0 || m < oldest {
				oldest = m
			}
		}
	})
	c.stats.staleSince.Store(oldest)
}

// noteStaleAge records the age that served stale data reached.
func (s *counters) noteStaleAge(age time.Duration) {
	for {
		old := s.oldestStale.Load()
		if int64(age) <= old || s.oldestStale.CompareAndSwap(old, int64(age)) {
			return
		}
	}
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
		FreshHits:          s.freshHits.Load(),
		EventServes:        s.eventServes.Load(),
		StaleServes:        s.staleServes.Load(),
		Throttled:          s.throttled.Load(),
		Misses:             s.misses.Load(),
		RefreshErrors:      s.refreshErrors.Load(),
		Refreshes:          s.refreshes.Load(),
		Lists:              s.lists.Load(),
		EventsApplied:      s.eventsApplied.Load(),
		EventsIgnored:      s.eventsIgnored.Load(),
		EventsInvalidating: s.eventsInvalidating.Load(),
		WatchReconnects:    s.reconnects.Load(),
		ObserverDropped:    s.observerDropped.Load(),
		Options:            c.opts,
	}
	st.FreshHits += s.hits.Load()
	st.StaleServes += s.staleHits.Load()
	st.EventServes += s.eventHits.Load()
	st.Invalid = s.invalid.Load()
	st.Lookups = st.FreshHits + st.EventServes + st.StaleServes + st.Throttled + st.Misses + st.Invalid

	now := c.now()
	st.OldestStaleServed = time.Duration(s.oldestStale.Load())
	if m := s.staleSince.Load(); m != 0 {
		st.OldestStaleServed = max(st.OldestStaleServed, now.Sub(c.time(moment(m))))
	}
	c.mu.Lock()
	c.stateLocked(&st, now)
	st.Entries = c.count
	c.mu.Unlock()
	return st
}

// stateLocked fills in the state of the registry, the stream and the
// snapshot file.
func (c *cache) stateLocked(st *Stats, now time.Time) {
	h := &c.health
	st.RegistryDown = h.Down
	st.Outages = h.Outages
	st.DownTime = h.DownTime
	if h.Down {
		st.RegistryDownSince = h.Since
		// A stopped cache no longer watches the registry: its down time
		// ends at Stop.
		end := now
		if c.stopped {
			end = c.stoppedAt
		}
		st.DownTime += max(0, end.Sub(h.Since))
		if h.LastErr != nil {
			st.RegistryError = h.LastErr.Error()
		}
	}
	switch {
	case c.stopped:
		st.Stream = StreamStopped
	case !c.watching:
		st.Stream = StreamNotStarted
	case c.stream != nil:
		st.Stream = StreamConnected
	default:
		st.Stream = StreamReconnecting
	}
	st.StreamSince = c.streamSince
	if c.writeErr != nil {
		st.SnapshotError = c.writeErr.Error()
	}
}

// rowLocked is e's row, snap being its data (nil for none).
func (c *cache) rowLocked(e *entry, snap *svcdata.Snapshot, now time.Time) ServiceStats {
	row := ServiceStats{
		Name:       e.name,
		Refreshing: e.flight != nil,
		Failures:   e.throttle.Failures,
	}
	if snap != nil {
		row.Fresh = now.Before(snap.Expires)
		row.Unconfirmed = c.unconfirmed(snap, now)
		row.Source = Source(snap.SourceName())
		row.Age = now.Sub(snap.ConfirmedAt())
		row.LastKnownNodes = snap.Kept
		for _, svc := range snap.Services {
			row.Nodes += len(svc.Nodes)
		}
	}
	if e.throttle.LastErr != nil {
		row.LastError = e.throttle.LastErr.Error()
		row.LastErrorAt = e.throttle.ErrAt
	}
	if !c.allowsLocked(e, now) {
		row.RetryAt = e.throttle.OpensAt(c.opts.MinimumRetryInterval)
	}
	return row
}
