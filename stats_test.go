package cache

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/core"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

func TestStatsCountEveryPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a", "b")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc") // one miss, and its refresh
		for i := 0; i < 10; i++ {
			_, err := c.Lookup("svc")
			require.NoError(t, err)
		}
		_, _ = c.Lookup("")
		_, _ = c.Lookup("missing") // a miss: not found
		_, _ = c.Lookup("missing") // throttled
		expire(c, "svc")
		f.Fail(errDown)
		_, _ = c.Lookup("svc") // stale, starts a failing refresh
		synctest.Wait()
		deliver(f.Stream(), "create", svc("svc", "1", "c"))
		deliver(f.Stream(), "create", svc("other", "1", "x"))
		deliver(f.Stream(), "weird", svc("svc", "1", "c"))

		st := c.Stats()
		assert.Equal(t, uint64(15), st.Lookups)
		assert.Equal(t, uint64(10), st.FreshHits)
		assert.Equal(t, uint64(1), st.StaleServes)
		assert.Equal(t, uint64(1), st.Throttled)
		assert.Equal(t, uint64(2), st.Misses)
		assert.Equal(t, uint64(3), st.Refreshes, "fill, missing, stale refresh")
		assert.Equal(t, uint64(1), st.RefreshErrors)
		assert.Equal(t, uint64(1), st.EventsApplied)
		assert.Equal(t, uint64(1), st.EventsIgnored)
		assert.Equal(t, uint64(1), st.EventsInvalidating)
		assert.Equal(t, 1, st.Entries, "svc; missing was dropped when its throttle window closed")
		assert.Zero(t, st.StaleServedAge, "the stale data served was replaced by the event's")
		require.Len(t, c.dataRows(), 1)
		row := c.dataRows()[0]
		assert.Equal(t, "svc", row.Name)
		assert.Equal(t, 3, row.Nodes)
		assert.False(t, row.Fresh)
		assert.Zero(t, row.Age, "the create event announced nodes just now")
		assert.Equal(t, 1, row.Failures)
		assert.Contains(t, row.LastError, errDown.Error())
		assert.Equal(t, time.Now(), row.LastErrorAt)
		assert.True(t, row.Unconfirmed, "the create event's node is not confirmed yet")
		assert.Equal(t, SourceEvent, row.Source)

		time.Sleep(4 * time.Second)
		_, _ = c.Lookup("svc")
		st = c.Stats()
		assert.Equal(t, uint64(1), st.EventServes, "data an event announced 4 s ago is not stale")
		assert.Equal(t, uint64(1), st.StaleServes)
		assert.Zero(t, st.StaleServedAge, "the event's data is not stale")
		time.Sleep(time.Minute)
		_, _ = c.Lookup("svc")
		st = c.Stats()
		assert.Equal(t, uint64(2), st.StaleServes, "a TTL after the event, still unconfirmed: stale")
		assert.Equal(t, st.Lookups, st.FreshHits+st.EventServes+st.StaleServes+st.Throttled+st.Misses+st.Invalid)
		assert.False(t, c.dataRows()[0].Unconfirmed)
		assert.Equal(t, time.Minute+4*time.Second, st.StaleServedAge, "the event's data, served stale, is as old as the event")
	})
}

func TestStatsReconnects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a")
		c, _ := newTestCache(t, f)
		defer c.Stop()
		warm(t, c, "svc")
		f.Stream().Break(errDown)
		time.Sleep(time.Second)
		assert.Equal(t, uint64(1), c.Stats().WatchReconnects)
	})
}

// recorder is an observer that records events, optionally blocking or
// panicking first.
type recorder struct {
	mu     sync.Mutex
	events []Event
	block  chan struct{}
	panics bool
}

func (r *recorder) observe(ev Event) {
	if r.block != nil {
		<-r.block
	}
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	if r.panics {
		panic("observer boom")
	}
}

func (r *recorder) kinds() []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var k []EventKind
	for _, ev := range r.events {
		k = append(k, ev.Kind)
	}
	return k
}

func TestObserverHearsStateChangesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a")
		rec := &recorder{}
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithObserver(rec.observe), WithLastKnownNodes())
		defer c.Stop()
		warm(t, c, "svc")
		for i := 0; i < 100; i++ {
			_, _ = c.Lookup("svc") // hits tell nothing
		}
		synctest.Wait()
		assert.Empty(t, rec.kinds())

		expire(c, "svc")
		f.Fail(errDown)
		for i := 0; i < 10; i++ {
			_, _ = c.Lookup("svc")
			synctest.Wait()
			time.Sleep(time.Second)
		}
		f.Fail(nil)
		f.SetNodes("svc") // empty: last known nodes kept
		time.Sleep(5 * time.Second)
		_, _ = c.Lookup("svc")
		synctest.Wait()
		f.SetNodes("svc", "b")
		time.Sleep(5 * time.Second)
		_, _ = c.Lookup("svc")
		synctest.Wait()

		f.Fail(errDown)
		_, _ = c.Lookup("nothing") // fails cold: not told, it may not last
		_, _ = c.Lookup("nothing") // throttled
		_, _ = c.Lookup("nothing") // still throttled: not told again
		time.Sleep(5 * time.Second)
		_, _ = c.Lookup("nothing") // fails again: now it is told
		f.SetWatchFault(fakereg.WatchFault{WatchErr: errDown})
		f.Stream().Break(errDown)
		time.Sleep(time.Second)
		f.Fail(nil) // so that the re-validation after the reconnect succeeds
		f.SetWatchFault(fakereg.WatchFault{})
		time.Sleep(time.Minute)
		synctest.Wait()

		assert.Equal(t, []EventKind{
			ServiceStale, RefreshFailed, // svc expired, then its refresh failed
			RefreshRecovered, LastKnownNodesKept, // an empty answer
			LastKnownNodesReleased, // nodes again
			ThrottleStarted,        // nothing, once
			RefreshFailed,          // nothing, failing twice in a row
			RegistryDown,           // then the stream is lost too
			WatchDisconnected,
			WatchReconnected, // the stream is back
			RegistryUp,       // and then the registry, once a refresh answers
			RefreshRecovered, // nothing, re-validated by the resync: answered
		}, rec.kinds())
		rec.mu.Lock()
		assert.ErrorIs(t, rec.events[1].Err, errDown)
		assert.Equal(t, "svc", rec.events[1].Service)
		rec.mu.Unlock()
	})
}

func TestSlowOrPanickingObserverNeverBlocksLookups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.Fail(errDown)
		rec := &recorder{block: make(chan struct{}), panics: true}
		c, l := newTestCache(t, f, WithObserver(rec.observe), WithMinimumRetryInterval(0))
		for i := 0; i < 1000; i++ {
			for range 2 { // twice, so that the failure is told
				start := time.Now()
				_, err := c.Lookup("svc")
				require.ErrorIs(t, err, errDown)
				require.Zero(t, time.Since(start))
			}
			f.Fail(nil)
			f.SetNodes("svc") // recovers: not found
			_, _ = c.Lookup("svc")
			f.Fail(errDown)
		}
		st := c.Stats()
		assert.Greater(t, st.ObserverDropped, uint64(0), "a stuck observer's queue overflows; events are dropped")
		close(rec.block)
		synctest.Wait()
		assert.NotEmpty(t, rec.kinds())
		c.Stop()
		n := 0
		for _, line := range l.all() {
			if strings.Contains(line, "observer panicked") {
				n++
			}
		}
		assert.Equal(t, 1, n, "the panic is logged once")
	})
}

func TestWithObserverNilPanics(t *testing.T) {
	assert.PanicsWithValue(t, "regcache: WithObserver: observer must not be nil", func() {
		New(newFakeRegistry(), WithObserver(nil))
	})
}

// BenchmarkHitCounters measures what counting costs a fresh hit: Lookup as
// it is, against the same loads without the sharded counter.
func BenchmarkHitCounters(b *testing.B) {
	f := newFakeRegistry()
	f.SetNodes("svc", "a", "b", "c")
	c, _ := newTestCache(&testing.T{}, f)
	defer c.Stop()
	if _, err := c.Lookup("svc"); err != nil {
		b.Fatal(err)
	}
	uncounted := func(name string) []*registry.Service {
		if v, ok := c.entries.Load(name); ok {
			e := v.(*core.Entry)
			if s := e.Data.Load(); s != nil && e.Mode.Load() == core.ModeFresh {
				return s.Services
			}
		}
		return nil
	}
	b.Run("counters=on", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := c.Lookup("svc"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("counters=off", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if uncounted("svc") == nil {
				b.Fatal("miss")
			}
		}
	})
	b.Run("counters=on/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = c.Lookup("svc")
			}
		})
	})
	b.Run("counters=off/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = uncounted("svc")
			}
		})
	})
}

// blockingLogger holds every log line containing on until gate is closed.
type blockingLogger struct {
	testLogger
	on   string
	gate chan struct{}
}

func (l *blockingLogger) Logf(level log.Level, format string, v ...interface{}) {
	if strings.Contains(fmt.Sprintf(format, v...), l.on) {
		<-l.gate
	}
	l.testLogger.Logf(level, format, v...)
}

// A caller that gets a refresh's outcome finds it logged and its events
// queued, so the observer hears that a service's refresh failed before it
// hears of the throttling that the failure causes.
func TestRefreshOutcomeIsToldBeforeWaitersWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.Fail(errDown)
		l := &blockingLogger{on: "failing", gate: make(chan struct{})}
		rec := &recorder{}
		c := New(f, WithLogger(l), WithObserver(rec.observe))
		defer c.Stop()

		_, err := c.Lookup("svc") // a first failure is not told
		assert.ErrorIs(t, err, errDown)
		time.Sleep(DefaultMinimumRetryInterval)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := c.Lookup("svc")
			assert.ErrorIs(t, err, errDown)
		}()
		synctest.Wait() // the refresh is logging its failure
		select {
		case <-done:
			assert.Fail(t, "the caller got the failure before it was logged and told")
		default:
		}
		close(l.gate)
		<-done
		_, err = c.Lookup("svc")
		assert.ErrorIs(t, err, ErrThrottled)
		synctest.Wait()
		assert.Equal(t, []EventKind{RefreshFailed, ThrottleStarted}, rec.kinds())
	})
}

// StaleServedAge follows the stale data still served: once the oldest is
// refreshed, the figure is the next oldest's age, not the refreshed
// data's, and once none is left it is zero.
func TestStaleServedAgeFollowsTheDataStillServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("a", "a1")
		f.SetNodes("b", "b1")
		// No registry-wide state: its recovery would re-validate b.
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithProbeInterval(0))
		defer c.Stop()
		warm(t, c, "a")
		time.Sleep(30 * time.Second)
		warm(t, c, "b") // 30 s younger than a
		time.Sleep(time.Minute)
		f.Fail(errDown)
		for _, n := range []string{"a", "b"} {
			_, err := c.Lookup(n) // stale, served; the refresh fails
			require.NoError(t, err)
		}
		synctest.Wait()
		assert.Equal(t, 90*time.Second, c.Stats().StaleServedAge, "a's age")

		f.Fail(nil)
		time.Sleep(c.opts.MinimumRetryInterval)
		_, err := c.Lookup("a") // refreshed
		require.NoError(t, err)
		synctest.Wait()
		assert.True(t, c.snapshotOf("a").Refreshed.Equal(time.Now()), "a refreshed")
		assert.Equal(t, 65*time.Second, c.Stats().StaleServedAge, "b's age: a is fresh")

		time.Sleep(time.Minute)
		// b, confirmed 125 s ago and served stale since, grows older.
		assert.Equal(t, 125*time.Second, c.Stats().StaleServedAge)
		_, err = c.Lookup("b") // refreshed
		require.NoError(t, err)
		synctest.Wait()
		assert.Zero(t, c.Stats().StaleServedAge, "nothing stale served is held")
	})
}

// StaleServedAge, the figure to alert on, rises through an outage as the
// data served ages, and is back to zero once the registry answers again,
// though its outage is counted for good.
func TestStaleServedAgeRisesInAnOutageAndEndsWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n1")
		f.SetNodes("other", "o1")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc", "other")
		assert.Zero(t, c.Stats().StaleServedAge, "all fresh")

		f.Fail(errDown)
		expire(c, "svc")
		assert.Zero(t, c.Stats().StaleServedAge, "stale, but not served yet")
		var ages []time.Duration
		for i := 0; i < 4; i++ {
			for _, n := range []string{"svc", "other"} {
				_, err := c.Lookup(n) // stale, served; the refreshes fail
				require.NoError(t, err, n)
			}
			synctest.Wait()
			ages = append(ages, c.Stats().StaleServedAge)
			time.Sleep(10 * time.Second)
		}
		st := c.Stats()
		require.True(t, st.RegistryDown, "two services failing: the registry is held down")
		assert.Equal(t, []time.Duration{time.Minute, 70 * time.Second, 80 * time.Second, 90 * time.Second}, ages,
			"the age of svc's data, the older, from its expiry on")

		f.Fail(nil)
		// Lookups go on; a probe finds the registry back, and the data
		// is re-validated.
		for i := 0; i < 120 && (c.Stats().RegistryDown || c.Stats().StaleServedAge > 0); i++ {
			for _, n := range []string{"svc", "other"} {
				_, err := c.Lookup(n)
				require.NoError(t, err, n)
			}
			synctest.Wait()
			time.Sleep(time.Second)
		}
		st = c.Stats()
		assert.False(t, st.RegistryDown, "the registry back")
		assert.Zero(t, st.StaleServedAge, "the data is fresh again")
		assert.Equal(t, uint64(1), st.Outages, "the outage stays counted")
		for _, row := range c.dataRows() {
			assert.True(t, row.Fresh, row.Name)
		}
	})
}

// The hit counters (core.Sharded) count every Add, from many goroutines
// at once.
func TestShardedCountsEveryAdd(t *testing.T) {
	var c core.Sharded
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				c.Add()
			}
		}()
	}
	wg.Wait()
	if got := c.Load(); got != 16000 {
		t.Fatalf("Load = %d, want 16000", got)
	}
}

// Stats.StaleServedAge ages the stale data served while it is held: an
// entry dropped with it (idle eviction) takes it along. (Held off a bug,
// older than the redesign: the figure kept growing for good, a false
// alarm to operators.)
func TestStaleServedAgeEndsWithItsEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n1")
		f.SetNodes("other", "o1")
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithIdleEviction(10*time.Minute))
		defer c.Stop()
		warm(t, c, "svc", "other")
		f.Fail(errDown)
		expire(c, "svc")
		_, err := c.Lookup("svc") // stale, served; its refresh fails
		require.NoError(t, err)
		synctest.Wait()
		f.Fail(nil)
		require.Equal(t, time.Minute, c.Stats().StaleServedAge)
		for i := 0; i < 6; i++ {
			time.Sleep(time.Hour)
			_, _ = c.Lookup("other")
			synctest.Wait()
		}
		st := c.Stats()
		require.Equal(t, 1, st.Entries, "svc evicted")
		assert.Zero(t, st.StaleServedAge, "its age went with it")
	})
}
