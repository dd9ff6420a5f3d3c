package cache_test

// More of the tries at a window's end and the wait for the probe out,
// through the public API, in fake time: hung probes, contexts, Stop,
// counting, not-found answers, many services, and the bound on calls.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// A GetService whose context ends while it waits for the probe out is
// counted once, as refused: Stats.Lookups counts each lookup in exactly
// one of its outcomes.
func TestALookupThatGivesUpWaitingForTheProbeIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		time.Sleep(cache.DefaultMinimumRetryInterval)
		reg.SetFault(fakereg.Fault{Err: errOutage, Latency: 500 * time.Millisecond})
		go func() { _, _ = c.Lookup("a") }() // a's try, the probe, out 500 ms
		synctest.Wait()
		require.Equal(t, 1, reg.InFlight("a"))
		before := c.Stats()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.GetService("b", registry.GetContext(ctx))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 10*time.Millisecond, time.Since(start), "the context bounds the wait")
		after := c.Stats()
		assert.Equal(t, before.Lookups+1, after.Lookups,
			"the lookup is counted once (Throttled %d->%d, Misses %d->%d)",
			before.Throttled, after.Throttled, before.Misses, after.Misses)
		synctest.Wait()
		time.Sleep(time.Second)
	})
}

// A service the registry answered not-found has that answer to give
// within its window, registry.ErrNotFound itself, without a call: while
// the registry is down and a probe is out, it gives it at once, and waits
// for no probe.
func TestANotFoundWithinItsWindowWaitsForNoProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := fakereg.New()
		for _, n := range []string{"a", "b"} {
			require.NoError(t, reg.Register(faultService(n, n+"1")))
		}
		c := cache.New(reg, cache.WithLogger(&lineLogger{}))
		defer c.Stop()
		_, err := c.Lookup("nf")
		require.Equal(t, registry.ErrNotFound, err)
		reg.SetFault(fakereg.Fault{Err: errOutage})
		reg.SetWatchFault(fakereg.WatchFault{WatchErr: errOutage, BreakErr: errOutage})
		for _, n := range []string{"a", "b"} {
			_, err := c.Lookup(n)
			require.ErrorIs(t, err, errOutage)
		}
		require.True(t, c.Stats().RegistryDown)
		// Immediately, before any probe: the not-found answer at once.
		start := time.Now()
		_, err = c.Lookup("nf")
		require.Equal(t, registry.ErrNotFound, err)
		require.Equal(t, time.Duration(0), time.Since(start))

		reg.SetFault(fakereg.Fault{Err: errOutage, Latency: 800 * time.Millisecond})
		go func() { _, _ = c.Lookup("c") }() // c, new: the probe, out 800 ms
		synctest.Wait()
		require.Equal(t, 1, reg.InFlight("c"))
		start = time.Now()
		_, err = c.Lookup("nf")
		assert.Equal(t, registry.ErrNotFound, err)
		assert.Equal(t, time.Duration(0), time.Since(start), "a not-found answer within its window waits for nothing")
		synctest.Wait()
		time.Sleep(time.Second)
	})
}

// A probe that hangs for good (ignoring its context),
// with many cold callers of many services at random times, nil contexts:
// every lookup returns within about a second, and the calls stay bounded.
func TestProbeWaitHungProbeManyColdCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		reg.SetBound(cache.DefaultMinimumRetryInterval)
		time.Sleep(cache.DefaultMinimumRetryInterval)
		reg.SetFault(fakereg.Fault{Hang: true, IgnoreCtx: true})
		t0 := time.Now()
		var mu sync.Mutex
		var worst time.Duration
		var errs []error
		ownHung := 0
		var wg sync.WaitGroup
		rng := rand.New(rand.NewSource(1))
		for i := range 60 {
			name := fmt.Sprintf("s%d", i%12)
			if i%5 == 0 {
				name = "a"
			}
			at := time.Duration(rng.Int63n(int64(20 * time.Second)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(at)
				start := time.Now()
				_, err := c.Lookup(name)
				d := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				// A lookup refused (throttled) never waited for a call of
				// its own service: its wait is the probe's, a second at
				// most. One that joined its own service's hung call is
				// released with ErrHung ("unless waiting for its own call").
				switch {
				case errors.Is(err, cache.ErrThrottled):
					worst = max(worst, d)
				case errors.Is(err, fakereg.ErrHung):
					ownHung++
				default:
					errs = append(errs, err)
				}
			}()
		}
		time.Sleep(21 * time.Second)
		elapsed := time.Since(t0)
		calls := reg.TotalCalls()
		reg.ReleaseHangs()
		wg.Wait()
		assert.LessOrEqual(t, worst, time.Second, "no refused lookup blocks over a second")
		assert.Empty(t, errs)
		// one probe per ~2 s (a hung probe's deadline + interval), plus one
		// try per cold service per window at most.
		assert.LessOrEqual(t, calls, 2+int(elapsed/time.Second)+13*(1+int(elapsed/cache.DefaultMinimumRetryInterval)))
		t.Logf("hung probes: %d GetService calls in %v, worst refused lookup %v, %d lookups joined their own hung call", calls, elapsed, worst, ownHung)
		reg.CheckBound(t, elapsed)
	})
}

// Stop while callers wait for a probe that hangs and
// ignores its context: Stop returns, and the waiting callers return
// within the probe's deadline; lookups after Stop do not hang.
func TestProbeWaitStopWhileCallersWaitOnHungProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		time.Sleep(cache.DefaultMinimumRetryInterval)
		reg.SetFault(fakereg.Fault{Hang: true, IgnoreCtx: true})
		go func() { _, _ = c.Lookup("a") }()
		synctest.Wait()
		require.Equal(t, 1, reg.InFlight("a"))
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var worst time.Duration
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Lookup(fmt.Sprintf("w%d", i%3))
				mu.Lock()
				worst = max(worst, time.Since(start))
				mu.Unlock()
				assert.Error(t, err)
			}()
		}
		time.Sleep(100 * time.Millisecond)
		stopped := make(chan struct{})
		go func() { c.Stop(); close(stopped) }()
		wg.Wait()
		assert.LessOrEqual(t, worst, time.Second)
		// A lookup after Stop, of a service other than the hung one.
		_, err := c.Lookup("b")
		t.Logf("after Stop: %v", err)
		reg.ReleaseHangs()
		<-stopped
	})
}

// A caller with a short context, the probe hanging:
// it returns at its deadline, with its context's error.
func TestProbeWaitShortContextWhileProbeHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		time.Sleep(cache.DefaultMinimumRetryInterval)
		reg.SetFault(fakereg.Fault{Hang: true, IgnoreCtx: true})
		go func() { _, _ = c.Lookup("a") }()
		synctest.Wait()
		for _, d := range []time.Duration{0, time.Millisecond, 300 * time.Millisecond} {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			start := time.Now()
			_, err := c.GetService("b", registry.GetContext(ctx))
			cancel()
			assert.LessOrEqual(t, time.Since(start), d)
			assert.ErrorIs(t, err, context.DeadlineExceeded, "deadline %v", d)
		}
		reg.ReleaseHangs()
	})
}

// Many cold services (300), looked up at random times
// through a 60 s outage: GetService calls stay O(60 + services·12), no
// service sees more than one try a window, and every lookup returns within
// about a second.
func TestProbeWaitManyColdServicesThroughOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		reg.SetBound(cache.DefaultMinimumRetryInterval)
		reg.SetFault(fakereg.Fault{Err: errOutage, Latency: 3 * time.Millisecond})
		const n = 300
		const outage = 60 * time.Second
		t0 := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var worst time.Duration
		lookups := 0
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(i)))
				name := fmt.Sprintf("svc%03d", i)
				for time.Since(t0) < outage {
					time.Sleep(time.Duration(rng.Int63n(int64(700 * time.Millisecond))))
					start := time.Now()
					_, err := c.Lookup(name)
					d := time.Since(start)
					mu.Lock()
					worst = max(worst, d)
					lookups++
					mu.Unlock()
					if !errors.Is(err, cache.ErrThrottled) && !errors.Is(err, errOutage) {
						t.Errorf("%s: %v", name, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(t0)
		calls := reg.TotalCalls()
		t.Logf("%d lookups, %d GetService calls in %v, worst lookup %v", lookups, calls, elapsed, worst)
		assert.LessOrEqual(t, calls, 2+int(elapsed/time.Second)+n*(2+int(elapsed/cache.DefaultMinimumRetryInterval)))
		assert.LessOrEqual(t, worst, time.Second+10*time.Millisecond)
		reg.CheckBound(t, elapsed)
		for i := range n {
			name := fmt.Sprintf("svc%03d", i)
			assert.LessOrEqual(t, reg.Calls(name), 2+int(elapsed/cache.DefaultMinimumRetryInterval), name)
		}
	})
}

// A try at a window's end while the registry is down keeps the window,
// which runs from the end of the last call: with the re-validation after
// the registry's return, the service never sees more calls than the bound
// allows (fakereg's SetBound).
func TestATryAtAWindowsEndKeepsTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		t0 := time.Now()
		reg.SetBound(cache.DefaultMinimumRetryInterval)
		reg.SetFault(fakereg.Fault{Err: errOutage, Latency: 500 * time.Millisecond})
		time.Sleep(cache.DefaultMinimumRetryInterval)
		_, err := c.Lookup("a") // 5.0 - 5.5, the probe
		require.ErrorIs(t, err, errOutage)
		time.Sleep(cache.DefaultMinimumRetryInterval - 500*time.Millisecond)
		_, err = c.Lookup("a") // 10.0: its window ends at 10.5
		require.ErrorIs(t, err, cache.ErrThrottled)
		time.Sleep(500 * time.Millisecond)
		_, err = c.Lookup("a") // 10.5 - 11.0: its try, at the window's end
		require.ErrorIs(t, err, errOutage)
		// The registry is back; the stream finds it.
		reg.ClearFaults()
		time.Sleep(1500 * time.Millisecond)
		require.False(t, c.Stats().RegistryDown, "back")
		got, err := c.Lookup("a")
		require.NoError(t, err)
		assert.Equal(t, []string{"a1"}, nodeSetOf(got))
		assert.Equal(t, 4, reg.Calls("a"))
		reg.CheckBound(t, time.Since(t0))
	})
}

// data too stale under MaximumStale is cold-like: the
// lookup waits for the probe out (a second at most), then fails with a
// too-stale error that still matches ErrThrottled and registry.ErrNotFound.
func TestProbeWaitMaxStaleWaitsAndKeepsErrorIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := fakereg.New()
		for _, n := range []string{"a", "b", "s"} {
			require.NoError(t, reg.Register(faultService(n, n+"1")))
		}
		c := cache.New(reg, cache.WithLogger(&lineLogger{}), cache.WithTTL(time.Second), cache.WithMaximumStale(2*time.Second))
		defer c.Stop()
		_, err := c.Lookup("s")
		require.NoError(t, err)
		reg.SetFault(fakereg.Fault{Err: errOutage})
		reg.SetWatchFault(fakereg.WatchFault{WatchErr: errOutage, BreakErr: errOutage})
		for _, n := range []string{"a", "b"} {
			_, err := c.Lookup(n)
			require.ErrorIs(t, err, errOutage)
		}
		require.True(t, c.Stats().RegistryDown)
		time.Sleep(10 * time.Second) // s is far too stale; every window has ended
		reg.SetFault(fakereg.Fault{Hang: true, IgnoreCtx: true})
		go func() { _, _ = c.Lookup("a") }()
		synctest.Wait()
		if reg.InFlight("a") != 1 {
			t.Skipf("a is not the probe (in flight %d)", reg.InFlight("a"))
		}
		before := c.Stats()
		start := time.Now()
		_, err = c.Lookup("s")
		d := time.Since(start)
		assert.LessOrEqual(t, d, time.Second)
		assert.ErrorIs(t, err, cache.ErrThrottled)
		assert.ErrorIs(t, err, registry.ErrNotFound)
		after := c.Stats()
		assert.Equal(t, before.Lookups+1, after.Lookups)
		t.Logf("too stale, probe hung: waited %v, %v", d, err)
		reg.ReleaseHangs()
	})
}

// MinimumRetryInterval 0 (throttle off) and
// ProbeInterval 0 (health off) while every call fails: no tight loop of
// registry calls, no lookup waits.
func TestProbeWaitZeroIntervalsNoTightLoop(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []cache.Option
	}{
		{"retry0", []cache.Option{cache.WithMinimumRetryInterval(0)}},
		{"probe0", []cache.Option{cache.WithProbeInterval(0)}},
		{"retry0probe0", []cache.Option{cache.WithMinimumRetryInterval(0), cache.WithProbeInterval(0)}},
		{"adaptive", []cache.Option{cache.WithMaximumRetryInterval(time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := fakereg.New()
				reg.SetFault(fakereg.Fault{Err: errOutage, Latency: 2 * time.Millisecond})
				reg.SetWatchFault(fakereg.WatchFault{WatchErr: errOutage, BreakErr: errOutage})
				c := cache.New(reg, append([]cache.Option{cache.WithLogger(&lineLogger{})}, tc.opts...)...)
				defer c.Stop()
				t0 := time.Now()
				var worst time.Duration
				lookups := 0
				for time.Since(t0) < 10*time.Second {
					for i := range 5 {
						start := time.Now()
						_, _ = c.Lookup(fmt.Sprintf("z%d", i))
						worst = max(worst, time.Since(start))
						lookups++
					}
					time.Sleep(10 * time.Millisecond)
				}
				calls := reg.TotalCalls()
				t.Logf("%s: %d lookups, %d calls in 10 s, down=%v, worst lookup %v", tc.name, lookups, calls, c.Stats().RegistryDown, worst)
				if tc.name == "retry0" {
					// throttle off, health on: about one probe a second,
					// plus start-to-start tries.
					assert.LessOrEqual(t, calls, 40)
				}
				if tc.name == "adaptive" {
					assert.LessOrEqual(t, calls, 40)
				}
			})
		})
	}
}

// a lookup that waited for a probe and then made its
// own call is counted once, as a miss; the waiting lookup of the throttled
// case is counted once, as throttled; the throttled error matches
// registry.ErrNotFound.
func TestProbeWaitProbeWaitStatsCountedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		time.Sleep(cache.DefaultMinimumRetryInterval)
		reg.SetFault(fakereg.Fault{Err: errOutage, Latency: 20 * time.Millisecond})
		go func() { _, _ = c.Lookup("a") }()
		synctest.Wait()
		before := c.Stats()
		_, err := c.Lookup("b")
		require.ErrorIs(t, err, cache.ErrThrottled)
		require.ErrorIs(t, err, registry.ErrNotFound)
		after := c.Stats()
		assert.Equal(t, before.Lookups+1, after.Lookups)
		assert.Equal(t, before.Throttled+1, after.Throttled)

		time.Sleep(cache.DefaultMinimumRetryInterval)
		reg.SetFault(fakereg.Fault{Latency: 20 * time.Millisecond})
		go func() { _, _ = c.Lookup("a") }()
		synctest.Wait()
		before = c.Stats()
		_, err = c.Lookup("b")
		require.NoError(t, err)
		after = c.Stats()
		assert.Equal(t, before.Lookups+1, after.Lookups)
		assert.Equal(t, before.Misses+1, after.Misses)
	})
}

// the registry is back but for a's key, which keeps
// failing; a's callers keep a's window-end tries coming, and the stream
// stays broken, so only a probe of another service can see the return. b's
// callers, waiting on a's failing probes, are served within a probe
// interval or two of the return; a never holds b down.
func TestProbeWaitProbeKeyFailsAloneWhileRegistryBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		t0 := time.Now()
		time.Sleep(3 * time.Second)
		reg.SetFault(fakereg.Fault{})                                                        // back...
		reg.SetFaultFor("a", fakereg.Fault{Err: errOutage, Latency: 300 * time.Millisecond}) // ...but for a
		back := time.Now()
		var servedB time.Time
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for _, n := range []string{"a", "a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := c.Lookup(n)
					if n == "b" && err == nil && servedB.IsZero() {
						servedB = time.Now()
					}
					time.Sleep(50 * time.Millisecond)
				}
			}()
		}
		time.Sleep(10 * time.Second)
		close(stop)
		wg.Wait()
		require.False(t, servedB.IsZero(), "b is never served")
		t.Logf("b served %v after the return; a: %d calls, b: %d calls in %v", servedB.Sub(back), reg.Calls("a"), reg.Calls("b"), time.Since(t0))
		// No probe can go before the windows of a and b end (t0+5 s), as
		// before the mechanism; a's failing try at that end stands in for
		// b's (a different key: no evidence about b), so b waits for the
		// next regular probe: windows' end + a's 300 ms + 1 s.
		assert.LessOrEqual(t, servedB.Sub(t0), cache.DefaultMinimumRetryInterval+1300*time.Millisecond+50*time.Millisecond)
	})
}

// a probe overtaken by a later one after its deadline:
// a lookup waits for the newest probe only, never past its deadline, and
// an answer of the overtaken probe, coming late, brings the registry back.
func TestProbeWaitProbeOvertaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		time.Sleep(cache.DefaultMinimumRetryInterval)
		reg.SetFaultFor("a", fakereg.Fault{Hang: true, IgnoreCtx: true})
		go func() { _, _ = c.Lookup("a") }() // P1, hangs
		synctest.Wait()
		require.Equal(t, 1, reg.InFlight("a"))
		time.Sleep(1500 * time.Millisecond) // past P1's deadline
		start := time.Now()
		_, err := c.Lookup("b") // Until is in the past: no wait
		require.ErrorIs(t, err, cache.ErrThrottled)
		assert.Equal(t, time.Duration(0), time.Since(start))
		time.Sleep(600 * time.Millisecond) // the next probe is due
		reg.SetFaultFor("c", fakereg.Fault{Err: errOutage, Latency: 700 * time.Millisecond})
		go func() { _, _ = c.Lookup("c") }() // P2, c new, fails in 700 ms
		synctest.Wait()
		require.Equal(t, 1, reg.InFlight("c"), "c is the probe")
		start = time.Now()
		_, err = c.Lookup("b")
		require.ErrorIs(t, err, cache.ErrThrottled)
		assert.Equal(t, 700*time.Millisecond, time.Since(start), "waits for P2, the newest")
		// P1 answers late: found.
		reg.SetFaultFor("a", fakereg.Fault{})
		reg.SetFault(fakereg.Fault{})
		reg.ReleaseHangs() // ErrHung: a failure, not an answer
		synctest.Wait()
		t.Logf("after P1 released: down=%v", c.Stats().RegistryDown)
	})
}
