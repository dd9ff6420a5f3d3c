package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// These tests hold the cache to its recovery: a stream is a hint and the
// registry the truth, so a stream lost, a call that hangs, a few broken
// keys or a late answer never keep old nodes served, hold a healthy
// registry down, or freeze the background work. They run in fake time.

// times returns when the observer heard each event of kind.
func (r *eventLog) times(kind cache.EventKind) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ts []time.Time
	for _, ev := range r.events {
		if ev.Kind == kind && ev.Service == "" {
			ts = append(ts, ev.Time)
		}
	}
	return ts
}

// untilCurrent looks every service up every 10 ms until each serves only
// the node want, for at most limit, and returns how long that took; an old
// node served after the new one fails t.
func (e *convEnv) untilCurrent(want string, limit time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	current := map[string]bool{}
	for len(current) < len(e.names) && time.Since(start) <= limit {
		for _, name := range e.names {
			got, err := e.c.Lookup(name)
			require.NoError(e.t, err, name)
			ids := nodeSetOf(got)
			if current[name] {
				require.Equal(e.t, []string{want}, ids, "%s: an old node served after the new one", name)
				continue
			}
			if len(ids) == 1 && ids[0] == want {
				current[name] = true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Len(e.t, current, len(e.names), "every service current within %v", limit)
	return time.Since(start) - 10*time.Millisecond
}

// A 60 s outage during which every node is replaced with no event, for
// services whose data stays fresh all along (TTL 10 min): no refresh is
// due, so only the stream can find the registry back. The redial is the
// probe, about one Watch a second, and every service is current within a
// second of the registry's return.
func TestRedialIsTheProbeWhenNoRefreshIsDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 100, true, cache.WithTTL(10*time.Minute))
		e.down(false)
		start := time.Now()
		assert.Zero(t, e.readAll(time.Minute, 100*time.Millisecond))
		_, watches := e.reg.StartsSince(start)
		for _, name := range e.names {
			e.reg.Set(name, faultService(name, "new"))
		}
		time.Sleep(370 * time.Millisecond) // back at a moment unrelated to the redials
		e.reg.ClearFaults()
		back := time.Now()
		took := e.untilCurrent("new", 2*time.Second)
		t.Logf("60 s outage, fresh data: %d Watch calls during it; every service current %v after the registry's return", len(watches), took)
		assert.LessOrEqual(t, took, time.Second, "current within a second")
		assert.Equal(t, 1, e.reg.Report().Open, "the stream is back")
		assert.GreaterOrEqual(t, len(watches), 50, "about one Watch a second, not the 30 s backoff")
		assert.LessOrEqual(t, len(watches), 62, "about one Watch a second")

		// An event sent 2 s after the return is applied, with no call.
		time.Sleep(time.Until(back.Add(2 * time.Second)))
		calls := e.reg.Report().TotalCalls
		require.NoError(t, e.reg.Register(faultService("svc-0", "later")))
		synctest.Wait()
		got, err := e.c.Lookup("svc-0")
		require.NoError(t, err)
		assert.Equal(t, []string{"later", "new"}, nodeSetOf(got))
		assert.Equal(t, calls, e.reg.Report().TotalCalls, "from the event")
	})
}

// An outage is told even when no refresh is due: a stream lost and a
// redial that fails, or hangs, are the registry's failure, told once each
// way.
func TestOutageIsToldWithNoRefreshDue(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprintf("redial hangs %v", hang), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { outageIsTold(t, hang) })
		})
	}
}

func outageIsTold(t *testing.T, hang bool) {
	e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Minute))
	logged := e.log.count()
	e.down(false)
	if hang {
		// Watch blocks until the registry is back, as etcd's client
		// waiting for its connection does.
		e.reg.SetWatchFault(fakereg.WatchFault{WatchHang: true, BreakErr: errOutage})
	}
	cut := time.Now()
	assert.Zero(t, e.readAll(30*time.Second, 100*time.Millisecond))
	downs := e.events.times(cache.RegistryDown)
	require.Len(t, downs, 1, "RegistryDown, once")
	assert.LessOrEqual(t, downs[0].Sub(cut), 1500*time.Millisecond, "told soon after the stream was lost")
	assert.True(t, e.c.Stats().RegistryDown)
	e.reg.ClearFaults()
	e.readAll(2*time.Second, 100*time.Millisecond)
	assert.Equal(t, 1, e.events.count(cache.RegistryUp, ""), "RegistryUp, once")
	assert.False(t, e.c.Stats().RegistryDown)
	down, up := 0, 0
	for _, line := range e.log.since(logged) {
		if assert.NotContains(t, line, "refresh of service") {
			down += countIf(line, "unreachable")
			up += countIf(line, "reachable again")
		}
	}
	assert.Equal(t, 1, down, "one line when it went down")
	assert.Equal(t, 1, up, "one line when it came back")
}

func countIf(line, word string) int {
	if strings.Contains(line, word) {
		return 1
	}
	return 0
}

// A Watch that fails while GetService answers is the stream's own
// trouble: the redials back off exponentially, and the registry is held
// down for at most one probe.
func TestWatchFailingAloneBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Second))
		e.reg.SetWatchFault(fakereg.WatchFault{WatchErr: errors.New("watch not supported"), BreakErr: errOutage})
		e.reg.Cut()
		start := time.Now()
		assert.Zero(t, e.readAll(5*time.Minute, time.Second))
		_, watches := e.reg.StartsSince(start)
		t.Logf("Watch failing for 5 min while GetService answers: %d Watch calls", len(watches))
		assert.LessOrEqual(t, len(watches), 40, "backed off")
		assert.LessOrEqual(t, e.events.count(cache.RegistryDown, ""), 1)
		assert.False(t, e.c.Stats().RegistryDown)
	})
}

// A Watch that fails while GetService answers, for services whose data
// stays fresh: the stream lost and its redial failing take the registry
// down, and though no refresh is due, a re-validation of a cached service,
// as the probe, brings it back up at once.
func TestWatchFailingAloneWithFreshDataIsDownOnlyBriefly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Minute))
		time.Sleep(10 * time.Second) // past the first re-validations' windows
		e.reg.SetWatchFault(fakereg.WatchFault{WatchErr: errors.New("watch not allowed"), BreakErr: errOutage})
		e.reg.Cut()
		downFor := time.Duration(0)
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if e.c.Stats().RegistryDown {
				downFor += 100 * time.Millisecond
			}
		}
		t.Logf("Watch failing alone, fresh data, 2 min: RegistryDown %d times, held down %v", e.events.count(cache.RegistryDown, ""), downFor)
		assert.LessOrEqual(t, e.events.count(cache.RegistryDown, ""), 1)
		assert.LessOrEqual(t, downFor, 200*time.Millisecond, "a wrong guess costs one round trip")
		e.reg.ClearFaults()
	})
}

// A probe whose call hangs for good does not hold the registry down: once
// it has been out for a probe interval, the next probe goes one interval
// later, and finds the registry back.
func TestHangingProbeDoesNotHoldTheRegistryDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Second))
		require.NoError(t, e.reg.Register(faultService("hang", "h1")))
		require.NoError(t, e.reg.Register(faultService("cold", "c1")))
		time.Sleep(20 * time.Second) // stale: the reads refresh
		// The stream blocks, as the etcd plugin's does, so only refreshes
		// can tell the registry's state.
		e.down(true)
		e.readAll(5*time.Second, 100*time.Millisecond)
		require.True(t, e.c.Stats().RegistryDown)
		time.Sleep(5 * time.Second) // no reads: the next lookup is the probe
		// GetService answers again, except for "hang", whose calls hang
		// for good.
		e.reg.SetFault(fakereg.Fault{})
		e.reg.SetFaultFor("hang", fakereg.Fault{Hang: true, IgnoreCtx: true})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := e.c.GetService("hang", registry.GetContext(ctx))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 1, e.reg.Calls("hang"), "the probe")
		hung := time.Now().Add(-100 * time.Millisecond)
		var served time.Duration
		for served == 0 && time.Since(hung) < time.Minute {
			if _, err := e.c.Lookup("cold"); err == nil {
				served = time.Since(hung)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("a cold lookup served %v after the probe that hangs started", served)
		assert.Positive(t, served, "served")
		assert.LessOrEqual(t, served, 2*cache.DefaultProbeInterval+100*time.Millisecond, "the next probe, on time")
		assert.Equal(t, 1, e.events.count(cache.RegistryUp, ""))
		e.reg.ClearFaults()
	})
}

// A resync whose ListServices hangs does not freeze the refreshes behind
// it: after a probe interval they go on one by one.
func TestHangingListDoesNotFreezeTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Second))
		time.Sleep(20 * time.Second) // every entry is stale
		e.reg.SetListFault(&fakereg.Fault{Hang: true})
		before := map[string]int{}
		for _, name := range e.names {
			before[name] = e.reg.Calls(name)
		}
		streams := e.reg.Report().Streams
		e.reg.Cut()
		for e.reg.Report().Streams == streams {
			time.Sleep(10 * time.Millisecond)
		}
		start := time.Now()
		assert.Zero(t, e.readAll(3*time.Second, 100*time.Millisecond))
		for _, name := range e.names {
			assert.Equal(t, 1, e.reg.Calls(name)-before[name], "%s re-validated within %v of the resync", name, time.Since(start))
		}
		e.reg.ClearFaults()
	})
}

// A list answer never replaces data that a call started after the list
// fetched: a lookup that fetched the new nodes while a slow ListServices
// was out keeps them when the list, read before, lands.
func TestListAnswerNeverReplacesNewerData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Second), cache.WithMaximumStale(time.Minute))
		// Too stale to serve: the next lookup waits for the registry.
		time.Sleep(80 * time.Second)
		e.reg.SetListFault(&fakereg.Fault{Late: 3 * time.Second})
		streams := e.reg.Report().Streams
		e.reg.Cut()
		for e.reg.Report().Streams == streams {
			time.Sleep(time.Millisecond)
		}
		synctest.Wait() // the list is out, its answer read
		require.Positive(t, e.reg.ListCalls(), "the list is out")
		e.reg.Set("svc-0", faultService("svc-0", "new"))
		got, err := e.c.Lookup("svc-0")
		require.NoError(t, err)
		require.Equal(t, []string{"new"}, nodeSetOf(got), "fetched by the lookup")
		time.Sleep(5 * time.Second) // the list has landed
		got, err = e.c.Lookup("svc-0")
		require.NoError(t, err)
		assert.Equal(t, []string{"new"}, nodeSetOf(got), "the list's older answer did not replace it")
	})
}

// A few services whose keys always fail, among many that answer, take
// the registry down at most once, for at most a probe interval; each
// broken key keeps its own retry interval, and cold lookups of healthy
// services are not refused.
func TestBrokenKeysDoNotHoldTheRegistryDown(t *testing.T) {
	for _, broken := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d broken keys", broken), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newConvEnv(t, 100, true, cache.WithTTL(time.Second))
				for i := 0; i < 600; i++ {
					require.NoError(t, e.reg.Register(faultService(fmt.Sprintf("cold-%d", i), "c")))
				}
				before := map[string]int{}
				for _, name := range e.names[:broken] {
					e.reg.SetFaultFor(name, fakereg.Fault{Err: errors.New("key unreadable")})
					before[name] = e.reg.Calls(name)
				}
				refused := 0
				for i := 0; i < 600; i++ {
					for _, name := range e.names {
						_, _ = e.c.Lookup(name)
					}
					if _, err := e.c.Lookup(fmt.Sprintf("cold-%d", i)); err != nil {
						refused++
					}
					time.Sleep(100 * time.Millisecond)
				}
				downs, ups := e.events.times(cache.RegistryDown), e.events.times(cache.RegistryUp)
				calls := []int{}
				for _, name := range e.names[:broken] {
					calls = append(calls, e.reg.Calls(name)-before[name])
				}
				t.Logf("%d broken keys, 1 min: calls %v, RegistryDown %d times, %d of 600 cold lookups refused", broken, calls, len(downs), refused)
				// One call an interval, one more if the minute starts and
				// ends on one, and the one early call that a recovery
				// allows each service (the windows the outage opened
				// close).
				for i, n := range calls {
					assert.LessOrEqual(t, n, 1+int(time.Minute/cache.DefaultMinimumRetryInterval)+len(ups), "%s: its own interval", e.names[i])
				}
				assert.LessOrEqual(t, len(downs), 1, "held down at most once")
				for i, d := range downs {
					require.Greater(t, len(ups), i, "back up")
					assert.LessOrEqual(t, ups[i].Sub(d), cache.DefaultProbeInterval+100*time.Millisecond, "down for at most a probe interval")
				}
				assert.LessOrEqual(t, refused, 11, "cold lookups of healthy services refused")
			})
		})
	}
}

// Under WithWatchPerService, a service whose watch always fails loses its
// own events only: the other watches stay open and deliver theirs.
func TestOneFailingWatchCostsOnlyItsService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 3, true, cache.WithWatchPerService())
		e.reg.SetWatchFaultFor("svc-0", fakereg.WatchFault{WatchErr: errors.New("permission denied"), BreakErr: errOutage})
		// Every watch lost at once looks like an outage: the registry is
		// held down until a watch that reopens has lasted a second, the
		// redials one a second meanwhile, svc-0's perhaps first.
		e.reg.Cut()
		time.Sleep(3 * time.Second)
		start := time.Now()
		for i := 0; i < 6; i++ {
			calls := e.reg.Report().TotalCalls
			node := fmt.Sprintf("n%d", i)
			require.NoError(t, e.reg.Register(faultService("svc-1", node)))
			synctest.Wait()
			got, err := e.c.Lookup("svc-1")
			require.NoError(t, err)
			assert.Contains(t, nodeSetOf(got), node, "svc-1's event, %v after the failure", time.Since(start))
			assert.Equal(t, calls, e.reg.Report().TotalCalls, "from the event")
			time.Sleep(10 * time.Second)
		}
		_, watches := e.reg.StartsSince(start)
		assert.LessOrEqual(t, len(watches), 15, "svc-0's watch is retried with backoff")
		assert.False(t, e.c.Stats().RegistryDown)
		e.reg.ClearFaults()
	})
}

// Probes are paced from the end of the last one: with calls that take
// 300 ms to fail, consecutive probes start at least 1.3 s apart.
func TestProbesArePacedFromTheEndOfTheLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Second))
		time.Sleep(20 * time.Second) // stale: every read wants a refresh
		e.reg.SetFault(fakereg.Fault{Latency: 300 * time.Millisecond, Err: errOutage})
		e.reg.SetWatchFault(fakereg.WatchFault{WatchErr: errOutage, BreakErr: errOutage})
		e.reg.Cut()
		start := time.Now()
		e.readAll(30*time.Second, 100*time.Millisecond)
		require.True(t, e.c.Stats().RegistryDown)
		gets, _ := e.reg.StartsSince(start)
		downs := e.events.times(cache.RegistryDown)
		require.Len(t, downs, 1)
		var probes []time.Time
		for _, at := range gets {
			if !at.Before(downs[0]) {
				probes = append(probes, at)
			}
		}
		require.Greater(t, len(probes), 10)
		for i := 1; i < len(probes); i++ {
			assert.GreaterOrEqual(t, probes[i].Sub(probes[i-1]), cache.DefaultProbeInterval+300*time.Millisecond,
				"probe %d started after the last one ended and an interval passed", i)
		}
		e.reg.ClearFaults()
	})
}

// A resync by ListServices replays onto the list's answer the events that
// arrived while the list was out: the answer, read before them, does not
// undo them.
func TestResyncByListReplaysTheEventsThatRaceIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true)
		e.reg.SetListFault(&fakereg.Fault{Late: 500 * time.Millisecond})
		lists := e.reg.ListCalls()
		streams := e.reg.Report().Streams
		e.reg.Cut()
		for e.reg.Report().Streams == streams {
			time.Sleep(time.Millisecond)
		}
		synctest.Wait() // the list is out, its answer read
		require.Equal(t, lists+1, e.reg.ListCalls())
		require.NoError(t, e.reg.Register(faultService("svc-0", "raced")))
		time.Sleep(time.Second) // the list has landed
		calls := e.reg.Calls("svc-0")
		got, err := e.c.Lookup("svc-0")
		require.NoError(t, err)
		assert.Equal(t, []string{"old", "raced"}, nodeSetOf(got))
		synctest.Wait()
		assert.Equal(t, calls, e.reg.Calls("svc-0"), "fresh from the list")
	})
}

// While every background slot has been held by hanging calls, one more
// refresh may start a second after the newest of them: the number of calls
// in flight grows by one a second, not all at once.
func TestBackgroundSlotsGrowFromTheNewest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 20, true, cache.WithTTL(10*time.Second))
		time.Sleep(20 * time.Second) // every entry is stale
		e.reg.SetFault(fakereg.Fault{Hang: true, IgnoreCtx: true})
		before := e.reg.Report().TotalCalls
		start := time.Now()
		assert.Zero(t, e.readAll(time.Millisecond, time.Millisecond))
		for k := 0; k <= 5; k++ {
			time.Sleep(time.Until(start.Add(time.Duration(k)*time.Second + 500*time.Millisecond)))
			assert.Equal(t, 4+k, e.reg.Report().TotalCalls-before, "calls in flight %v after the first", time.Since(start))
		}
		e.reg.ClearFaults()
	})
}

// An event that cannot be applied, arriving while a refresh is out, leaves
// the refresh's answer stale: the answer predates the event, and the cache
// cannot tell what the event changed.
func TestInapplicableEventDuringARefreshLeavesItStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true, cache.WithTTL(10*time.Second))
		time.Sleep(20 * time.Second) // stale
		e.reg.SetFault(fakereg.Fault{Late: time.Second})
		_, err := e.c.Lookup("svc-0") // served stale; the refresh starts
		require.NoError(t, err)
		synctest.Wait()
		e.reg.Emit(&registry.Result{Action: "expire", Service: faultService("svc-0", "old")})
		time.Sleep(2 * time.Second) // the refresh has landed
		rows := e.c.Services("", "", 0)
		require.Len(t, rows, 1)
		assert.False(t, rows[0].Fresh, "stale: the answer predates an event the cache could not apply")
	})
}
