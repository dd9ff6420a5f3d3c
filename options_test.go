package cache

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/svcdata"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// steadyReads reads name every 10 ms for d and reports how many reads
// waited for the registry and how many served data older than the TTL. The
// registry stamps each answer with its time.
func steadyReads(t *testing.T, c *cache, name string, d, ttl time.Duration) (waited, stale, reads int) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		start := time.Now()
		got, err := c.Lookup(name)
		require.NoError(t, err)
		if time.Since(start) > 0 {
			waited++
		}
		at, err := strconv.ParseInt(got[0].Nodes[0].Address, 10, 64)
		require.NoError(t, err)
		if time.Since(time.Unix(0, at)) > ttl {
			stale++
		}
		reads++
	}
	return waited, stale, reads
}

func TestRefreshAheadKeepsAHotServiceFresh(t *testing.T) {
	const ttl = time.Second
	for _, ahead := range []bool{false, true} {
		t.Run(fmt.Sprintf("refreshAhead=%v", ahead), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeRegistry()
				f.SetNodes("hot", "n")
				f.SetStamp(true)
				f.SetFault(fakereg.Fault{Latency: 200 * time.Millisecond, IgnoreCtx: true})
				opts := []Option{WithTTL(ttl), WithMinimumRetryInterval(100 * time.Millisecond)}
				if ahead {
					opts = append(opts, WithRefreshAhead(0.5))
				}
				c, _ := newTestCache(t, f, opts...)
				defer c.Stop()
				_, err := c.Lookup("hot") // the first fill waits
				require.NoError(t, err)

				waited, stale, reads := steadyReads(t, c, "hot", 10*time.Minute, ttl)
				t.Logf("%d reads over 10 min: %d waited, %d stale, %d registry calls", reads, waited, stale, f.TotalCalls())
				assert.Zero(t, waited, "no read waits on the registry")
				if ahead {
					assert.Zero(t, stale, "every read is data refreshed within the last TTL")
					assert.LessOrEqual(t, f.TotalCalls(), 10*60*2+2, "about one refresh per half TTL")
				} else {
					// Every expiry serves stale reads for the 200 ms the
					// refresh takes: about 20 reads per second.
					assert.Greater(t, stale, 500)
				}
			})
		})
	}
}

// jitterWindow returns the histogram of times over [lo, hi) in 100 slices.
func histogram(times []time.Time, lo, hi time.Time) []int {
	bins := make([]int, 100)
	width := hi.Sub(lo) / 100
	for _, at := range times {
		i := int(at.Sub(lo) / width)
		if i == 100 {
			i = 99
		}
		if i >= 0 && i < 100 {
			bins[i]++
		}
	}
	return bins
}

func TestTTLJitterSpreadsExpiriesAndTheRefreshStorm(t *testing.T) {
	t.Parallel() // long in fake time: run beside the others
	synctest.Test(t, func(t *testing.T) {
		const n, ttl, jitter = 1000, 10 * time.Second, 0.5
		f := newFakeRegistry()
		f.SetAnyName(true)
		// No throttle, so that the fill and the first stream's
		// re-validation happen at one instant.
		c, _ := newTestCache(t, f, WithTTL(ttl), WithTTLJitter(jitter), WithMinimumRetryInterval(0))
		defer c.Stop()
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprint("svc-", i)
		}
		warm(t, c, names...)
		filled := c.snapshotOf(names[0]).Refreshed
		lo := filled.Add(time.Duration(float64(ttl) * (1 - jitter)))
		hi := filled.Add(time.Duration(float64(ttl) * (1 + jitter)))

		var expiries []time.Time
		for _, name := range names {
			s := c.snapshotOf(name)
			require.Equal(t, filled, s.Refreshed, "filled at the same instant")
			require.False(t, s.Expires.Before(lo) || s.Expires.After(hi), "expiry within TTL × (1 ± jitter)")
			expiries = append(expiries, s.Expires)
		}
		bins := histogram(expiries, lo, hi)
		for i, b := range bins {
			assert.LessOrEqual(t, b, n*3/100, "expiry slice %d holds %d of %d", i, b, n)
		}
		// Both sides of the TTL, evenly: the mean stays the TTL.
		early, sum := 0, time.Duration(0)
		for _, at := range expiries {
			if at.Before(filled.Add(ttl)) {
				early++
			}
			sum += at.Sub(filled)
		}
		assert.InDelta(t, n/2, early, n/10, "expiries before the TTL")
		assert.InDelta(t, float64(ttl), float64(sum/time.Duration(n)), float64(ttl)/20, "mean TTL")

		// Read every service until its first refresh: the registry calls
		// of that storm are spread the same way.
		before := len(f.CallTimes())
		pending := names
		for len(pending) > 0 && time.Now().Before(hi.Add(time.Second)) {
			var still []string
			for _, name := range pending {
				_, err := c.Lookup(name)
				require.NoError(t, err)
				if c.snapshotOf(name).Refreshed.Equal(filled) {
					still = append(still, name)
				}
			}
			pending = still
			time.Sleep(20 * time.Millisecond)
		}
		calls := f.CallTimes()[before:]
		require.Len(t, calls, n, "one refresh per service")
		for i, b := range histogram(calls, lo, hi.Add(time.Millisecond)) {
			assert.LessOrEqual(t, b, n*3/100, "refresh slice %d holds %d of %d", i, b, n)
		}
	})
}

func TestMaxStaleBoundsWhatIsServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n")
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMaximumStale(10*time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		refreshed := c.snapshotOf("svc").Refreshed
		f.Fail(errDown)

		time.Sleep(time.Until(refreshed.Add(10 * time.Minute)))
		got, err := c.GetService("svc")
		require.NoError(t, err, "stale data within the limit is served")
		assert.Equal(t, []string{"n"}, nodeIDs(got))
		synctest.Wait()

		time.Sleep(time.Second) // past the limit, inside the throttle window
		_, err = c.GetService("svc")
		require.ErrorIs(t, err, ErrTooStale)
		assert.Contains(t, err.Error(), `"svc"`)
		assert.Contains(t, err.Error(), "10m1s", "says how stale")

		time.Sleep(5 * time.Second) // the throttle allows a refresh: it fails
		_, err = c.GetService("svc")
		require.ErrorIs(t, err, ErrTooStale)
		assert.ErrorIs(t, err, errDown, "wraps why it could not refresh")

		f.Fail(nil)
		time.Sleep(5 * time.Second)
		got, err = c.GetService("svc")
		require.NoError(t, err, "a too-stale caller waits for the refresh like a cold one")
		assert.Equal(t, []string{"n"}, nodeIDs(got))
	})
}

func TestLastKnownNodes(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v/lease storm", keep), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeRegistry()
				f.SetNodes("svc", "a", "b")
				opts := []Option{WithTTL(time.Minute)}
				if keep {
					opts = append(opts, WithLastKnownNodes())
				}
				c, l := newTestCache(t, f, opts...)
				defer c.Stop()
				warm(t, c, "svc")
				f.SetNodes("svc") // every lease lapsed at once
				for i := 0; i < 10; i++ {
					time.Sleep(time.Minute + time.Second) // past the TTL and the throttle
					got, err := c.GetService("svc")
					synctest.Wait()
					if keep {
						require.NoError(t, err)
						assert.Equal(t, []string{"a", "b"}, nodeIDs(got))
					} else if i > 0 {
						assert.ErrorIs(t, err, registry.ErrNotFound)
					}
				}
				if !keep {
					assert.Empty(t, l.all())
					return
				}
				assert.Len(t, l.all(), 1, "logged once when it engages: %v", l.all())
				f.SetNodes("svc", "c")
				time.Sleep(5 * time.Second)
				_, err := c.GetService("svc") // stale: starts the refresh
				require.NoError(t, err)
				synctest.Wait()
				got, err := c.GetService("svc")
				require.NoError(t, err)
				assert.Equal(t, []string{"c"}, nodeIDs(got), "released once the registry shows nodes")
				assert.Len(t, l.all(), 2, "logged once when it clears: %v", l.all())
			})
		})
		t.Run(fmt.Sprintf("keep=%v/delete events", keep), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeRegistry()
				f.SetNodes("svc", "a", "b")
				opts := []Option{WithTTL(time.Hour)}
				if keep {
					opts = append(opts, WithLastKnownNodes())
				}
				c, l := newTestCache(t, f, opts...)
				defer c.Stop()
				warm(t, c, "svc")
				deliver(f.Stream(), "delete", svc("svc", "1", "a"))
				deliver(f.Stream(), "delete", svc("svc", "1", "b"))
				got, err := c.Lookup("svc")
				if !keep {
					// The delete may come before the create of a
					// replacement: the last nodes are served until the
					// registry confirms that none is left.
					require.NoError(t, err)
					assert.Equal(t, []string{"b"}, nodeIDs(got), "b, the last node")
					f.SetNodes("svc")
					time.Sleep(c.opts.MinimumRetryInterval)
					synctest.Wait()
					_, err = c.Lookup("svc")
					require.Equal(t, registry.ErrNotFound, err, "confirmed by the registry after core.ReplacementGrace")
					assert.Empty(t, l.all(), "nothing to tell")
					return
				}
				require.NoError(t, err)
				assert.Equal(t, []string{"a", "b"}, nodeIDs(got),
					"the nodes of the last answer stay, as after an empty answer: a storm of deletes is a storm")
				assert.False(t, time.Now().Before(c.snapshotOf("svc").Expires), "served as stale")
				deliver(f.Stream(), "delete", svc("svc", "1", "b"))
				deliver(f.Stream(), "create", svc("svc", "1", "c"))
				got, _ = c.Lookup("svc")
				assert.Equal(t, []string{"c"}, nodeIDs(got), "nodes the registry shows replace the kept ones")
				assert.Len(t, l.all(), 2, "engaged and cleared, once each: %v", l.all())
			})
		})
	}
	// A lease storm keeps the same nodes whether it arrives as one delete
	// event per node or as an empty answer: those of the last answer and
	// those announced since.
	t.Run("both paths keep the same nodes", func(t *testing.T) {
		kept := func(deletes bool) []string {
			var ids []string
			synctest.Test(t, func(t *testing.T) {
				f := newFakeRegistry()
				f.SetNodes("svc", "a", "b")
				c, _ := newTestCache(t, f, WithTTL(time.Minute), WithLastKnownNodes())
				defer c.Stop()
				warm(t, c, "svc")
				deliver(f.Stream(), "create", svc("svc", "1", "c"))
				if deletes {
					for _, id := range []string{"a", "c", "b"} {
						deliver(f.Stream(), "delete", svc("svc", "1", id))
					}
				} else {
					f.SetNodes("svc")
					time.Sleep(time.Minute)
					_, err := c.Lookup("svc") // stale: the refresh finds no node
					require.NoError(t, err)
					synctest.Wait()
				}
				got, err := c.Lookup("svc")
				require.NoError(t, err)
				require.True(t, c.snapshotOf("svc").Hold == svcdata.Kept)
				ids = nodeIDs(got)
				sort.Strings(ids)
			})
			return ids
		}
		assert.Equal(t, []string{"a", "b", "c"}, kept(true))
		assert.Equal(t, []string{"a", "b", "c"}, kept(false))
	})
	t.Run("bounded by WithMaximumStale", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFakeRegistry()
			f.SetNodes("svc", "a")
			c, _ := newTestCache(t, f, WithTTL(time.Minute), WithLastKnownNodes(), WithMaximumStale(5*time.Minute))
			defer c.Stop()
			warm(t, c, "svc")
			f.SetNodes("svc")
			time.Sleep(5*time.Minute + time.Minute)
			_, err := c.GetService("svc")
			assert.ErrorIs(t, err, ErrTooStale)
			assert.ErrorIs(t, err, registry.ErrNotFound)
		})
	})
}

// An API gateway looks up 100 000 distinct names over an hour; memory stays
// bounded by the names used within the eviction period.
func TestIdleEvictionBoundsAGatewaysMemory(t *testing.T) {
	t.Parallel() // long in fake time: run beside the others
	synctest.Test(t, func(t *testing.T) {
		const d = time.Minute
		names := raceScale(100000)
		every := time.Hour / time.Duration(names) // 36 ms a name, in batches of 100
		f := newFakeRegistry()
		f.SetAnyName(true)
		f.SetNodes("anchor", "x")
		c, _ := newTestCache(t, f, WithIdleEviction(d))
		defer c.Stop()
		_, err := c.Lookup("anchor")
		require.NoError(t, err)
		peak := 0
		for i := 0; i < names; i++ {
			_, err := c.Lookup(fmt.Sprint("name-", i))
			require.NoError(t, err)
			if i%100 == 99 {
				time.Sleep(100 * every)
				peak = max(peak, c.entryCount())
			}
			if i%10000 == 0 {
				checkByName(t, c)
			}
		}
		// Names read within d + d/4 (the eviction scan period) may still
		// be held, plus the batch being read.
		bound := int((d+d/4)/every) + 100 + 2
		t.Logf("peak %d entries for %d names (bound %d)", peak, names, bound)
		assert.LessOrEqual(t, peak, bound)
		assert.Greater(t, peak, int(d/every)/2, "entries do live for about d")

		// The anchor went idle too; later events for it are ignored.
		time.Sleep(2 * d)
		synctest.Wait()
		calls := f.TotalCalls()
		deliver(f.Stream(), "create", svc("anchor", "1", "y"))
		assert.Nil(t, c.entryOf("anchor"))
		checkByName(t, c)
		assert.Equal(t, calls, f.TotalCalls())
	})
}

func TestCallerContextIsHonouredWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n")
		f.SetFault(fakereg.Fault{Latency: 10 * time.Second, IgnoreCtx: true})
		c, _ := newTestCache(t, f)
		defer c.Stop()

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.GetService("svc", registry.GetContext(ctx))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), `"svc"`)
		assert.Equal(t, time.Second, time.Since(start))

		ctx2, cancel2 := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Second); cancel2() }()
		_, err = c.GetService("svc", registry.GetContext(ctx2)) // joins the same refresh
		assert.ErrorIs(t, err, context.Canceled)

		time.Sleep(8 * time.Second) // the refresh went on
		assert.Equal(t, 1, f.Calls("svc"))
		start = time.Now()
		got, err := c.Lookup("svc")
		require.NoError(t, err)
		assert.Equal(t, []string{"n"}, nodeIDs(got))
		assert.Zero(t, time.Since(start), "and filled the cache for everyone")
	})
}

// outageLoad reads every service every 10 s through a 30-minute outage and
// returns the registry calls made.
func outageLoad(t *testing.T, services int, opts ...Option) int {
	t.Helper()
	var calls int
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetAnyName(true)
		c, _ := newTestCache(t, f, append([]Option{WithTTL(time.Minute)}, opts...)...)
		defer c.Stop()
		names := make([]string, services)
		for i := range names {
			names[i] = fmt.Sprint("svc-", i)
		}
		warm(t, c, names...)
		base := f.TotalCalls()
		f.Fail(errDown)
		for end := time.Now().Add(30 * time.Minute); time.Now().Before(end); time.Sleep(10 * time.Second) {
			for _, n := range names {
				_, err := c.Lookup(n)
				require.NoError(t, err)
			}
		}
		calls = f.TotalCalls() - base

		// Recovery resets the interval.
		f.Fail(nil)
		time.Sleep(c.opts.MaximumRetryInterval)
		_, err := c.Lookup(names[0])
		require.NoError(t, err)
		synctest.Wait()
		e := c.entryOf(names[0])
		c.mu.Lock()
		assert.Zero(t, e.Failures())
		assert.Equal(t, c.opts.MinimumRetryInterval, e.RetryInterval(c.opts.MinimumRetryInterval))
		c.mu.Unlock()
	})
	return calls
}

// Adaptive retry is per service, so it is measured with the registry-wide
// state off (WithProbeInterval(0)), as for a registry that fails some
// services while it answers others.
func TestAdaptiveRetryShedsOutageLoad(t *testing.T) {
	t.Parallel() // long in fake time: run beside the others
	services := raceScale(1000)
	fixed := outageLoad(t, services, WithProbeInterval(0))
	adaptive := outageLoad(t, services, WithProbeInterval(0), WithMaximumRetryInterval(5*time.Minute))
	t.Logf("30 min outage, %d services: %d registry calls with the fixed 5 s interval, %d with adaptive retry up to 5 min (%.1f×)",
		services, fixed, adaptive, float64(fixed)/float64(adaptive))
	assert.LessOrEqual(t, fixed, services*(1+int(30*time.Minute/(5*time.Second))))
	assert.Greater(t, fixed, services*int(30*time.Minute/(10*time.Second))*9/10, "the fixed interval retries on about every read")
	assert.Less(t, adaptive*5, fixed, "adaptive retry sheds most of the load")
	// The doubling reaches the 5 min cap after about six failures, then
	// retries at 2.5 to 5 min: at most about 6 + 30/2.5 = 18 per service.
	assert.LessOrEqual(t, adaptive, services*18)
}

func TestOptionsRejectBadValues(t *testing.T) {
	f := newFakeRegistry()
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithRefreshAhead(-0.1), "WithRefreshAhead"},
		{WithRefreshAhead(1), "WithRefreshAhead"},
		{WithRefreshAhead(math.NaN()), "WithRefreshAhead"},
		{WithTTLJitter(-0.5), "WithTTLJitter"},
		{WithTTLJitter(1.5), "WithTTLJitter"},
		{WithMaximumStale(-time.Second), "WithMaximumStale"},
		{WithIdleEviction(-time.Second), "WithIdleEviction"},
		{WithMaximumRetryInterval(-time.Second), "WithMaximumRetryInterval"},
		{WithMaximumRetryInterval(time.Second), "WithMaximumRetryInterval"}, // below the 5 s minimum
	} {
		t.Run(tc.want, func(t *testing.T) {
			defer func() {
				r := recover()
				require.NotNil(t, r)
				assert.True(t, strings.Contains(fmt.Sprint(r), tc.want), "%v", r)
			}()
			New(f, tc.opt)
		})
	}
}

// Every option at once, with the watcher running, events flowing, the
// registry failing half the time and callers cancelling: no lookup of a
// cached service fails, and nothing leaks (the bubble checks).
func TestAllOptionsCompose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		const services = 20
		names := make([]string, services)
		for i := range names {
			names[i] = fmt.Sprint("svc-", i)
			f.SetNodes(names[i], "a", "b")
		}
		f.SetFault(fakereg.Fault{Latency: 50 * time.Millisecond, IgnoreCtx: true})
		c, _ := newTestCache(t, f,
			WithTTL(time.Second),
			WithMinimumRetryInterval(200*time.Millisecond),
			WithMaximumRetryInterval(5*time.Second),
			WithRefreshAhead(0.3),
			WithTTLJitter(0.2),
			WithMaximumStale(time.Hour),
			WithLastKnownNodes(),
			WithIdleEviction(time.Hour),
		)
		defer c.Stop()
		warm(t, c, names...)

		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 2000; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
					got, err := c.GetService(names[(g+i)%services], registry.GetContext(ctx))
					cancel()
					if assert.NoError(t, err) {
						assert.NotEmpty(t, got[0].Nodes)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 400; i++ {
				name := names[i%services]
				switch i % 4 {
				case 0:
					f.Fail(errDown)
				case 1:
					f.Stream().Send("delete", svc(name, "1", "a", "b"))
				case 2:
					f.Fail(nil)
					f.Stream().Send("create", svc(name, "1", "c"))
				case 3:
					f.Stream().Send("bogus", svc(name, "1", "c"))
				}
				time.Sleep(25 * time.Millisecond)
			}
		}()
		wg.Wait()
	})
}
