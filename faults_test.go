package cache_test

import (
	"errors"
	"fmt"
	"sort"
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

// The fault tests put a cache in front of the fake registry
// (internal/fakereg) and inject one fault at a time. Each test runs in a testing/synctest
// bubble: time is fake, so ten minutes of outage take milliseconds, a
// lookup that waits for the registry shows up as fake time passing, and the
// bubble fails the test if a goroutine outlives it. Each shows that the
// cache keeps three promises under its fault:
//
//   - no caller error while the service has data, stale or not, and no
//     caller waiting for the registry either;
//   - for each service, registry calls never overlap and are at least
//     MinimumRetryInterval apart (end of one to start of the next), so that
//     in any period of length T there are at most 1 + T/interval of them.
//     Re-validations after a reconnect or a recovery go through the same
//     per-service throttle, so they add nothing to the bound;
//   - no goroutine growth: the cache runs its watcher, its maintainer and
//     at most one refresh per service, however long the fault lasts, and
//     none of them outlives Stop.

const (
	faultTTL      = 30 * time.Second
	faultInterval = 5 * time.Second
	// faultOutage is how long each fault lasts, in fake time.
	faultOutage = 10 * time.Minute
)

var errFaultDown = errors.New("fault registry: connection refused")

// faultEnv is a cache over the fake registry, holding services
// svc-0 … svc-<n-1>, each with nodes a and b, all cached.
type faultEnv struct {
	t     *testing.T
	reg   *fakereg.Registry
	c     cache.Cache
	names []string
	start time.Time
	// maxOwned is the most goroutines the cache owned at any check.
	maxOwned int
}

func faultService(name string, ids ...string) *registry.Service {
	s := &registry.Service{Name: name, Version: "1", Metadata: map[string]string{"team": "faults"}}
	for _, id := range ids {
		s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: id + ":8080", Metadata: map[string]string{"zone": "a"}})
	}
	return s
}

// nodeSet is the ids of every node of name in r, sorted, read without a
// registry call.
func nodeSet(r *fakereg.Registry, name string) []string {
	return nodeSetOf(r.Held(name))
}

// nodeSetOf is the ids of every node of svcs, sorted.
func nodeSetOf(svcs []*registry.Service) []string {
	ids := []string{}
	for _, s := range svcs {
		if s == nil {
			continue
		}
		for _, n := range s.Nodes {
			if n != nil {
				ids = append(ids, n.Id)
			}
		}
	}
	sort.Strings(ids)
	return ids
}

// newFaultEnv must be called inside a bubble.
func newFaultEnv(t *testing.T, services int, opts ...cache.Option) *faultEnv {
	t.Helper()
	e := &faultEnv{t: t, reg: fakereg.New(), start: time.Now()}
	e.reg.SetBound(faultInterval)
	for i := 0; i < services; i++ {
		name := fmt.Sprintf("svc-%d", i)
		e.names = append(e.names, name)
		require.NoError(t, e.reg.Register(faultService(name, "a", "b")))
	}
	base := []cache.Option{
		cache.WithTTL(faultTTL), cache.WithMinimumRetryInterval(faultInterval), cache.WithLogger(benchLogger),
	}
	e.c = cache.New(e.reg, append(base, opts...)...)
	t.Cleanup(e.c.Stop) // after a failure too, so that the bubble ends
	for _, name := range e.names {
		_, err := e.c.Lookup(name)
		require.NoError(t, err)
	}
	synctest.Wait()
	return e
}

// readStats is what the readers saw.
type readStats struct {
	lookups int
	errs    int
	err     error // the first
	// waited is the longest a lookup took, in fake time: any time at all
	// means that the caller waited for the registry.
	waited time.Duration
}

// read starts readers that look every service up, alternating Lookup and
// GetService, every period until stop is called. Every service has data,
// so every lookup must succeed at once.
func (e *faultEnv) read(readers int, period time.Duration) (stop func() readStats) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		all  readStats
		done = make(chan struct{})
	)
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s readStats
			defer func() {
				mu.Lock()
				all.lookups += s.lookups
				all.errs += s.errs
				if all.err == nil {
					all.err = s.err
				}
				all.waited = max(all.waited, s.waited)
				mu.Unlock()
			}()
			for i := 0; ; i++ {
				for _, name := range e.names {
					start := time.Now()
					var err error
					if (i+r)%2 == 0 {
						_, err = e.c.Lookup(name)
					} else {
						_, err = e.c.GetService(name)
					}
					s.lookups++
					s.waited = max(s.waited, time.Since(start))
					if err != nil {
						s.errs++
						if s.err == nil {
							s.err = fmt.Errorf("%v into the test: %w", time.Since(e.start), err)
						}
					}
				}
				select {
				case <-done:
					return
				case <-time.After(period):
				}
			}
		}()
	}
	return func() readStats {
		close(done)
		wg.Wait()
		return all
	}
}

// hold lets d of fake time pass, checking every minute that the cache's
// goroutines do not grow.
func (e *faultEnv) hold(d time.Duration) {
	e.t.Helper()
	for d > 0 {
		step := min(d, time.Minute)
		time.Sleep(step)
		d -= step
		e.checkGoroutines()
	}
}

// checkGoroutines checks that the cache owns at most its watcher, its
// maintainer, its observer and one refresh per service.
func (e *faultEnv) checkGoroutines() {
	e.t.Helper()
	n := cacheOwnedGoroutines()
	e.maxOwned = max(e.maxOwned, n)
	assert.LessOrEqual(e.t, n, 3+len(e.names), "goroutines owned by the cache, %v into the test", time.Since(e.start))
}

// checkReads checks that readers saw no error and never waited.
func (e *faultEnv) checkReads(s readStats) {
	e.t.Helper()
	assert.NotZero(e.t, s.lookups)
	assert.Zero(e.t, s.errs, "lookups that failed while the service had data, of %d; the first: %v", s.lookups, s.err)
	assert.Zero(e.t, s.waited, "the longest a lookup of a service with data waited for the registry")
}

// converge waits, up to within, until every service's cached nodes are
// the registry's, and fails the test if they never are.
func (e *faultEnv) converge(within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok := true
		for _, name := range e.names {
			svcs, err := e.c.Lookup(name)
			if err != nil || fmt.Sprint(nodeSetOf(svcs)) != fmt.Sprint(nodeSet(e.reg, name)) {
				ok = false
				if !time.Now().Before(deadline) {
					e.t.Errorf("service %q: cached %v (err %v), registry %v, %v after the fault ended",
						name, nodeSetOf(svcs), err, nodeSet(e.reg, name), within)
				}
			}
		}
		if ok || !time.Now().Before(deadline) {
			return
		}
		time.Sleep(time.Second)
	}
}

// finish checks the call bound over the whole test, stops the cache and
// checks that none of its goroutines is left.
func (e *faultEnv) finish() {
	e.t.Helper()
	e.checkGoroutines()
	e.reg.CheckBound(e.t, time.Since(e.start))
	e.c.Stop()
	synctest.Wait()
	assert.Zero(e.t, regcacheGoroutines(), "goroutines running cache code after Stop")
	r := e.reg.Report()
	e.t.Logf("%v: %d registry calls (at most %d for one service), %d Watch calls, %d streams; at most %d goroutines owned by the cache",
		time.Since(e.start), r.TotalCalls, r.MaxCalls, r.Watches, r.Streams, e.maxOwned)
}

// TestFaultRegistryCalls injects each GetService fault for ten minutes, with
// the registry changing meanwhile, then clears it.
func TestFaultRegistryCalls(t *testing.T) {
	tests := []struct {
		name  string
		fault fakereg.Fault
		fails bool // every registry call fails
	}{
		// Latency below the interval, then far beyond the TTL.
		{"latency 2s", fakereg.Fault{Latency: 2 * time.Second}, false},
		{"latency 2m", fakereg.Fault{Latency: 2 * time.Minute}, false},
		{"errors", fakereg.Fault{Err: errFaultDown}, true},
		{"panics", fakereg.Fault{Panic: "registry client bug"}, true},
		// A hang that ends when the cache gives up (Stop) or the caller's
		// context is done.
		{"hangs, honouring the context", fakereg.Fault{Hang: true}, true},
		// A hang that outlasts everything, as go-micro's etcd plugin,
		// which ignores the caller's context, does for its own timeout.
		{"hangs, ignoring the context", fakereg.Fault{Hang: true, IgnoreCtx: true}, true},
		{"nil entries in answers", fakereg.Fault{NilEntries: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newFaultEnv(t, 4)
				stop := e.read(4, time.Second)
				e.reg.SetFault(tt.fault)
				// Changes the watcher delivers, which must not wait for
				// the registry to recover.
				time.Sleep(time.Second)
				require.NoError(t, e.reg.Register(faultService("svc-0", "c")))
				require.NoError(t, e.reg.Deregister(faultService("svc-1", "a")))
				synctest.Wait()
				svcs, err := e.c.Lookup("svc-0")
				require.NoError(t, err)
				assert.Equal(t, []string{"a", "b", "c"}, nodeSetOf(svcs))
				svcs, err = e.c.Lookup("svc-1")
				require.NoError(t, err)
				assert.Equal(t, []string{"b"}, nodeSetOf(svcs))

				calls := e.reg.Report().TotalCalls
				e.hold(faultOutage)
				e.checkReads(stop())
				assert.Greater(t, e.reg.Report().TotalCalls, calls, "the data was never refreshed")

				e.reg.ClearFaults()
				// The calls still hanging return now, failing. Without
				// the wait, the checks below could run before they land:
				// the events have made every service current already, so
				// converge may return without letting time pass.
				synctest.Wait()
				stop = e.read(4, time.Second)
				e.converge(faultTTL + faultInterval)
				e.checkReads(stop())
				if tt.fails {
					assert.NotZero(t, e.c.Stats().RefreshErrors, "the fault never reached the cache")
				}
				for _, name := range e.names {
					svcs, err := e.c.GetService(name)
					require.NoError(t, err)
					assert.Equal(t, nodeSet(e.reg, name), nodeSetOf(svcs), name)
				}
				e.finish()
			})
		})
	}
}

// churn changes the registry every period until stop is called: it adds a
// node to one service, then removes it, round robin over the services, so
// that the watch stream carries events throughout. Nodes a and b are never
// touched, so no service ever lacks nodes.
func (e *faultEnv) churn(period time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(period):
			}
			name := e.names[(i/2)%len(e.names)]
			node := faultService(name, fmt.Sprintf("churn-%d", i/2))
			if i%2 == 0 {
				_ = e.reg.Register(node)
			} else {
				_ = e.reg.Deregister(node)
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// TestFaultWatchStreams injects each fault of Watch and of the stream for
// ten minutes while the registry keeps changing. Every row also breaks the
// stream that is open when the fault starts, so that the cache has to
// reconnect through the fault.
func TestFaultWatchStreams(t *testing.T) {
	tests := []struct {
		name  string
		fault fakereg.WatchFault
	}{
		{"Watch fails", fakereg.WatchFault{WatchErr: errFaultDown}},
		{"Watch panics", fakereg.WatchFault{WatchPanic: "watch: nil pointer dereference"}},
		{"Watch returns a nil watcher", fakereg.WatchFault{WatchNil: true}},
		{"Watch hangs", fakereg.WatchFault{WatchHang: true}},
		{"streams break at once", fakereg.WatchFault{}},
		{"streams break after 3 events", fakereg.WatchFault{BreakAfter: 3}},
		{"Next panics", fakereg.WatchFault{NextPanic: "next: nil pointer dereference"}},
		// go-micro's etcd plugin blocks in Next through an etcd outage
		// instead of failing: the stream is silently dead.
		{"Next hangs", fakereg.WatchFault{NextHang: true}},
		{"Stop panics", fakereg.WatchFault{BreakAfter: 1, StopPanic: "close of closed channel"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newFaultEnv(t, 4)
				readers := e.read(4, time.Second)
				fault := tt.fault
				if !fault.NextHang && fault.NextPanic == nil {
					fault.BreakErr = errFaultDown
				}
				e.reg.SetWatchFault(fault)
				churn := e.churn(10 * time.Second)
				e.hold(faultOutage)
				churn()
				e.checkReads(readers())
				r := e.reg.Report()
				// Reconnects back off exponentially up to 30 s with full
				// jitter: about 50 attempts in ten minutes.
				assert.LessOrEqual(t, r.Watches, 200, "Watch calls in %v", faultOutage)
				switch {
				case fault.NextHang:
					// The first stream never fails: it is silently dead.
				case fault.WatchHang:
					// A Watch out for a second no longer holds the
					// redials back, and at most four are out at once.
					assert.Equal(t, 1+4, r.Watches, "Watch calls: the first, and the four hanging since")
				default:
					assert.GreaterOrEqual(t, r.Watches, 5, "Watch calls: the fault did not break the stream")
				}

				e.reg.ClearFaults()
				readers = e.read(4, time.Second)
				e.converge(faultTTL + faultInterval)
				// The stream is back within the backoff cap, and events
				// reach the cache again.
				deadline := time.Now().Add(time.Minute)
				for e.reg.Report().Open != 1 && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
				}
				require.NoError(t, e.reg.Register(faultService("svc-2", "after")))
				synctest.Wait()
				svcs, err := e.c.Lookup("svc-2")
				require.NoError(t, err)
				assert.Contains(t, nodeSetOf(svcs), "after", "an event after the fault ended")
				e.checkReads(readers())
				e.finish()
			})
		})
	}
}

// TestFaultEvents injects each event fault for two minutes while the
// registry keeps changing. Events can make the cached data wrong (a stale
// create brings back a node deleted since), but an event never extends an
// expiry, so the data is right again within a TTL and an interval, and an
// event that cannot be applied only makes the entry stale: the next reader
// refreshes it, under the throttle.
func TestFaultEvents(t *testing.T) {
	tests := []struct {
		name  string
		fault fakereg.WatchFault
		// churn is how often the registry changes.
		churn time.Duration
		// wrong says whether the first change, a node x added to svc-0 and
		// removed at once, leaves x in the cache.
		wrong bool
	}{
		{"duplicates", fakereg.WatchFault{Duplicate: 2}, time.Second, false},
		// Each pair of events comes in reverse: the delete of x, then
		// its create.
		{"out of order", fakereg.WatchFault{Reorder: 2}, time.Second, true},
		// After each event comes the one before it again: the create of x
		// after its delete.
		{"stale", fakereg.WatchFault{Stale: 1}, time.Second, true},
		// Before each event: (nil, nil), a nil Service, nil Nodes, nil
		// node entries, an empty service name and an unknown action, at
		// ten changes a second: a flood of events that invalidate.
		{"nil Service and nil Nodes", fakereg.WatchFault{NilEvents: true}, 100 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newFaultEnv(t, 4)
				readers := e.read(4, time.Second)
				e.reg.SetWatchFault(tt.fault)
				calls := e.reg.Report().TotalCalls

				require.NoError(t, e.reg.Register(faultService("svc-0", "x")))
				require.NoError(t, e.reg.Deregister(faultService("svc-0", "x")))
				synctest.Wait()
				svcs, err := e.c.Lookup("svc-0")
				require.NoError(t, err)
				if tt.wrong {
					assert.Contains(t, nodeSetOf(svcs), "x", "the fault did not reach the cache")
				} else {
					assert.Equal(t, nodeSet(e.reg, "svc-0"), nodeSetOf(svcs))
				}

				churn := e.churn(tt.churn)
				e.hold(2 * time.Minute)
				churn()
				e.checkReads(readers())
				st := e.c.Stats()
				assert.NotZero(t, st.EventsApplied)
				if tt.fault.NilEvents {
					assert.NotZero(t, st.EventsInvalidating)
					assert.NotZero(t, st.EventsIgnored)
					// Invalidated entries are refreshed by readers, once
					// per interval at most.
					assert.Greater(t, e.reg.Report().TotalCalls, calls)
				}

				e.reg.ClearFaults()
				readers = e.read(4, time.Second)
				e.converge(faultTTL + faultInterval)
				e.checkReads(readers())
				e.finish()
			})
		})
	}
}

// TestFaultStopReturnsWhileWatchHangs: Stop must return while the watcher
// is reconnecting through a Watch that hangs, at least when the registry
// honours the context that registry.WatchContext gives it, as
// GetService's hang is ended by registry.GetContext.
func TestFaultStopReturnsWhileWatchHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t, 1)
		e.reg.SetWatchFault(fakereg.WatchFault{WatchHang: true, BreakErr: errFaultDown})
		require.NoError(t, e.reg.Register(faultService("svc-0", "c"))) // wakes the stream, which breaks
		time.Sleep(time.Minute)
		require.Equal(t, 1+4, e.reg.Report().Watches, "the watcher waits for one of its four hanging Watch calls")

		stopped := make(chan struct{})
		go func() {
			e.c.Stop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(time.Hour):
			t.Errorf("Stop has not returned after an hour: the watcher is stuck in the registry's Watch, " +
				"which the cache calls with no context (registry.WatchContext) that Stop could cancel")
			e.reg.ReleaseHangs()
			<-stopped
		}
		synctest.Wait()
		assert.Zero(t, regcacheGoroutines())
	})
}

// TestFaultIdleEvictionKeepsTheRetryInterval breaks the watch stream a few
// seconds before an idle service is evicted, so that the reconnect
// re-validates it just before, then looks the service up again as soon as
// it is gone. Its registry calls must still be an interval apart:
// MinimumRetryInterval is "the shortest time between two refresh attempts
// for one service, whatever their outcome".
func TestFaultIdleEvictionKeepsTheRetryInterval(t *testing.T) {
	const idle = time.Minute
	// evicted waits until svc-0 is evicted and returns when that was.
	evicted := func(e *faultEnv) time.Duration {
		deadline := time.Now().Add(5 * idle)
		for e.c.Stats().Entries > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		require.Zero(e.t, e.c.Stats().Entries, "svc-0 was never evicted")
		return time.Since(e.start)
	}
	// The maintainer's schedule is deterministic in fake time: learn when
	// the eviction happens when nothing else does, then break the stream
	// 3 s before that.
	var at time.Duration
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t, 1, cache.WithIdleEviction(idle))
		at = evicted(e)
		e.finish()
	})
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t, 1, cache.WithIdleEviction(idle))
		time.Sleep(at - 3*time.Second - time.Since(e.start))
		e.reg.SetWatchFault(fakereg.WatchFault{BreakErr: errFaultDown})
		require.NoError(t, e.reg.Register(faultService("other", "o"))) // wakes the stream, which breaks
		synctest.Wait()
		e.reg.ClearFaults() // the reconnect, within 100 ms, succeeds
		time.Sleep(time.Second)
		require.Equal(t, 2, e.reg.Report().Streams, "the stream did not reconnect")
		calls := e.reg.Calls("svc-0")

		t.Logf("evicted %v into the test", evicted(e))
		_, err := e.c.Lookup("svc-0")
		require.NoError(t, err)
		require.Equal(t, calls+1, e.reg.Calls("svc-0"))
		e.finish()
	})
}

// TestFaultTenThousandNodes serves a service of 10 000 nodes through ten
// minutes of registry errors, with single-node events and an event that
// names every node.
func TestFaultTenThousandNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newFaultEnv(t, 2)
		big := faultService("big")
		for i := 0; i < 10000; i++ {
			big.Nodes = append(big.Nodes, &registry.Node{
				Id: fmt.Sprintf("big-%05d", i), Address: fmt.Sprintf("10.1.%d.%d:8080", i/250, i%250),
				Metadata: map[string]string{"zone": "a"},
			})
		}
		require.NoError(t, e.reg.Register(big))
		e.names = append(e.names, "big")
		svcs, err := e.c.GetService("big")
		require.NoError(t, err)
		require.Len(t, nodeSetOf(svcs), 10000)
		svcs[0].Nodes = svcs[0].Nodes[:1] // the caller's copy
		synctest.Wait()

		readers := e.read(2, 30*time.Second)
		e.reg.SetFault(fakereg.Fault{Err: errFaultDown})
		require.NoError(t, e.reg.Register(faultService("big", "new")))
		require.NoError(t, e.reg.Deregister(faultService("big", "big-00005")))
		synctest.Wait()
		shared, err := e.c.Lookup("big")
		require.NoError(t, err)
		assert.Equal(t, nodeSet(e.reg, "big"), nodeSetOf(shared))

		// A registry that sends the whole service in each event.
		big.Nodes[0].Address = "moved:1"
		require.NoError(t, e.reg.Register(big))
		synctest.Wait()
		svcs, err = e.c.GetService("big")
		require.NoError(t, err)
		assert.Equal(t, nodeSet(e.reg, "big"), nodeSetOf(svcs))
		assert.Equal(t, "moved:1", svcs[0].Nodes[0].Address)
		assert.Len(t, nodeSetOf(shared), 10000, "a snapshot a reader holds never changes")

		e.hold(faultOutage)
		e.checkReads(readers())
		e.reg.ClearFaults()
		readers = e.read(2, 30*time.Second)
		e.converge(faultTTL + faultInterval)
		e.checkReads(readers())
		e.finish()
	})
}

// TestFaultWholeServiceEventCostIsLinear applies an update event that names
// every node of a service, as registries that send the whole service in
// each event do, at two sizes ten times apart. The cache applies events
// holding its mutex, which every lookup that is not a fresh hit, every
// refresh and the maintainer need, so the cost must grow with the number of
// nodes, not with its square: at 10 000 nodes a quadratic merge holds the
// mutex for about 130 ms per event (700 ms under -race), and a refresh of
// the service replays up to 256 such events under it.
//
// This test reads the clock, but only compares two measurements of the
// same run, each the best of five: a linear merge makes the ratio about
// 10, a quadratic one about 100.
func TestFaultWholeServiceEventCostIsLinear(t *testing.T) {
	checkNoLeak(t)
	bigService := func(n int) *registry.Service {
		s := &registry.Service{Name: "big", Version: "1"}
		for i := 0; i < n; i++ {
			s.Nodes = append(s.Nodes, &registry.Node{
				Id: fmt.Sprintf("big-%06d", i), Address: "10.0.0.1:8080", Metadata: map[string]string{"zone": "a"},
			})
		}
		return s
	}
	// apply returns the best of five CPU times to apply 20 whole-service
	// update events to a cached service of n nodes: one event at 300
	// nodes takes about the timer's resolution, and a single one made the
	// ratio noise on a loaded machine. The events go through benchReg's
	// bare channel: the fake registry's streams would add their own cost
	// to each event measured.
	apply := func(n int) time.Duration {
		r := newBenchReg(bigService(n))
		c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
		defer c.Stop()
		_, err := c.Lookup("big")
		require.NoError(t, err)
		benchBarrier(r)
		best := time.Duration(1<<63 - 1)
		for i := 0; i < 5; i++ {
			evs := make([]*registry.Result, 20)
			for j := range evs {
				evs[j] = &registry.Result{Action: "update", Service: bigService(n)}
			}
			start := cpuTime()
			for _, ev := range evs {
				r.events <- ev
			}
			benchBarrier(r)
			best = min(best, cpuTime()-start)
		}
		svcs, err := c.Lookup("big")
		require.NoError(t, err)
		require.Len(t, svcs[0].Nodes, n)
		return best
	}
	small, large := apply(300), apply(3000)
	ratio := float64(large) / float64(small)
	t.Logf("20 whole-service update events: %v at 300 nodes, %v at 3000 nodes: %.0f×", small, large, ratio)
	// The two sizes take different paths, both linear: at 300 nodes the
	// event repeats the data and is told by prints; at 3 000, past the
	// nodes that prints cover, it is copied and merged by index. So the
	// ratio of linear costs is 20 to 40 here, and a merge that compared
	// every pair of nodes would be 100× or more.
	assert.Less(t, ratio, 60.0, "applying an event of 10× the nodes to a service of 10× the nodes took %.0f× as long", ratio)
}
