package cache

import (
	"sort"
	"sync/atomic"
	"time"
	"unsafe"
)

// Stats is a view of a cache's cumulative counters and of its entries at
// one moment.
//
// Within one Stats value these always hold: Lookups equals FreshHits +
// StaleServes + Throttled + Misses + Invalid, and RefreshErrors is at most
// Refreshes. Counters never go down from one Stats call to the next.
type Stats struct {
	// Lookups counts GetService and Lookup calls, each in exactly one of
	// the five outcomes below.
	Lookups     uint64
	FreshHits   uint64 // answered with fresh data
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
	// since RegistryDownSince.
	RegistryDown      bool
	RegistryDownSince time.Time

	// Entries is the number of services the cache holds state for, with
	// or without data.
	Entries int
	// OldestStaleServed is the largest age, since the registry last told
	// the cache its nodes, that stale data served so far has reached.
	OldestStaleServed time.Duration

	// Options are the options in effect, after defaults.
	Options Options

	// Services has one row per service with data, by name.
	Services []ServiceStats
}

// ServiceStats describes one cached service.
type ServiceStats struct {
	Name  string
	Nodes int
	// Fresh is false once the TTL has run out.
	Fresh bool
	// Age is the time since the registry last told the cache this
	// service's nodes: a refresh, or an event announcing nodes.
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
	// hits and staleHits count lookups served without the lock, from
	// every core at once, so they are sharded.
	hits, staleHits shardedCounter

	freshHits, staleServes, throttled, misses, invalid atomic.Uint64
	refreshes, refreshErrors, lists                    atomic.Uint64
	eventsApplied, eventsIgnored, eventsInvalidating   atomic.Uint64
	reconnects, observerDropped                        atomic.Uint64
	// oldestStale is the largest age of stale data that was served and
	// then replaced; Stats adds the data still served.
	oldestStale atomic.Int64
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

// Stats returns the cache's counters and a row per cached service. The
// rows are gathered a chunk of entries at a time, so that a scrape of a
// large cache never holds up lookups for long.
func (c *cache) Stats() Stats {
	s := &c.stats
	// Lookups is the sum of its outcomes, and errors are loaded before
	// refreshes, each error being counted after its refresh: so the
	// invariants hold in every snapshot.
	st := Stats{
		FreshHits:          s.freshHits.Load(),
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
	st.FreshHits += s.hits.load()
	st.StaleServes += s.staleHits.load()
	st.Invalid = s.invalid.Load()
	st.Lookups = st.FreshHits + st.StaleServes + st.Throttled + st.Misses + st.Invalid

	now := c.now()
	oldest := time.Duration(s.oldestStale.Load())
	c.mu.Lock()
	st.RegistryDown = c.health.down
	if st.RegistryDown {
		st.RegistryDownSince = c.health.since
	}
	rows := c.withData
	c.mu.Unlock()
	// Sized up front, and outside the lock: growing a slice of 100 000
	// rows, or zeroing it, would take milliseconds while the lock is held.
	st.Services = make([]ServiceStats, 0, rows+scanChunk)
	c.eachEntry(func(e *entry) {
		st.Entries++
		snap := e.data.Load()
		if snap == nil {
			return
		}
		if e.staleRead.Load() && !now.Before(snap.expires) {
			oldest = max(oldest, now.Sub(snap.refreshed))
		}
		row := ServiceStats{
			Name:           e.name,
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
	})
	st.OldestStaleServed = oldest
	sort.Slice(st.Services, func(i, j int) bool { return st.Services[i].Name < st.Services[j].Name })
	return st
}
