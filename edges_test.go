package cache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/core"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// Regression tests for edge cases: each failed before its fix.

// Every change to what the cache would serve reaches the snapshot file
// written at Stop: a node deleted by an event, a service the registry said
// was gone, an entry evicted.
func TestSnapshotAtStopHoldsWhatTheCacheServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "snap.json")
		f := newFakeRegistry()
		f.SetNodes("a", "a1", "a2")
		f.SetNodes("b", "b1")
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithSnapshot(path))
		warm(t, c, "a", "b")
		time.Sleep(snapshotInterval)
		synctest.Wait() // written once, with both services
		require.Len(t, readSnapshotFile(t, path).Services, 2)

		deliver(f.Stream(), "delete", svc("a", "1", "a2"))
		f.SetNodes("b")
		time.Sleep(time.Minute)
		_, err := c.Lookup("b") // stale: the refresh finds it gone
		require.NoError(t, err)
		synctest.Wait()
		require.Nil(t, c.snapshotOf("b"))
		c.Stop()

		file := readSnapshotFile(t, path)
		require.Len(t, file.Services, 1, "b is gone")
		assert.Equal(t, "a", file.Services[0].Name)
		assert.Equal(t, []string{"a1"}, nodeIDs(file.Services[0].Services), "a2 was deleted")
	})
}

// A cancellation by Stop is not a registry failure: a cold caller waiting
// on the cancelled refresh gets its answer from the registry, as any lookup
// after Stop does, nothing is logged as failing, and the service is not
// throttled.
func TestStopDoesNotTurnALookupInFlightIntoAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeRegistry()
		r.SetNodes("svc", "n1")
		// The call waits until its context is done, as registries that
		// honour registry.GetContext do.
		r.HoldAnswers()
		c, l := newTestCache(t, r)
		done := make(chan struct{})
		go func() {
			defer close(done)
			got, err := c.Lookup("svc")
			assert.NoError(t, err)
			assert.Equal(t, []string{"n1"}, nodeIDs(got))
		}()
		synctest.Wait() // the refresh waits in the registry
		r.PassThrough() // later calls answer at once
		c.Stop()
		<-done
		for _, line := range l.all() {
			assert.NotContains(t, line, "failing")
		}
		assert.Zero(t, c.Stats().RefreshErrors)
		_, err := c.Lookup("svc")
		assert.NoError(t, err, "not throttled after Stop")
	})
}

// notFoundWithData answers ErrNotFound together with services, as no plugin
// does today but one might.
type notFoundWithData struct{ *fakereg.Registry }

func (r notFoundWithData) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	_, _ = r.Registry.GetService(name, opts...) // counted
	return []*registry.Service{svc(name, "1", "ghost")}, registry.ErrNotFound
}

// An ErrNotFound answer that carries services is a not-found: nothing is
// stored.
func TestNotFoundWithServicesIsNotData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newTestCache(t, notFoundWithData{newFakeRegistry()})
		defer c.Stop()
		got, err := c.Lookup("svc")
		assert.ErrorIs(t, err, registry.ErrNotFound)
		assert.Empty(t, got)
		assert.Nil(t, c.snapshotOf("svc"))
	})
}

// An observer that calls Stop stops the cache, and Stop returns instead of
// waiting for the observer it runs on. A Stop from elsewhere still waits
// for the callback in progress.
func TestObserverMayCallStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.Fail(errDown)
		var c *cache
		stopped := make(chan struct{})
		c, _ = newTestCache(t, f, WithObserver(func(ev Event) {
			if ev.Kind == ThrottleStarted {
				c.Stop()
				close(stopped)
			}
		}))
		_, _ = c.Lookup("svc") // fails
		_, _ = c.Lookup("svc") // throttled: tells ThrottleStarted
		<-stopped
		c.Stop()
		synctest.Wait()
		assert.Zero(t, cacheGoroutines())
	})
}

// Events still queued at Stop are delivered before Stop returns; events
// after Stop are counted as dropped. None vanishes.
func TestObserverGetsEveryEventOrItIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.Fail(errDown)
		gate := make(chan struct{})
		var mu sync.Mutex
		var got int
		c, _ := newTestCache(t, f, WithMinimumRetryInterval(0), WithProbeInterval(0), WithObserver(func(Event) {
			<-gate
			mu.Lock()
			got++
			mu.Unlock()
		}))
		for i := 0; i < 20; i++ {
			_, _ = c.Lookup(fmt.Sprint("svc-", i)) // each failure is told at once with the state off
		}
		synctest.Wait()
		stopped := make(chan struct{})
		go func() { c.Stop(); close(stopped) }()
		synctest.Wait()
		close(gate)
		<-stopped
		mu.Lock()
		assert.Equal(t, 20, got, "every queued event was delivered")
		mu.Unlock()
		_, _ = c.Lookup("after")
		assert.Equal(t, uint64(1), c.Stats().ObserverDropped, "an event after Stop is counted")
	})
}

// A service's refreshes that fail and recover in turn are told in the order
// they happened, whatever the goroutines do: never failing twice in a row,
// never recovered without failing first.
func TestObserverHearsOneServiceInOrder(t *testing.T) {
	r := newFakeRegistry()
	r.SetNodes("svc", "n")
	var mu sync.Mutex
	var kinds []EventKind
	c := New(r, WithLogger(&testLogger{}), WithMinimumRetryInterval(0), WithProbeInterval(0), WithObserver(func(ev Event) {
		if ev.Service == "svc" {
			mu.Lock()
			kinds = append(kinds, ev.Kind)
			mu.Unlock()
		}
	})).(*cache)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				r.Fail(map[bool]error{true: errDown}[i%3 != 0])
				c.mu.Lock()
				if e, ok := c.entries.Load("svc"); ok {
					e.(*core.Entry).Data.Store(nil) // keep it cold, so every lookup refreshes
				}
				c.mu.Unlock()
				for len(c.obs.events) > observerQueue/4 {
					runtime.Gosched() // no event is dropped, so the order can be checked
				}
				_, _ = c.Lookup("svc")
			}
		}()
	}
	wg.Wait()
	c.Stop()
	require.Zero(t, c.Stats().ObserverDropped)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, kinds)
	want := RefreshFailed
	for i, k := range kinds {
		if k != want {
			from := max(0, i-4)
			t.Fatalf("event %d is %v, want %v: ... %v", i, k, want, kinds[from:i+1])
		}
		want = map[EventKind]EventKind{RefreshFailed: RefreshRecovered, RefreshRecovered: RefreshFailed}[k]
	}
}

// Every Stop returns only after the final snapshot is written, a second one
// running at the same time too.
func TestConcurrentStopsWaitForTheFinalWrite(t *testing.T) {
	for i := 0; i < 20; i++ {
		path := filepath.Join(t.TempDir(), "snap.json")
		f := newFakeRegistry()
		f.SetNodes("svc", "n")
		c, _ := newTestCache(t, f, WithSnapshot(path))
		_, err := c.Lookup("svc")
		require.NoError(t, err)
		var wg sync.WaitGroup
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.Stop()
				_, err := os.Stat(path)
				assert.NoError(t, err, "Stop returned before the file was written")
			}()
		}
		wg.Wait()
	}
}

// More events than are kept for replay arrive during one refresh: the
// answer, older than the events, is not stored over the data they built.
func TestEventOverflowDuringARefreshKeepsTheNewerData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "old")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		time.Sleep(time.Minute)
		gate := f.Hold()
		_, err := c.Lookup("svc") // stale: the refresh waits in the registry
		require.NoError(t, err)
		synctest.Wait()
		s := f.Stream()
		var want []string
		for i := 0; i < core.MaxCallEvents+44; i++ {
			id := fmt.Sprint("n", i)
			deliver(s, "create", svc("svc", "1", id))
			if i%2 == 0 {
				deliver(s, "delete", svc("svc", "1", id))
			} else {
				want = append(want, id)
			}
		}
		deliver(s, "delete", svc("svc", "1", "old"))
		calls := f.Calls("svc")
		again := f.Hold() // the call after the answer waits here
		gate.Open()       // the answer still lists "old" only
		synctest.Wait()
		got, err := c.Lookup("svc")
		require.NoError(t, err)
		assert.Equal(t, want, nodeIDs(got), "every event applied, none undone by the older answer")
		assert.False(t, time.Now().Before(c.snapshotOf("svc").Expires), "stale, until the registry confirms it")
		assert.Equal(t, calls+1, f.Calls("svc"), "asked again at once: too many events to replay")

		f.SetNodes("svc", want...)
		again.Open()
		synctest.Wait()
		got, err = c.Lookup("svc")
		require.NoError(t, err)
		assert.Equal(t, want, nodeIDs(got))
		assert.True(t, time.Now().Before(c.snapshotOf("svc").Expires), "confirmed")
	})
}

// Stop waits for the cache's goroutines for at most stopWait: one stuck in
// a registry call that ignores cancellation is left to return on its own,
// with a log line, rather than hang the service's shutdown.
func TestStopGivesUpOnARegistryThatIgnoresCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeRegistry()
		r.SetNodes("svc", "n")
		// Watch ignores its context until released, then fails.
		hang := r.HoldWatch()
		r.SetWatchFault(fakereg.WatchFault{WatchErr: errDown})
		c, l := newTestCache(t, r)
		_, err := c.Lookup("svc") // starts the watcher, which hangs in Watch
		require.NoError(t, err)
		start := time.Now()
		c.Stop()
		assert.Equal(t, stopWait, time.Since(start))
		require.NotEmpty(t, l.all())
		assert.Contains(t, strings.Join(l.all(), "\n"), "Stop gave up")
		hang.Open() // the watcher returns, and starts nothing more
		synctest.Wait()
		assert.Zero(t, cacheGoroutines())
	})
}

// An entry dropped by idle eviction leaves no timer behind.
func TestEvictedEntriesLeaveNoTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n")
		c, _ := newTestCache(t, f, WithTTL(time.Hour), WithIdleEviction(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		e := c.entryOf("svc")
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		require.Nil(t, c.entryOf("svc"), "evicted")
		assert.False(t, e.Timer.Stop(), "its timer was stopped with it")
	})
}

// Concurrent cold callers of one service each count as a miss, and every
// lookup counts in exactly one outcome.
func TestEveryLookupCountsInOneOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n")
		c, _ := newTestCache(t, f)
		defer c.Stop()
		gate := f.Hold()
		var wg sync.WaitGroup
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Lookup("svc")
				assert.NoError(t, err)
			}()
		}
		synctest.Wait()
		gate.Open()
		wg.Wait()
		st := c.Stats()
		assert.Equal(t, uint64(10), st.Misses, "the starter and nine joiners")
		assert.Equal(t, st.Lookups, st.FreshHits+st.StaleServes+st.Throttled+st.Misses+st.Invalid)
		assert.Equal(t, uint64(10), st.Lookups)
	})
}

// Stats counters keep their invariants in every snapshot taken while
// readers run, and never go down.
func TestStatsInvariantsHoldUnderLoad(t *testing.T) {
	f := newFakeRegistry()
	f.SetAnyName(true)
	c := New(f, WithLogger(&testLogger{}), WithTTL(time.Millisecond), WithMinimumRetryInterval(0))
	defer c.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				_, _ = c.Lookup(fmt.Sprint("svc-", i%50))
				if i%7 == 0 {
					_, _ = c.Lookup("")
				}
			}
		}()
	}
	var prev Stats
	for i := 0; i < 200 || prev.Lookups < 10_000; i++ {
		st := c.Stats()
		require.Equal(t, st.Lookups, st.FreshHits+st.StaleServes+st.Throttled+st.Misses+st.Invalid)
		require.LessOrEqual(t, st.RefreshErrors, st.Refreshes)
		for _, pair := range [][2]uint64{
			{prev.Lookups, st.Lookups}, {prev.FreshHits, st.FreshHits}, {prev.StaleServes, st.StaleServes},
			{prev.Misses, st.Misses}, {prev.Invalid, st.Invalid}, {prev.Refreshes, st.Refreshes},
		} {
			require.LessOrEqual(t, pair[0], pair[1], "a counter went down")
		}
		prev = st
	}
	cancel()
	wg.Wait()
	require.Greater(t, prev.Lookups, uint64(0))
}

var _ = errors.Is

// Answers the cache refuses to copy are the services' own failures: the
// registry answered, so however many services send them, the registry is
// not held down, and other services keep refreshing.
func TestUnusableAnswersDoNotTakeTheRegistryDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeRegistry()
		// Every service answers a cyclic tree, handed out uncopied.
		r.SetShared(true)
		for _, name := range []string{"a", "b", "c"} {
			r.Set(name, cyclicService())
		}
		c, _ := newTestCache(t, r)
		defer c.Stop()
		for _, name := range []string{"a", "b", "c"} {
			_, err := c.GetService(name)
			require.ErrorIs(t, err, ErrAnswerTooLarge)
		}
		c.mu.Lock()
		down, _ := c.core.Health()
		c.mu.Unlock()
		assert.False(t, down)
		r.SetNodes("d", "d1")
		_, err := c.GetService("d")
		assert.NoError(t, err, "not refused by a registry-down state")
	})
}
