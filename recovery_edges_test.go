package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// These tests hold the recovery to its edges, through the public API: a
// call that hangs for good, fails at once after succeeding, returns after
// newer events or after Stop; tiny option values; broken keys now and
// then; and the per-service watches under all of it. They drive the fake
// registry (internal/fakereg), plus spyReg below, in fake time.

// spyReg wraps a registry (the fake) and adds what the fake lacks: Watch
// calls counted per service as they start, and the next Watch calls of
// one service ("" is the single stream) hanging, ignoring their context,
// until released.
type spyReg struct {
	registry.Registry

	mu       sync.Mutex
	watchBy  map[string]int
	hangFor  map[string]int // the next n Watch calls of that service hang, ignoring ctx
	hanging  int            // Watch calls hanging now
	release  chan struct{}
	returned int // hung Watch calls that returned
}

func newSpyReg(inner registry.Registry) *spyReg {
	return &spyReg{Registry: inner, watchBy: map[string]int{}, hangFor: map[string]int{}, release: make(chan struct{})}
}

func (s *spyReg) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var o registry.WatchOptions
	for _, opt := range opts {
		opt(&o)
	}
	s.mu.Lock()
	s.watchBy[o.Service]++
	hang := s.hangFor[o.Service] > 0
	if hang {
		s.hangFor[o.Service]--
		s.hanging++
	}
	release := s.release
	s.mu.Unlock()
	if hang {
		<-release // ignores its context
		s.mu.Lock()
		s.hanging--
		s.returned++
		s.mu.Unlock()
	}
	return s.Registry.Watch(opts...)
}

func (s *spyReg) hangNext(service string, n int) {
	s.mu.Lock()
	s.hangFor[service] += n
	s.mu.Unlock()
}

func (s *spyReg) releaseAll() {
	s.mu.Lock()
	close(s.release)
	s.release = make(chan struct{})
	s.mu.Unlock()
}

func (s *spyReg) watchesOf(service string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watchBy[service]
}

func (s *spyReg) hangingNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hanging
}

// newSpyEnv is newConvEnv with a spyReg between the cache and the fake
// registry.
func newSpyEnv(t *testing.T, services int, opts ...cache.Option) (*convEnv, *spyReg) {
	t.Helper()
	e := &convEnv{t: t, reg: fakereg.New(), log: &lineLogger{}, events: &eventLog{}}
	e.reg.SetListNodes(true)
	e.reg.SetBound(cache.DefaultMinimumRetryInterval)
	spy := newSpyReg(e.reg)
	for i := 0; i < services; i++ {
		name := fmt.Sprintf("svc-%d", i)
		e.names = append(e.names, name)
		require.NoError(t, e.reg.Register(faultService(name, "old")))
	}
	base := []cache.Option{cache.WithLogger(e.log), cache.WithObserver(e.events.add)}
	e.c = cache.New(spy, append(base, opts...)...)
	t.Cleanup(e.c.Stop)
	for _, name := range e.names {
		_, err := e.c.Lookup(name)
		require.NoError(t, err)
	}
	e.filled = time.Now()
	time.Sleep(cache.DefaultMinimumRetryInterval)
	synctest.Wait()
	return e, spy
}

// untilUp waits up to limit for the cache to hold the registry up, and
// returns how long that took.
func untilUp(c cache.Cache, limit time.Duration) time.Duration {
	start := time.Now()
	for c.Stats().RegistryDown && time.Since(start) < limit {
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// Under WithWatchPerService, one service with fresh data (TTL 10 min), and
// a 60 s outage: its watch lost and its redial failing take the registry
// down, the redial is then the probe, about one Watch a second, and the
// return is noticed within about a probe interval.
func TestPerServiceRedialIsTheProbeWhileDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true, cache.WithTTL(10*time.Minute), cache.WithWatchPerService())
		e.down(false)
		time.Sleep(2 * time.Second)
		require.True(t, e.c.Stats().RegistryDown, "down: the watch lost and its redial failed")
		start := time.Now()
		assert.Zero(t, e.readAll(time.Minute, 100*time.Millisecond))
		_, watches := e.reg.StartsSince(start)
		e.reg.ClearFaults()
		took := untilUp(e.c, time.Minute)
		t.Logf("per-service, 1 service, 60 s down: %d Watch calls ; registry seen back %v after its return", len(watches), took)
		assert.GreaterOrEqual(t, len(watches), 50, "one redial a probe interval while down")
		assert.LessOrEqual(t, took, 1500*time.Millisecond, "the return noticed within about a probe interval")
	})
}

// Under WithWatchPerService, one service whose watch is lost and whose
// redial hangs (etcd's client waiting for a connection): the redial out
// for a second counts as failed, and the outage is told, as on the single
// stream.
func TestPerServiceHangingRedialIsTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true, cache.WithTTL(10*time.Minute), cache.WithWatchPerService())
		e.reg.SetFault(fakereg.Fault{Err: errOutage})
		e.reg.SetWatchFault(fakereg.WatchFault{WatchHang: true, BreakErr: errOutage})
		e.reg.Cut()
		cut := time.Now()
		assert.Zero(t, e.readAll(30*time.Second, 100*time.Millisecond))
		downs := e.events.times(cache.RegistryDown)
		t.Logf("per-service, watch lost, redial hanging 30 s: RegistryDown %d times, Stats().RegistryDown=%v", len(downs), e.c.Stats().RegistryDown)
		if assert.Len(t, downs, 1, "an outage with no refresh due is told") {
			assert.LessOrEqual(t, downs[0].Sub(cut), 1500*time.Millisecond)
		}
		e.reg.ClearFaults()
	})
}

// The stream is lost and one redial hangs for good, while every later
// Watch would succeed and GetService answers: the watcher goes on past the
// hung call, the stream comes back, and its events are applied.
func TestHungWatchDoesNotStopTheRedials(t *testing.T) {
	for _, perService := range []bool{false, true} {
		t.Run(fmt.Sprintf("perService=%v", perService), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []cache.Option{cache.WithTTL(10 * time.Minute)}
				hung := ""
				if perService {
					opts = append(opts, cache.WithWatchPerService())
					hung = "svc-0"
				}
				e, spy := newSpyEnv(t, 3, opts...)
				spy.hangNext(hung, 1)
				e.reg.Cut()
				for i := 0; i < 500 && spy.hangingNow() == 0; i++ {
					time.Sleep(10 * time.Millisecond)
				}
				require.Equal(t, 1, spy.hangingNow(), "the redial hangs")
				// The registry answers everything else from here on.
				assert.Zero(t, e.readAll(5*time.Minute, time.Second))
				watches := spy.watchesOf(hung)
				require.NoError(t, e.reg.Register(faultService("svc-0", "new")))
				synctest.Wait()
				got, err := e.c.Lookup("svc-0")
				require.NoError(t, err)
				t.Logf("5 min after one Watch call hung: %d Watch calls for %q, RegistryDown=%v, svc-0 serves %v (registry: %v)",
					watches, hung, e.c.Stats().RegistryDown, nodeSetOf(got), nodeSet(e.reg, "svc-0"))
				assert.Contains(t, nodeSetOf(got), "new", "the create event, from a stream redialled past the hung call")
				spy.releaseAll()
				synctest.Wait()
			})
		})
	}
}

// Under WithWatchPerService, svc-0's Watch succeeds but its stream fails
// at the first Next, while everything else answers: its redials back off
// as the single stream's do, reset only after a watch stayed up a while.
func TestPerServiceWatchThatBreaksAtOnceBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, spy := newSpyEnv(t, 3, cache.WithWatchPerService())
		e.reg.SetWatchFaultFor("svc-0", fakereg.WatchFault{BreakErr: errors.New("permission denied")})
		e.reg.Cut()
		before := spy.watchesOf("svc-0")
		gets := e.reg.Calls("svc-0")
		assert.Zero(t, e.readAll(time.Minute, time.Second))
		n := spy.watchesOf("svc-0") - before
		t.Logf("svc-0's watch opening then breaking for 1 min: %d Watch calls for it, %d GetService calls, RegistryDown %d",
			n, e.reg.Calls("svc-0")-gets, e.events.count(cache.RegistryDown, ""))
		assert.LessOrEqual(t, n, 20, "backed off (capped exponential, 30 s), as the single stream")
		e.reg.ClearFaults()
	})
}

// The same on the single stream.
func TestStreamThatBreaksAtOnceBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, spy := newSpyEnv(t, 3)
		e.reg.SetWatchFault(fakereg.WatchFault{BreakErr: errors.New("permission denied")})
		e.reg.Cut()
		before := spy.watchesOf("")
		assert.Zero(t, e.readAll(time.Minute, time.Second))
		n := spy.watchesOf("") - before
		t.Logf("single stream opening then breaking for 1 min: %d Watch calls", n)
		assert.LessOrEqual(t, n, 20)
		assert.LessOrEqual(t, e.reg.Report().MaxOpen, 1)
		e.reg.ClearFaults()
	})
}

// "ghost" is not found; its Watch call hangs; the entry is swept and
// "ghost" is looked up again, so its new entry gets a watch of its own;
// then the first call returns a watch, late: that one is closed, no
// watch is left behind, and Stop returns at once.
func TestPerServiceLateWatchOfADroppedServiceIsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, spy := newSpyEnv(t, 1, cache.WithWatchPerService())
		spy.hangNext("ghost", 1)
		_, err := e.c.Lookup("ghost")
		require.ErrorIs(t, err, registry.ErrNotFound)
		synctest.Wait()
		require.Equal(t, 1, spy.hangingNow(), "ghost's first Watch hangs")
		// Its redials fail meanwhile: the entry never has a watch.
		e.reg.SetWatchFaultFor("ghost", fakereg.WatchFault{WatchErr: errOutage})
		time.Sleep(2 * cache.DefaultMinimumRetryInterval) // swept: its window closed
		synctest.Wait()
		e.reg.SetWatchFaultFor("ghost", fakereg.WatchFault{})
		_, err = e.c.Lookup("ghost") // cached again: a watch of its own
		require.ErrorIs(t, err, registry.ErrNotFound)
		synctest.Wait()
		require.Equal(t, 1, spy.hangingNow(), "the first call still hangs")
		open := e.reg.Report().Open
		require.Equal(t, 2, open, "svc-0's watch and ghost's new one")
		spy.releaseAll() // the first Watch returns a watch, late
		synctest.Wait()
		time.Sleep(100 * time.Millisecond) // a watch is stopped once 100 ms old (watchset.minWatchAge)
		synctest.Wait()
		t.Logf("watches open: %d before the late Watch returned, %d after", open, e.reg.Report().Open)
		assert.Equal(t, open, e.reg.Report().Open, "the late watch is closed")

		stopped := time.Now()
		e.c.Stop()
		took := time.Since(stopped)
		left := e.reg.Report().Open
		t.Logf("Stop took %v; watches left open after Stop: %d", took, left)
		assert.Less(t, took, time.Second, "Stop returns at once: nothing ignores cancellation here")
		assert.Zero(t, left, "every watch stopped by Stop")
		e.reg.Cut() // let the orphan's goroutine end, so the bubble can
		synctest.Wait()
	})
}

// Under WithWatchPerService, svc-0's watch alone breaks and cannot be
// redialled (a permission revoked), while the other watches stay open and
// the registry answers: one service's watch is not the registry, which is
// never held down.
func TestPerServiceOneBrokenWatchIsNotTheRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 3, true, cache.WithTTL(10*time.Minute), cache.WithWatchPerService())
		e.reg.SetWatchFaultFor("svc-0", fakereg.WatchFault{WatchErr: errors.New("permission denied"), BreakErr: errors.New("permission denied")})
		require.NoError(t, e.reg.Register(faultService("svc-0", "x"))) // wakes svc-0's watch, which breaks
		start := time.Now()
		downFor := time.Duration(0)
		for end := start.Add(2 * time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			for _, name := range e.names {
				_, err := e.c.Lookup(name)
				require.NoError(t, err)
			}
			if e.c.Stats().RegistryDown {
				downFor += 100 * time.Millisecond
			}
		}
		t.Logf("svc-0's watch alone broken for 2 min, registry healthy: RegistryDown %d times, held down for %v of it",
			len(e.events.times(cache.RegistryDown)), downFor)
		assert.Zero(t, len(e.events.times(cache.RegistryDown)), "one service's watch is not the registry")
		assert.LessOrEqual(t, downFor, cache.DefaultProbeInterval+100*time.Millisecond, "a wrong guess costs at most a probe interval")
		e.reg.ClearFaults()
	})
}

// Two names whose keys fail (an error, not ErrNotFound) are looked up
// together every 90 s, healthy services answering in between: their
// failures count as evidence once, though their entries are dropped
// between lookups, and healthy cold lookups are not refused.
func TestBrokenColdKeysCountOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Minute))
		for i := 0; i < 10; i++ {
			require.NoError(t, e.reg.Register(faultService(fmt.Sprintf("cold-%d", i), "c")))
		}
		bad := errors.New("key unreadable")
		e.reg.SetFaultFor("bad-a", fakereg.Fault{Err: bad})
		e.reg.SetFaultFor("bad-b", fakereg.Fault{Err: bad})
		refused := 0
		for i := 0; i < 5; i++ {
			_, _ = e.c.Lookup("bad-a")
			_, _ = e.c.Lookup("bad-b")
			if _, err := e.c.Lookup(fmt.Sprintf("cold-%d", i)); err != nil {
				refused++
			}
			time.Sleep(2 * time.Second)
			_, _ = e.c.Lookup(fmt.Sprintf("cold-%d", i+5))
			time.Sleep(88 * time.Second)
		}
		downs := len(e.events.times(cache.RegistryDown))
		t.Logf("two broken cold keys looked up every 90 s for 7.5 min: RegistryDown %d times; %d of 5 healthy cold lookups refused right after", downs, refused)
		assert.LessOrEqual(t, downs, 1, "broken keys take the registry down at most once")
		assert.Zero(t, refused, "healthy cold lookups refused")
	})
}

// During a 60 s outage, Watch is accepted but each stream fails at once
// (a proxy that accepts the connection and drops it), while GetService and
// ListServices fail: a stream established while the registry is down is
// no answer until it has proven itself, so the outage is one RegistryDown
// and one line each way, about one probe a second, and no retry window is
// closed early.
func TestStreamsThatFailAtOnceDoNotFlapTheRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Second))
		logged := e.log.count()
		e.reg.SetFault(fakereg.Fault{Err: errOutage})
		e.reg.SetListFault(&fakereg.Fault{Err: errOutage})
		e.reg.SetWatchFault(fakereg.WatchFault{BreakErr: errOutage})
		e.reg.Cut()
		start := time.Now()
		assert.Zero(t, e.readAll(time.Minute, 100*time.Millisecond))
		gets, watches := e.reg.StartsSince(start)
		downs, ups := len(e.events.times(cache.RegistryDown)), len(e.events.times(cache.RegistryUp))
		lines := 0
		for _, l := range e.log.since(logged) {
			if strings.Contains(l, "regcache: registry ") {
				lines++
			}
		}
		r := e.reg.Report()
		t.Logf("60 s outage, Watch accepted but streams failing: RegistryDown %d, RegistryUp %d, %d health log lines, %d GetService, %d Watch, %d ListServices, per-service bound violations %d (first %q)",
			downs, ups, lines, len(gets), len(watches), e.reg.ListCalls(), r.Violations, r.First)
		assert.LessOrEqual(t, downs, 1, "one RegistryDown per outage")
		assert.LessOrEqual(t, lines, 2, "one line each way")
		// Once held down, about one probe a second; before that, the
		// refreshes already out when the evidence came in, each service
		// at most once (its own window: the violations below).
		var downAt time.Time
		if d := e.events.times(cache.RegistryDown); len(d) > 0 {
			downAt = d[0]
		}
		after := 0
		for _, g := range gets {
			if !downAt.IsZero() && g.After(downAt) {
				after++
			}
		}
		t.Logf("held down %v after the outage began; %d GetService before, %d after", downAt.Sub(start), len(gets)-after, after)
		assert.LessOrEqual(t, after, 61, "about one probe a second once down")
		assert.LessOrEqual(t, len(gets)-after, 10, "before the registry was held down: each of the 10 services once at most")
		assert.Zero(t, r.Violations, "at most one GetService per service per retry interval")
		assert.LessOrEqual(t, r.MaxOpen, 1, "never two streams open at once")
		e.reg.ClearFaults()
	})
}

// WithProbeInterval(1µs), the registry down with Watch failing at once:
// the redials come no closer than the backoff's first step.
func TestTinyProbeIntervalDoesNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Minute), cache.WithProbeInterval(time.Microsecond))
		e.down(false)
		for !e.c.Stats().RegistryDown {
			time.Sleep(time.Microsecond)
		}
		start := time.Now()
		time.Sleep(10 * time.Millisecond)
		gets, watches := e.reg.StartsSince(start)
		t.Logf("WithProbeInterval(1µs), down: %d Watch calls and %d GetService calls in 10 ms", len(watches), len(gets))
		assert.LessOrEqual(t, len(watches), 10, "Watch calls in 10 ms (the backoff would allow ~1)")
		e.reg.ClearFaults()
	})
}

// One resync's ListServices hangs for good, and later ones answer: the
// resyncs after it still list, once the hung one has been out a while.
func TestHungListDoesNotEndTheLists(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 20, true, cache.WithTTL(10*time.Minute))
		e.reg.SetListFault(&fakereg.Fault{Hang: true})
		resync := func() {
			streams := e.reg.Report().Streams
			e.reg.Cut()
			for e.reg.Report().Streams == streams {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(10 * time.Second) // the re-validations, under their windows
		}
		resync()
		e.reg.SetListFault(nil) // later lists answer; the hung one stays hung
		for round := 0; round < 3; round++ {
			gets, lists := e.reg.Report().TotalCalls, e.reg.ListCalls()
			resync()
			t.Logf("resync %d after the hung list: %d ListServices, %d GetService calls (20 services)", round+1, e.reg.ListCalls()-lists, e.reg.Report().TotalCalls-gets)
			assert.Equal(t, 1, e.reg.ListCalls()-lists, "one ListServices per resync")
			assert.LessOrEqual(t, e.reg.Report().TotalCalls-gets, 2, "the list settles the services")
		}
		e.reg.ClearFaults()
	})
}

// Stop while a GetService, a ListServices and a Watch (single stream, or a
// per-service watch) hang ignoring their context: Stop returns within
// 10 s, and once the calls return nothing stays open and no goroutine is
// left.
func TestStopDuringHangs(t *testing.T) {
	for _, perService := range []bool{false, true} {
		t.Run(fmt.Sprintf("perService=%v", perService), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []cache.Option{cache.WithTTL(10 * time.Second)}
				hung := ""
				if perService {
					opts = append(opts, cache.WithWatchPerService())
					hung = "svc-0"
				}
				e, spy := newSpyEnv(t, 10, opts...)
				time.Sleep(20 * time.Second) // stale
				e.reg.SetFault(fakereg.Fault{Hang: true, IgnoreCtx: true})
				e.reg.SetListFault(&fakereg.Fault{Hang: true})
				spy.hangNext(hung, 100)
				e.reg.Cut()
				e.readAll(5*time.Second, 100*time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				_, _ = e.c.GetService("cold-never", registry.GetContext(ctx))
				cancel()
				require.Positive(t, spy.hangingNow(), "a Watch hangs")
				start := time.Now()
				e.c.Stop()
				took := time.Since(start)
				t.Logf("Stop with hung GetService/ListServices/Watch: %v", took)
				assert.LessOrEqual(t, took, 10*time.Second+100*time.Millisecond)
				// The hung calls return now, late, with a watch.
				spy.releaseAll()
				e.reg.ClearFaults()
				synctest.Wait()
				time.Sleep(100 * time.Millisecond) // a watch is stopped once 100 ms old (watchset.minWatchAge)
				synctest.Wait()
				assert.Zero(t, e.reg.Report().Open, "a watch opened after Stop is stopped")
				assert.Zero(t, regcacheGoroutines(), "goroutines running cache code")
				// Reads after Stop still work, from memory.
				_, err := e.c.Lookup("svc-1")
				assert.NoError(t, err)
			})
		})
	}
}

// Under WithWatchPerService, svc-0's watch fails for good while the
// registry answers: its failure is logged and told once, naming it.
func TestPerServiceFailingWatchIsTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 3, true, cache.WithWatchPerService())
		e.reg.SetWatchFaultFor("svc-0", fakereg.WatchFault{WatchErr: errors.New("permission denied"), BreakErr: errOutage})
		e.reg.Cut()
		logged := e.log.count()
		assert.Zero(t, e.readAll(5*time.Minute, time.Second))
		lines := e.log.since(logged)
		t.Logf("svc-0's watch failing for 5 min: %q", lines)
		mention := map[string]int{}
		for _, l := range lines {
			for _, name := range e.names {
				if strings.Contains(l, "watch of service \""+name+"\" failing") {
					mention[name]++
				}
			}
		}
		assert.Equal(t, map[string]int{"svc-0": 1}, mention, "svc-0's failure logged once; the watches that reopened at once not at all")
		assert.Equal(t, 1, e.events.count(cache.WatchDisconnected, "svc-0"))
		e.reg.ClearFaults()
		time.Sleep(time.Minute)
		assert.Equal(t, 1, e.events.count(cache.WatchReconnected, "svc-0"), "and its return")
	})
}

// A ListServices that lands 3 s late, after a newer resync, after the
// registry changed and after one service was evicted and looked up again:
// no old node is served once a new one was.
func TestLateListAfterEvictionAndANewerResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(time.Minute), cache.WithIdleEviction(time.Second),
			cache.WithMinimumRetryInterval(0))
		e.reg.SetBound(0)
		e.reg.SetListFault(&fakereg.Fault{Late: 3 * time.Second})
		streams := e.reg.Report().Streams
		e.reg.Cut()
		for e.reg.Report().Streams == streams {
			time.Sleep(time.Millisecond)
		}
		synctest.Wait() // the list is out, its answer read ("old")
		for _, name := range e.names {
			e.reg.Set(name, faultService(name, "new"))
		}
		e.reg.Cut() // a newer resync, per service
		seen := map[string]bool{}
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			for i, name := range e.names {
				if i == 0 {
					continue // svc-0 left idle: evicted, then looked up again below
				}
				got, err := e.c.Lookup(name)
				require.NoError(t, err)
				ids := nodeSetOf(got)
				if seen[name] {
					require.Equal(t, []string{"new"}, ids, "%s: old node after new", name)
				} else if len(ids) == 1 && ids[0] == "new" {
					seen[name] = true
				}
			}
		}
		got, err := e.c.Lookup("svc-0")
		require.NoError(t, err)
		assert.Equal(t, []string{"new"}, nodeSetOf(got))
		assert.Len(t, seen, 9)
	})
}

// The stream blocks (as the etcd plugin's does through an outage) and
// every GetService and ListServices hangs for good. A registry that
// honours its context fails the cache's refreshes after their 10 s
// timeout, and the outage is told once. One that ignores it is never seen
// down, since nothing fails (every registry client here has a timeout of
// its own); the calls out still grow by one a second only, and every
// lookup is served.
func TestHangingRegistryIsHeldDown(t *testing.T) {
	for _, ignoreCtx := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignoreCtx=%v", ignoreCtx), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newConvEnv(t, 20, true, cache.WithTTL(10*time.Second))
				time.Sleep(20 * time.Second) // stale
				e.reg.SetWatchFault(fakereg.WatchFault{NextHang: true})
				e.reg.SetFault(fakereg.Fault{Hang: true, IgnoreCtx: ignoreCtx})
				e.reg.SetListFault(&fakereg.Fault{Hang: true})
				before := e.reg.Report().TotalCalls
				assert.Zero(t, e.readAll(2*time.Minute, 100*time.Millisecond))
				calls := e.reg.Report().TotalCalls - before
				t.Logf("registry hanging for 2 min (ignoreCtx %v): RegistryDown %d, Stats().RegistryDown=%v, %d GetService calls hanging",
					ignoreCtx, e.events.count(cache.RegistryDown, ""), e.c.Stats().RegistryDown, calls)
				if ignoreCtx {
					assert.Zero(t, e.events.count(cache.RegistryDown, ""), "nothing failed")
					assert.LessOrEqual(t, calls, 20, "one call a service at most")
				} else {
					assert.Equal(t, 1, e.events.count(cache.RegistryDown, ""), "a registry that hangs for 2 min is told as down")
				}
				e.c.Stop()
				e.reg.ClearFaults()
			})
		})
	}
}

// 50 services, single stream and per service, a 10 s outage, then the
// return: one ListServices settles them, with no GetService per service
// after it (the per-service resync waits for the watches' redials).
func TestRecoveryIsOneList(t *testing.T) {
	for _, perService := range []bool{false, true} {
		t.Run(fmt.Sprintf("perService=%v", perService), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []cache.Option{cache.WithTTL(10 * time.Minute)}
				if perService {
					opts = append(opts, cache.WithWatchPerService())
				}
				e := newConvEnv(t, 50, true, opts...)
				e.down(false)
				e.readAll(10*time.Second, 100*time.Millisecond)
				e.reg.ClearFaults()
				gets, lists := e.reg.Report().TotalCalls, e.reg.ListCalls()
				e.readAll(30*time.Second, 100*time.Millisecond)
				g, l := e.reg.Report().TotalCalls-gets, e.reg.ListCalls()-lists
				t.Logf("perService %v, 50 services, 30 s after a 10 s outage: %d ListServices, %d GetService", perService, l, g)
				assert.LessOrEqual(t, g, 5, "the list settles the services")
			})
		})
	}
}

// WithProbeInterval(0) turns the registry-wide state off: a 60 s outage
// never takes it down, the redials back off, and each service keeps its
// own retry interval.
func TestProbeIntervalZeroBacksOff(t *testing.T) {
	for _, perService := range []bool{false, true} {
		t.Run(fmt.Sprintf("perService=%v", perService), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []cache.Option{cache.WithTTL(10 * time.Second), cache.WithProbeInterval(0)}
				if perService {
					opts = append(opts, cache.WithWatchPerService())
				}
				e := newConvEnv(t, 3, true, opts...)
				e.down(false)
				start := time.Now()
				assert.Zero(t, e.readAll(time.Minute, 100*time.Millisecond))
				_, watches := e.reg.StartsSince(start)
				r := e.reg.Report()
				t.Logf("ProbeInterval(0), 60 s down: %d Watch calls, RegistryDown %d, violations %d", len(watches), e.events.count(cache.RegistryDown, ""), r.Violations)
				assert.Zero(t, e.events.count(cache.RegistryDown, ""))
				assert.LessOrEqual(t, len(watches), 3*15, "backed off, a few a minute for each")
				assert.Zero(t, r.Violations, "%v", r.First)
				e.reg.ClearFaults()
				e.readAll(10*time.Second, 100*time.Millisecond)
				assert.LessOrEqual(t, e.reg.Report().MaxOpen, 3)
			})
		})
	}
}

// GetService, ListServices, Watch, Next and Stop all panic for 60 s,
// single stream and per service: no crash, no failed lookup of a cached
// service, one RegistryDown, and the cache converges once the panics end.
func TestPanicsEverywhere(t *testing.T) {
	for _, perService := range []bool{false, true} {
		t.Run(fmt.Sprintf("perService=%v", perService), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []cache.Option{cache.WithTTL(10 * time.Second)}
				if perService {
					opts = append(opts, cache.WithWatchPerService())
				}
				e := newConvEnv(t, 10, true, opts...)
				e.reg.SetFault(fakereg.Fault{Panic: "boom"})
				e.reg.SetListFault(&fakereg.Fault{Panic: "boom"})
				e.reg.SetWatchFault(fakereg.WatchFault{WatchPanic: "boom", NextPanic: "boom", StopPanic: "boom"})
				require.NoError(t, e.reg.Register(faultService("svc-0", "wake")))
				assert.Zero(t, e.readAll(time.Minute, 100*time.Millisecond))
				assert.Equal(t, 1, e.events.count(cache.RegistryDown, ""))
				for _, name := range e.names {
					e.reg.Set(name, faultService(name, "new"))
				}
				e.reg.ClearFaults()
				e.untilCurrent("new", 15*time.Second)
				r := e.reg.Report()
				assert.Zero(t, r.Violations, "%v", r.First)
				if !perService {
					assert.LessOrEqual(t, r.MaxOpen, 1)
				}
			})
		})
	}
}

// lockProbeReg is a registry whose String() checks whether the cache's
// lock is free, by asking for c.Stats() (which takes it) from another
// goroutine.
type lockProbeReg struct {
	registry.Registry
	mu     sync.Mutex
	c      cache.Cache
	armed  bool
	held   int
	called int
}

func (r *lockProbeReg) String() string {
	r.mu.Lock()
	c, armed := r.c, r.armed
	r.mu.Unlock()
	if armed && c != nil {
		done := make(chan struct{})
		go func() {
			c.Stats()
			close(done)
		}()
		held := false
		select {
		case <-done:
		case <-time.After(200 * time.Millisecond):
			held = true
		}
		r.mu.Lock()
		r.called++
		if held {
			r.held++
		}
		r.mu.Unlock()
		// Not waiting for done: with the lock held by our caller, that
		// would deadlock. It ends once the caller unlocks.
	}
	return "lockprobe"
}

// The log lines of the registry's health name it with its String(),
// which is not called with the cache's lock held: a String() that blocks
// or calls back into the cache would stall every slow-path lookup. Real
// time: no bubble, since a goroutine blocked on a mutex never lets fake
// time move.
func TestRegistryStringIsNotCalledUnderTheLock(t *testing.T) {
	checkNoLeak(t)
	f := fakereg.New()
	f.SetFault(fakereg.Fault{Err: errOutage})
	f.SetWatchFault(fakereg.WatchFault{WatchErr: errOutage}) // so that no stream answers between the two failures
	r := &lockProbeReg{Registry: f}
	c := cache.New(r, cache.WithLogger(&lineLogger{}))
	defer c.Stop()
	r.mu.Lock()
	r.c, r.armed = c, true
	r.mu.Unlock()
	_, _ = c.Lookup("a") // fails: a suspect
	_, _ = c.Lookup("b") // fails: the registry goes down, told with String()
	for i := 0; i < 100 && !c.Stats().RegistryDown; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	require.True(t, c.Stats().RegistryDown)
	time.Sleep(300 * time.Millisecond) // the String() check has run
	r.mu.Lock()
	r.armed = false
	called, held := r.called, r.held
	r.mu.Unlock()
	t.Logf("String() called %d times while going down, %d of them with the cache's lock held", called, held)
	assert.Zero(t, held, "String() called with the cache's lock held")
}
