package cache

import (
	"sort"
	"sync/atomic"
	"time"
	"unsafe"
)

// Stats is a view of a cache's cumulative counters and of its entries at
// one moment.
type Stats struct {
	// Lookups counts GetService and Lookup calls. Every one of them is
	// counted in exactly one of the four below, except lookups of the
	// empty name.
	Lookups     uint64
	FreshHits   uint64 // answered with fresh data
	StaleServes uint64 // answered with stale data, without waiting
	Throttled   uint64 // answered with the throttled error
	Misses      uint64 // nothing usable cached: waited for a refresh

	Refreshes     uint64 // registry calls
	RefreshErrors uint64 // registry calls that failed (not-found is an answer)

	EventsApplied      uint64 // watch events applied to a cached service
	EventsIgnored      uint64 // watch events for services not cached
	EventsInvalidating uint64 // watch events that could not be applied
	WatchReconnects    uint64 // watch streams established after the first

	// ObserverDropped counts events a slow observer had no room for.
	ObserverDropped uint64

	// Entries is the number of services the cache holds state for, with
	// or without data.
	Entries int
	// OldestStaleServed is the largest age, since its last successful
	// refresh, of any stale data served so far.
	OldestStaleServed time.Duration

	// Services has one row per service with data, by name.
	Services []ServiceStats
}

// ServiceStats describes one cached service.
type ServiceStats struct {
	Name  string
	Nodes int
	// Fresh is false once the TTL has run out.
	Fresh bool
	// Age is the time since the last successful refresh.
	Age time.Duration
	// Failures counts consecutive failed refreshes.
	Failures int
	// LastError is the last refresh failure, empty after a success.
	LastError string
	// LastKnownNodes is set while WithLastKnownNodes keeps the nodes.
	LastKnownNodes bool
}

// counters are the cumulative figures behind Stats.
type counters struct {
	// hits counts fresh hits on the hot path, from every core at once, so
	// it is sharded.
	hits shardedCounter

	lookups, freshHits, staleServes, throttled, misses atomic.Uint64
	refreshes, refreshErrors                           atomic.Uint64
	eventsApplied, eventsIgnored, eventsInvalidating   atomic.Uint64
	reconnects, observerDropped                        atomic.Uint64
	oldestStale                                        atomic.Int64
}

// staleServed records the age of stale data served.
func (s *counters) staleServed(age time.Duration) {
	s.staleServes.Add(1)
	for {
		old := s.oldestStale.Load()
		if int64(age) <= old || s.oldestStale.CompareAndSwap(old, int64(age)) {
			return
		}
	}
}

// shardedCounter spreads increments over eight cache lines, so that cores
// counting at once rarely write the same line.
type shardedCounter struct {
	shards [8]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

// add picks a shard from the address of a local variable: goroutines have
// separate stacks, so goroutines running at once on different cores
// usually land on different lines. It costs a couple of nanoseconds, where
// a random draw costs twice as much; the address is only hashed, never
// turned back into a pointer.
func (c *shardedCounter) add() {
	var local byte
	p := uintptr(unsafe.Pointer(&local))
	c.shards[(p>>10^p>>13)&7].n.Add(1)
}

func (c *shardedCounter) load() uint64 {
	var n uint64
	for i := range c.shards {
		n += c.shards[i].n.Load()
	}
	return n
}

// Stats returns the cache's counters and a row per cached service.
func (c *cache) Stats() Stats {
	s := &c.stats
	hits := s.hits.load()
	st := Stats{
		Lookups:            hits + s.lookups.Load(),
		FreshHits:          hits + s.freshHits.Load(),
		StaleServes:        s.staleServes.Load(),
		Throttled:          s.throttled.Load(),
		Misses:             s.misses.Load(),
		Refreshes:          s.refreshes.Load(),
		RefreshErrors:      s.refreshErrors.Load(),
		EventsApplied:      s.eventsApplied.Load(),
		EventsIgnored:      s.eventsIgnored.Load(),
		EventsInvalidating: s.eventsInvalidating.Load(),
		WatchReconnects:    s.reconnects.Load(),
		ObserverDropped:    s.observerDropped.Load(),
		OldestStaleServed:  time.Duration(s.oldestStale.Load()),
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries.Range(func(k, v any) bool {
		st.Entries++
		e := v.(*entry)
		snap := e.data.Load()
		if snap == nil {
			return true
		}
		row := ServiceStats{
			Name:           k.(string),
			Fresh:          now.Before(snap.expires),
			Age:            now.Sub(snap.refreshed),
			Failures:       e.throttle.failures,
			LastKnownNodes: snap.kept,
		}
		for _, svc := range snap.services {
			row.Nodes += len(svc.Nodes)
		}
		if e.throttle.lastErr != nil {
			row.LastError = e.throttle.lastErr.Error()
		}
		st.Services = append(st.Services, row)
		return true
	})
	sort.Slice(st.Services, func(i, j int) bool { return st.Services[i].Name < st.Services[j].Name })
	return st
}
