package core

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/regcache/cache/internal/svcdata"
)

// Counters are the cache's cumulative figures. They are atomic: the
// lock-free path adds to some, and Stats reads them all without the lock.
type Counters struct {
	// Hits, StaleHits and EventHits count the lookups served without the
	// lock, from every core at once, so they are sharded.
	Hits, StaleHits, EventHits Sharded

	FreshServes, StaleServes, EventServes, Throttled, Misses, Invalid atomic.Uint64
	Refreshes, RefreshErrors, Lists                                   atomic.Uint64
	EventsApplied, EventsIgnored, EventsInvalidating                  atomic.Uint64
	Reconnects, ObserverDropped                                       atomic.Uint64
	// StaleSince is the moment the registry last told the nodes of the
	// oldest stale data that is held and was served (zero: none).
	StaleSince atomic.Int64
	// Heard counts the times the registry showed that it reaches the
	// services it lists: an answer with nodes, or a watch event for any
	// service. An empty answer with no error is believed only once the
	// registry was heard from after it (doubted).
	Heard atomic.Uint64
}

// StaleServed records the first serve of e's stale data s: the oldest
// moment of the stale data served and still held moves back to s's if s
// is older. It is safe without the lock.
func (k *Core) StaleServed(e *Entry, s *svcdata.Snapshot) {
	if e.StaleRead.Swap(true) {
		return
	}
	m := int64(k.moment(s.ConfirmedAt()))
	for {
		cur := k.Stats.StaleSince.Load()
		if cur != 0 && cur <= m || k.Stats.StaleSince.CompareAndSwap(cur, m) {
			return
		}
	}
}

// staleEnded records that stale data confirmed at confirmed, and served,
// is no longer held: if it was the oldest held, the maintainer finds the
// next.
func (k *Core) staleEnded(confirmed time.Time) {
	if int64(k.moment(confirmed)) == k.Stats.StaleSince.Load() {
		k.scans.staleDirty = true
		k.wake()
	}
}

// StaleServedAge is the age at now of the oldest stale data that was
// served and is still held, zero when none is. It is safe without the
// lock.
func (k *Core) StaleServedAge(now time.Time) time.Duration {
	if m := k.Stats.StaleSince.Load(); m != 0 {
		return max(0, now.Sub(k.time(moment(m))))
	}
	return 0
}

// Stream states, as State.Stream gives them.
const (
	StreamNotStarted = iota
	StreamConnected
	StreamReconnecting
	StreamStopped
)

// State is the state of the registry, the stream and the snapshot file.
type State struct {
	RegistryDown      bool
	RegistryDownSince time.Time
	RegistryError     error
	Outages           uint64
	DownTime          time.Duration
	Stream            int
	StreamSince       time.Time
	SnapshotError     error
	Entries           int
}

// State fills st with the state at now.
func (k *Core) State(now time.Time, st *State) {
	h := &k.health
	st.RegistryDown, st.Outages, st.DownTime, st.StreamSince = h.Down, h.Outages, h.DownTime, k.stream.since
	st.SnapshotError, st.Entries = k.persist.err, len(k.all)
	if h.Down {
		st.RegistryDownSince = h.Since
		// A stopped cache no longer watches the registry: its down time
		// ends at Stop.
		end := now
		if k.stopped {
			end = k.stoppedAt
		}
		st.DownTime += max(0, end.Sub(h.Since))
		st.RegistryError = h.LastErr
	}
	switch {
	case k.stopped:
		st.Stream = StreamStopped
	case !k.watching:
		st.Stream = StreamNotStarted
	case k.stream.open:
		st.Stream = StreamConnected
	default:
		st.Stream = StreamReconnecting
	}
}

// Row describes one entry, its data being snap (nil for none).
type Row struct {
	Name        string
	Nodes       int
	Age         time.Duration
	Failures    int
	Source      string
	LastError   error
	LastErrorAt time.Time
	RetryAt     time.Time
	Fresh       bool
	Unconfirmed bool
	Refreshing  bool
	Last        bool
}

// Row returns e's row at now, snap being its data.
func (k *Core) Row(e *Entry, snap *svcdata.Snapshot, now time.Time) Row {
	row := Row{Name: e.Name, Refreshing: e.phase == PhaseFetching, Failures: e.throttle.Failures}
	if snap != nil {
		row.Fresh = now.Before(snap.Expires)
		row.Unconfirmed = k.unconfirmed(snap, now)
		row.Source = snap.SourceName()
		row.Age = now.Sub(snap.ConfirmedAt())
		row.Last = snap.Hold != svcdata.Current
		for _, svc := range snap.Services {
			row.Nodes += len(svc.Nodes)
		}
	}
	if e.throttle.LastErr != nil {
		row.LastError = e.throttle.LastErr
		row.LastErrorAt = e.throttle.ErrAt
	}
	if !k.allows(e, now) {
		row.RetryAt = e.throttle.OpensAt(k.cfg.MinimumRetryInterval)
	}
	return row
}

// Sharded is a counter that many cores can add to at once: it spreads its
// increments over eight cache lines, so that cores counting at once
// rarely write the same line. The zero value is ready to use.
type Sharded struct {
	shards [8]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

// Add adds one. It picks a shard from the address of a local variable:
// goroutines have separate stacks, so goroutines running at once on
// different cores usually land on different lines. It costs a couple of
// nanoseconds, where a random draw costs twice as much; the address is
// only hashed, never turned back into a pointer.
func (c *Sharded) Add() {
	var local byte
	p := uintptr(unsafe.Pointer(&local))
	c.shards[(p>>10^p>>13)&7].n.Add(1)
}

// Load returns the sum of the shards.
func (c *Sharded) Load() uint64 {
	var n uint64
	for i := range c.shards {
		n += c.shards[i].n.Load()
	}
	return n
}
