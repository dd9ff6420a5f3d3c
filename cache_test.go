package cache

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/core"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/regcache/cache/internal/svcdata"
)

// Every test here runs in a synctest bubble: time is fake, and the bubble
// fails the test if any goroutine the cache started is still alive when the
// test returns. That is the leak check for every cache these tests create.

// The seed README, scenario 1: a registry failure with a stale entry serves
// the stale data, and makes no registry call inside the retry interval.
func TestSeedScenario1RegistryFailureServesStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("api", "a1")
		c, _ := newTestCache(t, f, WithTTL(2*time.Minute), WithMinimumRetryInterval(10*time.Second))
		defer c.Stop()

		warm(t, c, "api")
		base := f.Calls("api")
		expire(c, "api")
		f.Fail(errDown)

		// The first stale read starts one background refresh; it and every
		// read inside the interval get the stale data with no error.
		for i := 0; i < 100; i++ {
			got, err := c.GetService("api")
			require.NoError(t, err)
			require.Equal(t, []string{"a1"}, nodeIDs(got))
			synctest.Wait()
			time.Sleep(90 * time.Millisecond)
		}
		assert.Equal(t, base+1, f.Calls("api"), "one refresh attempt in 9 s with a 10 s interval")

		time.Sleep(time.Second) // the interval has passed
		synctest.Wait()         // and its timer has fired
		got, err := c.GetService("api")
		require.NoError(t, err)
		assert.Equal(t, []string{"a1"}, nodeIDs(got))
		synctest.Wait()
		assert.Equal(t, base+2, f.Calls("api"))
	})
}

// The seed README, scenario 2: the rolling-deployment storm. 1000 callers
// hit an expired entry while the refresh is slow; one registry call is
// made, every caller (the one that started it too) gets the stale data
// without waiting, and the refreshed data is served once the call answers.
func TestSeedScenario2RollingDeploymentStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("downstream", "old")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "downstream")
		base := f.Calls("downstream")
		expire(c, "downstream")
		f.SetNodes("downstream", "new")
		f.Hold()

		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		for i := 0; i < 1000; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				got, err := c.GetService("downstream")
				switch {
				case err != nil:
					errs <- err
				case fmt.Sprint(nodeIDs(got)) != "[old]":
					errs <- fmt.Errorf("got %v, want the stale [old]", nodeIDs(got))
				case time.Since(start) != 0:
					errs <- fmt.Errorf("a caller waited %v", time.Since(start))
				}
			}()
		}
		// Every caller returns while the registry call is still held.
		wg.Wait()
		close(errs)
		synctest.Wait() // the refresh, started in the background, reaches the registry

		for err := range errs {
			t.Error(err)
		}
		assert.Equal(t, base+1, f.Calls("downstream"), "exactly one refresh")

		f.Release()
		synctest.Wait()
		got, err := c.GetService("downstream")
		require.NoError(t, err)
		assert.Equal(t, []string{"new"}, nodeIDs(got))
		assert.Equal(t, base+1, f.Calls("downstream"))
	})
}

// The seed README, scenario 3: nothing cached and a failing registry.
func TestSeedScenario3NoCacheFailingRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.Fail(errDown)
		c, _ := newTestCache(t, f, WithMinimumRetryInterval(10*time.Second))
		defer c.Stop()

		_, err := c.GetService("new-service")
		require.Error(t, err)
		assert.ErrorIs(t, err, errDown)
		assert.Contains(t, err.Error(), `"new-service"`)
		require.Equal(t, 1, f.Calls("new-service"))

		time.Sleep(9 * time.Second)
		_, err = c.GetService("new-service")
		assert.ErrorIs(t, err, registry.ErrNotFound)
		assert.ErrorIs(t, err, ErrThrottled)
		assert.Contains(t, err.Error(), `"new-service"`)
		assert.Equal(t, 1, f.Calls("new-service"), "a throttled lookup makes no registry call")

		time.Sleep(time.Second)
		_, err = c.GetService("new-service")
		assert.ErrorIs(t, err, errDown)
		assert.Equal(t, 2, f.Calls("new-service"), "after the interval a new call is made")
	})
}

// coldStorm runs n concurrent GetService calls for name while the registry
// holds, releases it once all of them are waiting, and returns their errors.
func coldStorm(t *testing.T, c *cache, f *fakereg.Registry, names []string, n int) []error {
	t.Helper()
	f.Hold()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := names[i%len(names)]
			got, err := c.GetService(name)
			if err == nil && (len(got) != 1 || got[0].Name != name || len(got[0].Nodes) == 0) {
				err = fmt.Errorf("%s: wrong answer %v", name, nodeIDs(got))
			}
			errs[i] = err
		}()
	}
	synctest.Wait() // every caller is waiting on a refresh
	f.Release()
	wg.Wait()
	return errs
}

func TestSingleflightColdCallersShareOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n1")
		c, _ := newTestCache(t, f)
		defer c.Stop()
		for _, err := range coldStorm(t, c, f, []string{"svc"}, 100) {
			require.NoError(t, err)
		}
		assert.Equal(t, 1, f.Calls("svc"))
	})
}

func TestSingleflightColdCallersShareOneFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.Fail(errDown)
		c, _ := newTestCache(t, f)
		defer c.Stop()
		for _, err := range coldStorm(t, c, f, []string{"svc"}, 100) {
			require.ErrorIs(t, err, errDown)
		}
		assert.Equal(t, 1, f.Calls("svc"))
	})
}

func TestRule1EmptyNameIsAnErrorWithoutRegistryCall(t *testing.T) {
	f := newFakeRegistry()
	c, _ := newTestCache(t, f)
	defer c.Stop()
	_, err := c.GetService("")
	assert.ErrorIs(t, err, ErrEmptyName)
	_, err = c.Lookup("")
	assert.ErrorIs(t, err, ErrEmptyName)
	assert.Zero(t, f.TotalCalls())
	assert.Zero(t, c.entryCount())
}

func TestRule2FreshIsServedWithoutRegistryCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n1")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		base := f.Calls("svc")
		first, err := c.GetService("svc")
		require.NoError(t, err)
		time.Sleep(time.Until(c.snapshotOf("svc").Expires) - time.Nanosecond)
		second, err := c.GetService("svc")
		require.NoError(t, err)
		assert.Equal(t, base, f.Calls("svc"))
		assert.Equal(t, first, second)
		assert.NotSame(t, first[0], second[0], "GetService returns a copy")
	})
}

// Rule 3: a caller with stale data never waits for a refresh in flight; a
// caller with nothing joins it.
func TestRule3RefreshInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n1")
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(time.Second))
		defer c.Stop()
		warm(t, c, "svc")
		base := f.Calls("svc")
		expire(c, "svc")
		f.Hold()
		_, err := c.GetService("svc") // starts the background refresh
		require.NoError(t, err)
		time.Sleep(10 * time.Second) // past the interval, still in flight
		got, err := c.GetService("svc")
		require.NoError(t, err)
		assert.Equal(t, []string{"n1"}, nodeIDs(got))
		assert.Equal(t, base+1, f.Calls("svc"), "no second refresh while one is in flight")
		f.Release()
	})
}

func TestRule4ThrottleServesStaleOrRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n1")
		c, _ := newTestCache(t, f, WithTTL(time.Second), WithMinimumRetryInterval(time.Minute))
		defer c.Stop()
		_, err := c.GetService("svc")
		require.NoError(t, err)
		time.Sleep(2 * time.Second) // stale, inside the window
		got, err := c.GetService("svc")
		require.NoError(t, err)
		assert.Equal(t, []string{"n1"}, nodeIDs(got))
		assert.Equal(t, 1, f.Calls("svc"))

		_, err = c.GetService("missing")
		assert.Equal(t, registry.ErrNotFound, err)
		start := time.Now()
		_, err = c.GetService("missing")
		assert.Equal(t, registry.ErrNotFound, err, "within the window, the registry's answer as it gave it")
		assert.Zero(t, time.Since(start), "at once")
		assert.Equal(t, 1, f.Calls("missing"))

		f.Fail(errDown)
		_, err = c.GetService("failing")
		assert.ErrorIs(t, err, errDown)
		start = time.Now()
		_, err = c.GetService("failing")
		assert.ErrorIs(t, err, ErrThrottled, "within the window of a failure: throttled")
		assert.ErrorIs(t, err, registry.ErrNotFound)
		assert.Zero(t, time.Since(start), "a throttled error returns at once")
		assert.Equal(t, 1, f.Calls("failing"))
	})
}

// Rule 5: the background refresh of a stale entry belongs to the cache, and
// Stop waits for it. After Stop a stale read is served without a registry
// call, and only a cold caller runs a refresh, inline.
func TestRule5BackgroundRefreshIsOwnedAndStopWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n1")
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(time.Second))
		warm(t, c, "svc")
		base := f.Calls("svc")
		expire(c, "svc")
		f.Hold()
		_, err := c.GetService("svc")
		require.NoError(t, err)

		stopped := make(chan struct{})
		go func() { c.Stop(); close(stopped) }()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("Stop returned while a refresh of the cache was still running")
		default:
		}
		f.SetNodes("svc", "n2")
		f.Release()
		<-stopped

		// After Stop a caller holding data still never waits: the stale
		// data is served without a registry call. Only a caller with
		// nothing cached calls the registry, in its own goroutine.
		time.Sleep(2 * time.Minute)
		f.SetNodes("svc", "n3")
		f.SetNodes("cold", "c1")
		f.SetFault(fakereg.Fault{Latency: 2 * time.Second, IgnoreCtx: true})
		start := time.Now()
		staleBefore := c.Stats().StaleServes
		got, err := c.GetService("svc")
		require.NoError(t, err)
		assert.Equal(t, []string{"n2"}, nodeIDs(got), "after Stop a stale read is served as it is")
		assert.Zero(t, time.Since(start), "without waiting for the registry")
		assert.Equal(t, base+1, f.Calls("svc"))
		got, err = c.GetService("cold")
		require.NoError(t, err)
		assert.Equal(t, []string{"c1"}, nodeIDs(got))
		assert.Equal(t, 2*time.Second, time.Since(start), "a cold caller waits for its own call")
		assert.Zero(t, cacheGoroutines(), "and no goroutine is left behind")
		assert.Equal(t, staleBefore+1, c.Stats().StaleServes, "a stale serve after Stop counts as one")
	})
}

func TestRule6Outcomes(t *testing.T) {
	t.Run("success stores with expiry now+TTL", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFakeRegistry()
			f.SetNodes("svc", "n1")
			c, _ := newTestCache(t, f, WithTTL(time.Minute))
			defer c.Stop()
			_, err := c.GetService("svc")
			require.NoError(t, err)
			snap := c.snapshotOf("svc")
			require.NotNil(t, snap)
			assert.Equal(t, time.Now().Add(time.Minute), snap.Expires)
		})
	})
	for _, tc := range []struct {
		name   string
		answer func(f *fakereg.Registry)
	}{
		{"ErrNotFound", func(f *fakereg.Registry) { f.SetNodes("svc") }},
		{"empty result heard", func(f *fakereg.Registry) {
			f.Set("svc")
		}},
	} {
		t.Run(tc.name+" drops the data and answers not found within the window", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeRegistry()
				f.SetNodes("svc", "n1")
				c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(5*time.Second))
				defer c.Stop()
				warm(t, c, "svc")
				base := f.Calls("svc")
				tc.answer(f)
				if tc.name == "empty result heard" {
					// An empty answer with no error is believed once two
					// in a row came after the registry was heard from
					// (see unheard_test.go).
					expire(c, "svc")
					_, err := c.GetService("svc")
					require.NoError(t, err)
					synctest.Wait()
					require.NotNil(t, c.snapshotOf("svc"), "the first empty answer is doubted")
					f.Stream().Send("create", svc("other", "1", "o1"))
					synctest.Wait()
					time.Sleep(5 * time.Second)
					_, err = c.GetService("svc")
					require.NoError(t, err)
					synctest.Wait()
					require.NotNil(t, c.snapshotOf("svc"), "and the second, the first after the registry was heard from")
					f.Stream().Send("create", svc("other", "1", "o2"))
					synctest.Wait()
					time.Sleep(5 * time.Second)
					base = f.Calls("svc")
				}
				expire(c, "svc")
				_, err := c.GetService("svc") // stale: served, refresh in background
				require.NoError(t, err)
				synctest.Wait()
				assert.Nil(t, c.snapshotOf("svc"), "the data was dropped")
				_, err = c.GetService("svc")
				assert.Equal(t, registry.ErrNotFound, err, "the registry's answer, as it gave it")
				assert.Equal(t, base+1, f.Calls("svc"), "the attempt time is kept: no call within the window")
				time.Sleep(5 * time.Second)
				_, err = c.GetService("svc")
				assert.Equal(t, registry.ErrNotFound, err, "a cold caller gets ErrNotFound itself")
				assert.Equal(t, base+2, f.Calls("svc"))
			})
		})
	}
	// Consul answers versions without nodes when every node is critical:
	// the answer is kept and served as it came, as go-micro's cache does,
	// fresh, and not doubted as an empty answer is.
	t.Run("versions without nodes are served as they came", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFakeRegistry()
			f.SetNodes("svc", "n1")
			c, _ := newTestCache(t, f, WithTTL(time.Minute))
			defer c.Stop()
			warm(t, c, "svc")
			f.Set("svc", &registry.Service{Name: "svc", Version: "1"}, &registry.Service{Name: "svc", Version: "2"})
			expire(c, "svc")
			_, err := c.GetService("svc") // stale: starts the refresh
			require.NoError(t, err)
			synctest.Wait()
			got, err := c.GetService("svc")
			require.NoError(t, err)
			require.Len(t, got, 2)
			assert.Empty(t, got[0].Nodes)
			assert.Equal(t, "2", got[1].Version)
			assert.True(t, time.Now().Before(c.snapshotOf("svc").Expires), "an answer: fresh")

			_, err = c.GetService("never-had-nodes")
			assert.Equal(t, registry.ErrNotFound, err)
			f.Set("cold", &registry.Service{Name: "cold", Version: "1"})
			got, err = c.GetService("cold")
			require.NoError(t, err, "a cold lookup gets the versions too")
			require.Len(t, got, 1)
			assert.Empty(t, got[0].Nodes)
		})
	})
	t.Run("error with stale data serves it and never renews the expiry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFakeRegistry()
			f.SetNodes("svc", "n1")
			c, l := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(5*time.Second))
			defer c.Stop()
			warm(t, c, "svc")
			base := f.Calls("svc")
			expire(c, "svc")
			f.Fail(errDown)
			for i := 0; i < 10; i++ {
				got, err := c.GetService("svc")
				require.NoError(t, err)
				require.Equal(t, []string{"n1"}, nodeIDs(got))
				synctest.Wait()
				time.Sleep(5 * time.Second)
			}
			assert.Equal(t, base+10, f.Calls("svc"), "still stale: every read after the interval retries")
			assert.False(t, time.Now().Before(c.snapshotOf("svc").Expires))
			assert.Len(t, l.all(), 1, "the failure is logged once: %v", l.all())

			f.Fail(nil)
			_, err := c.GetService("svc")
			require.NoError(t, err)
			synctest.Wait()
			assert.True(t, time.Now().Before(c.snapshotOf("svc").Expires), "a success renews it")
			assert.Len(t, l.all(), 2, "the recovery is logged once: %v", l.all())
		})
	})
	t.Run("error with nothing cached names the service", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFakeRegistry()
			f.Fail(errDown)
			c, _ := newTestCache(t, f)
			defer c.Stop()
			_, err := c.GetService("svc")
			assert.ErrorIs(t, err, errDown)
			assert.Contains(t, err.Error(), `"svc"`)
		})
	})
	t.Run("a panicking registry never panics a caller", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFakeRegistry()
			f.SetNodes("svc", "n1")
			c, l := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(time.Second))
			defer c.Stop()
			_, err := c.GetService("svc")
			require.NoError(t, err)
			f.PanicWith("boom")
			_, err = c.GetService("cold")
			require.Error(t, err)
			assert.Contains(t, err.Error(), "boom")
			time.Sleep(2 * time.Minute)
			got, err := c.GetService("svc") // the background refresh panics
			require.NoError(t, err)
			assert.Equal(t, []string{"n1"}, nodeIDs(got))
			synctest.Wait()
			assert.NotEmpty(t, l.all(), "the panic is logged")
		})
	})
}

func TestRule7ZeroIntervalTurnsTheThrottleOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.Fail(errDown)
		c, _ := newTestCache(t, f, WithMinimumRetryInterval(0))
		defer c.Stop()
		for i := 0; i < 5; i++ {
			_, err := c.GetService("svc")
			assert.ErrorIs(t, err, errDown)
		}
		assert.Equal(t, 5, f.Calls("svc"))
		// No throttle window, but the failure's record is kept a while,
		// so that a lasting failure is logged once.
		assert.Equal(t, 1, c.entryCount())
		time.Sleep(time.Minute)      // the failure's memory
		_, _ = c.GetService("other") // a slow lookup sweeps
		synctest.Wait()
		_, ok := c.entries.Load("svc")
		assert.False(t, ok, "and dropped after it")
	})
}

// Rule 8: a cold caller never sees a spurious ErrNotFound for a service that
// exists, however the callers interleave with the refresh.
func TestRule8NoSpuriousNotFoundUnderColdStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		names := make([]string, 100)
		for i := range names {
			names[i] = fmt.Sprintf("svc-%d", i)
			f.SetNodes(names[i], "n")
		}
		f.SetFault(fakereg.Fault{Latency: 50 * time.Millisecond, IgnoreCtx: true})
		c, _ := newTestCache(t, f)
		defer c.Stop()
		for _, err := range coldStorm(t, c, f, names, 3000) {
			require.NoError(t, err)
		}
		for _, n := range names {
			assert.Equal(t, 1, f.Calls(n), n)
		}
	})
}

// Rule 9: lookups of ever-new names do not grow memory without bound.
func TestEverNewNamesDoNotGrowMemory(t *testing.T) {
	t.Parallel() // long in fake time: run beside the others
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		c, _ := newTestCache(t, f, WithMinimumRetryInterval(5*time.Second))
		defer c.Stop()
		peak := 0
		for i := 0; i < 20000; i++ {
			_, err := c.GetService(fmt.Sprintf("typo-%d", i))
			require.ErrorIs(t, err, registry.ErrNotFound)
			if i%10 == 0 {
				peak = max(peak, c.entryCount())
			}
			time.Sleep(10 * time.Millisecond) // 100 new names a second
		}
		// Only the names of the last 5 s window are kept.
		assert.LessOrEqual(t, peak, 501)
		c.mu.Lock()
		queued := c.core.Sweeping()
		c.mu.Unlock()
		assert.LessOrEqual(t, queued, 501)
	})
}

func TestFailureOfOneServiceDoesNotChangeAnother(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("good", "g1")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		_, err := c.GetService("bad")
		require.ErrorIs(t, err, registry.ErrNotFound)
		warm(t, c, "good")
		base := f.Calls("good")
		f.PanicWith("bad is broken") // every call fails from now on...
		_, err = c.GetService("bad")
		require.Error(t, err)
		f.PanicWith(nil) // ...but good's state does not remember it
		expire(c, "good")
		_, err = c.GetService("good")
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, base+1, f.Calls("good"))
		assert.True(t, time.Now().Before(c.snapshotOf("good").Expires))
	})
}

func TestStopIsIdempotentConcurrentAndLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n1")
		c, _ := newTestCache(t, f)
		_, err := c.GetService("svc")
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, 1, f.OpenStreams())

		var wg sync.WaitGroup
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); c.Stop() }()
		}
		wg.Wait()
		c.Stop()
		assert.Zero(t, f.OpenStreams(), "no registry watcher is left open")
		assert.Equal(t, 1, f.Stream().Stops(), "the stream is stopped once")

		got, err := c.GetService("svc")
		require.NoError(t, err, "reads after Stop still work")
		assert.Equal(t, []string{"n1"}, nodeIDs(got))
		f.SetNodes("other", "o1")
		got, err = c.GetService("other")
		require.NoError(t, err)
		assert.Equal(t, []string{"o1"}, nodeIDs(got))
		synctest.Wait()
		assert.Equal(t, 1, len(f.WatchTimes()), "no watcher starts after Stop")
		// synctest.Test returning proves every goroutine of the cache exited.
	})
}

// Without synctest: Stop leaves no goroutine of the cache behind.
func TestStopLeavesNoGoroutine(t *testing.T) {
	f := newFakeRegistry()
	f.SetNodes("svc", "n1")
	c := New(f, WithLogger(&testLogger{}))
	require.Zero(t, cacheGoroutines(), "New starts no goroutine")
	require.Zero(t, f.TotalCalls(), "New makes no registry call")
	_, err := c.GetService("svc")
	require.NoError(t, err)
	c.Stop()
	left := goroutinesLeft(cacheCode, 0, exitGrace)
	assert.Empty(t, left, "goroutines running cache code after Stop:\n\n%s", strings.Join(left, "\n\n"))
}

func TestIsolationOfReturnedData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		s := svc("svc", "1", "n1", "n2")
		s.Endpoints = []*registry.Endpoint{{Name: "Svc.Call"}}
		f.Set("svc", s)
		c, _ := newTestCache(t, f)
		defer c.Stop()

		got, err := c.GetService("svc")
		require.NoError(t, err)
		got[0].Name = "changed"
		got[0].Nodes[0].Address = "evil:1"
		got[0].Nodes = append(got[0].Nodes, &registry.Node{Id: "n3"})
		got[0].Nodes[1] = &registry.Node{Id: "swapped"}
		got[0].Endpoints[0].Name = "changed"
		got[0].Endpoints = append(got[0].Endpoints, &registry.Endpoint{Name: "x"})
		got = append(got, svc("svc", "2", "x"))
		_ = got

		again, err := c.GetService("svc")
		require.NoError(t, err)
		require.Len(t, again, 1)
		assert.Equal(t, "svc", again[0].Name)
		assert.Equal(t, []string{"n1", "n2"}, nodeIDs(again))
		assert.Equal(t, "n1:8080", again[0].Nodes[0].Address)
		require.Len(t, again[0].Endpoints, 1)
		assert.Equal(t, "Svc.Call", again[0].Endpoints[0].Name)

		// The registry's own objects are not aliased either.
		f.Edit("svc", func(svcs []*registry.Service) { svcs[0].Nodes[0].Metadata["id"] = "mutated" })
		again, _ = c.GetService("svc")
		assert.Equal(t, "n1", again[0].Nodes[0].Metadata["id"])
	})
}

// Stale data served inside the retry window costs a GetService what fresh
// data does: the copy's allocations, one per kind of struct up to four of
// it and two past that, whatever the number of nodes.
func TestStaleGetServiceAllocationsDoNotGrowWithNodes(t *testing.T) {
	for _, nodes := range []int{1, 10, 100, 1000} {
		synctest.Test(t, func(t *testing.T) {
			f := newFakeRegistry()
			ids := make([]string, nodes)
			for i := range ids {
				ids[i] = fmt.Sprint("n", i)
			}
			f.SetNodes("svc", ids...)
			c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(time.Hour))
			defer c.Stop()
			warm(t, c, "svc")
			expire(c, "svc")
			f.Fail(errDown)
			_, err := c.GetService("svc")
			require.NoError(t, err)
			synctest.Wait()
			calls, served := f.Calls("svc"), c.Stats().StaleServes

			const runs = 20
			allocs := testing.AllocsPerRun(runs, func() {
				if got, err := c.GetService("svc"); err != nil || len(got[0].Nodes) != nodes {
					t.Fatal(got, err)
				}
			})
			want := 3.0 // the services, and the nodes in two
			if nodes <= 4 {
				want = 2
			}
			assert.Equal(t, want, allocs, "stale, %d nodes", nodes)
			assert.Equal(t, served+runs+1, c.Stats().StaleServes, "stale data served") // AllocsPerRun warms up once
			assert.Equal(t, calls, f.Calls("svc"), "no registry call")
		})
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	f := newFakeRegistry()
	for _, tc := range []struct {
		name string
		fn   func()
		want string
	}{
		{"nil registry", func() { New(nil) }, "registry must not be nil"},
		{"zero TTL", func() { New(f, WithTTL(0)) }, "WithTTL"},
		{"negative TTL", func() { New(f, WithTTL(-time.Second)) }, "WithTTL"},
		{"negative interval", func() { New(f, WithMinimumRetryInterval(-1)) }, "WithMinimumRetryInterval"},
		{"nil logger", func() { New(f, WithLogger(nil)) }, "WithLogger"},
		{"nil option", func() { New(f, nil) }, "nil Option"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				require.NotNil(t, r, "New must panic")
				assert.True(t, strings.Contains(fmt.Sprint(r), tc.want), "panic %q should name %q", r, tc.want)
			}()
			tc.fn()
		})
	}
	c := New(f, WithMinimumRetryInterval(0))
	c.Stop()
}

// Outage bound: every service cached, the registry failing for a long time.
// No lookup fails, calls per service stay within 1 + outage/interval, and no
// caller holding stale data waits on the registry.
func TestOutageBound(t *testing.T) {
	t.Parallel() // long in fake time: run beside the others
	for _, mode := range []string{"failing", "hanging"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const services = 50
				const interval = 5 * time.Second
				const outage = 30 * time.Minute
				f := newFakeRegistry()
				for i := 0; i < services; i++ {
					f.SetNodes(fmt.Sprint("svc-", i), "n")
				}
				c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(interval))
				defer c.Stop()
				for i := 0; i < services; i++ {
					_, err := c.GetService(fmt.Sprint("svc-", i))
					require.NoError(t, err)
				}
				synctest.Wait()
				base := f.TotalCalls()

				if mode == "failing" {
					f.Fail(errDown)
				} else {
					f.Hold()
				}
				f.SetWatchFault(fakereg.WatchFault{WatchErr: errDown})
				f.Stream().Break(errDown)

				var lookups int
				for end := time.Now().Add(outage); time.Now().Before(end); time.Sleep(700 * time.Millisecond) {
					for i := 0; i < services; i++ {
						start := time.Now()
						got, err := c.GetService(fmt.Sprint("svc-", i))
						require.NoError(t, err)
						require.Len(t, got, 1)
						require.Zero(t, time.Since(start), "a caller with stale data waited")
						lookups++
					}
				}
				bound := 1 + int(outage/interval)
				for i := 0; i < services; i++ {
					calls := f.Calls(fmt.Sprint("svc-", i)) - 1
					assert.LessOrEqual(t, calls, bound)
				}
				t.Logf("%d lookups, %d registry calls in the outage (bound %d per service)", lookups, f.TotalCalls()-base, bound)
				f.Release()
			})
		})
	}
}

// warm fills names, and checks that their data is the stream's: a cold
// lookup waits for the stream that it starts, so that what it fetches needs
// no re-validation, and the call counts a test checks afterwards come only
// from what the test does.
func warm(t *testing.T, c *cache, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := c.GetService(n)
		require.NoError(t, err, n)
	}
	synctest.Wait()
	for _, n := range names {
		require.Equal(t, c.epoch(), c.entryOf(n).Epoch(), "%s was re-validated", n)
	}
}

// expire sleeps until name's data turns stale, and lets the timer that
// tells the hot path so run (at the same fake instant).
func expire(c *cache, name string) {
	time.Sleep(time.Until(c.snapshotOf(name).Expires))
	synctest.Wait()
}

func (c *cache) entryOf(name string) *core.Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, _ := c.entries.Load(name)
	e, _ := v.(*core.Entry)
	return e
}

// snapshotOf reads an entry's current snapshot.
func (c *cache) snapshotOf(name string) *svcdata.Snapshot {
	v, ok := c.entries.Load(name)
	if !ok {
		return nil
	}
	return v.(*core.Entry).Data.Load()
}

var _ = errors.Is

// The lock-free path trusts the entry's mode instead of the clock: the
// timer must end it at the refresh point of the data stored last, not of
// data it replaced.
func TestModeFollowsTheLatestData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n")
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(time.Second))
		defer c.Stop()
		warm(t, c, "svc")
		e := c.entryOf("svc")
		require.Equal(t, core.ModeFresh, e.Mode.Load())
		old := c.snapshotOf("svc")

		// 30 s on, an event the cache cannot apply makes the data stale,
		// and the next lookup refreshes it: new data, a new refresh point.
		time.Sleep(30 * time.Second)
		c.apply(&registry.Result{Action: "update", Service: &registry.Service{Name: "svc"}}, nil)
		_, err := c.Lookup("svc")
		require.NoError(t, err)
		synctest.Wait()
		require.NotSame(t, old, c.snapshotOf("svc"))
		require.Equal(t, core.ModeFresh, e.Mode.Load())

		time.Sleep(time.Until(old.RefreshAt))
		synctest.Wait()
		assert.Equal(t, core.ModeFresh, e.Mode.Load(), "the replaced data's refresh point does not count")
		time.Sleep(30 * time.Second)
		synctest.Wait()
		assert.Equal(t, core.ModeSlow, e.Mode.Load(), "the latest data's does")

		c.Stop()
		f.SetNodes("other", "o")
		_, err = c.Lookup("other") // fetched in the caller, after Stop
		require.NoError(t, err)
		require.True(t, time.Now().Before(c.snapshotOf("other").Expires))
		assert.Equal(t, core.ModeSlow, c.entryOf("other").Mode.Load(), "after Stop no timer runs, so every read checks the clock")
	})
}
