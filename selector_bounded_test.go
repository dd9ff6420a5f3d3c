package cache_test

import (
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// Passive health state stays bounded: the sweep forgets idle state (but not
// a trial of a service in use), and the states of nodes off the list are
// capped.

// A node whose ejection ended long ago and that no caller has tried since
// is still on trial when the sweep of idle state runs: one caller at a time
// gets it, its first failure ejects it again. Forgotten, it would go to
// every caller at once and take 3 failures to eject.
func TestTheSweepKeepsANodeOnTrial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sel := newHealthSim(t, 4, cache.WithEjectionTime(time.Second, 10*time.Second)).sel
		failN(t, sel, listedNode("n4"), 3)
		require.Equal(t, []string{"n4"}, ejectedIDs(selStats(t, sel)))
		time.Sleep(time.Minute)            // the ejection is long over; nobody called
		failN(t, sel, listedNode("n1"), 1) // a failure Mark sweeps idle state
		got := 0
		var trial *registry.Node
		for call := 0; call < 100; call++ {
			next, err := sel.Select("svc")
			require.NoError(t, err)
			n, err := next()
			require.NoError(t, err)
			if n.Id == "n4" {
				got++
				trial = n
			}
		}
		require.Equal(t, 1, got, "first picks of n4 with its trial out")
		sel.Mark("svc", trial, errRefused)
		assert.Equal(t, []string{"n4"}, ejectedIDs(selStats(t, sel)), "ejected again by the trial's one failure")
	})
}

// One failed client.WithAddress call each to many services (a prober, a
// fan-out to per-tenant services): each target is ejected, off the list,
// on trial. No Next ever picks it (go-micro's client makes no Select for
// such a call), so only another call to it could end its trial. Long after,
// a failure sweeps idle state: the state of a service that no Select uses
// is forgotten, nodes on trial or not.
//
// Regression: the sweep kept it, and every service called once kept its
// state for good: the heap grew with the services ever called.
func TestTheSweepForgetsServicesNeverCalledAgain(t *testing.T) {
	// ejectAfter 1: each failure ejects, and the node is on trial once
	// its ejection ends. ejectAfter 2 (the control): the same failures
	// leave failing state only, which the sweep forgets.
	heap := func(services, ejectAfter int) int64 {
		var grew int64
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3, cache.WithEjectAfter(ejectAfter), cache.WithEjectionTime(time.Second, 2*time.Second))
			_, err := s.sel.Select("svc")
			require.NoError(t, err)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := 0; i < services; i++ {
				s.sel.Mark(fmt.Sprintf("tenant-%d", i), withAddressNode(fmt.Sprintf("10.3.%d.%d:8080", i/250, i%250)), errRefused)
			}
			time.Sleep(time.Minute) // every ejection over 58 s ago; nobody calls
			failN(t, s.sel, listedNode("n1"), 1)
			time.Sleep(2 * time.Second)
			failN(t, s.sel, listedNode("n2"), 1) // a second sweep, to be sure
			runtime.GC()
			runtime.ReadMemStats(&after)
			grew = int64(after.HeapAlloc) - int64(before.HeapAlloc)
			runtime.KeepAlive(s)
		})
		return grew
	}
	control := heap(20_000, 2)
	small, big := heap(200, 1), heap(20_000, 1)
	t.Logf("heap kept a minute after one failure each of 200 services: %d B, of 20 000: %d B; control (failing, not ejected), 20 000: %d B", small, big, control)
	assert.Less(t, control, int64(1<<20), "control: failing state is swept")
	assert.Less(t, big, small+1<<20, "idle state of services never called again is kept for good (unbounded)")
}

// A listed service's node is ejected, the whole service is deregistered,
// and nobody calls it again. Its state, on trial, is never matched against
// a list again (the cache holds none), so it stays listed and on trial; the
// second sweep after its last Select forgets it. Measured through the heap
// across many such services.
//
// Regression: the sweep kept it for good.
func TestTheSweepForgetsTheTrialsOfADeregisteredService(t *testing.T) {
	heap := func(services, ejectAfter int) int64 {
		var grew int64
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3, cache.WithEjectAfter(ejectAfter), cache.WithEjectionTime(time.Second, 2*time.Second))
			_, err := s.sel.Select("svc")
			require.NoError(t, err)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := 0; i < services; i++ {
				svc := selService("1", "x1", "x2")
				svc.Name = fmt.Sprintf("job-%d", i)
				putVersion(s.reg, svc)
				_, err := s.sel.Select(svc.Name)
				require.NoError(t, err)
				s.sel.Mark(svc.Name, svc.Nodes[0], errRefused) // ejected
				s.reg.Delete(svc.Name)
				s.event("delete", svc) // deregistered
			}
			time.Sleep(time.Minute)
			failN(t, s.sel, listedNode("n1"), 1)
			time.Sleep(2 * time.Second)
			failN(t, s.sel, listedNode("n2"), 1)
			runtime.GC()
			runtime.ReadMemStats(&after)
			grew = int64(after.HeapAlloc) - int64(before.HeapAlloc)
			runtime.KeepAlive(s)
		})
		return grew
	}
	// The control, ejectAfter 2, leaves failing state only: whatever it
	// keeps is the cache's (and the fake registry's record of its calls,
	// about 230 B a service), not the trials'.
	control := heap(5_000, 2)
	big := heap(5_000, 1)
	t.Logf("heap kept a minute after an ejection in each of 5 000 deregistered services: %d B; control (failing, not ejected): %d B", big, control)
	assert.Less(t, big, control+1<<20, "state of deregistered services is kept for good (unbounded)")
}

// A node whose address flips on every registration, with a failure of its
// old address in flight each time, and an Id failing at ever-new addresses
// off the list, keep the state of a service bounded: the heap does not grow
// with the number of addresses.
func TestOneIdAtEverNewAddressesStaysBounded(t *testing.T) {
	heap := func(addresses int) int64 {
		var grew int64
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3, cache.WithEjectionTime(time.Hour, time.Hour))
			_, err := s.sel.Select("svc")
			require.NoError(t, err)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := 0; i < addresses; i++ {
				s.sel.Mark("svc", &registry.Node{Id: "n3", Address: fmt.Sprintf("10.2.%d.%d:%d", i/60000, (i/250)%240, 1000+i%250)}, errRefused)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			grew = int64(after.HeapAlloc) - int64(before.HeapAlloc)
			runtime.KeepAlive(s)
		})
		return grew
	}
	small, big := heap(500), heap(50_000)
	t.Logf("heap kept after failures of one Id at 500 addresses: %d B, at 50 000: %d B", small, big)
	assert.Less(t, big, small+2<<20, "state grows with the addresses of one Id (unbounded, 50 000 states would keep over 7 MB)")
}

// Off-list failures are kept bounded: many node ids that are not listed
// and fail (client.WithAddress calls to ever new addresses, say) keep at
// most a bounded amount of state, and never crowd the listed nodes out of
// the ejection share.
//
// Regression: every off-list id kept its state until the sweep, 2 min after
// its last failure, however many there were.
func TestOffListFailuresUseBoundedMemory(t *testing.T) {
	const (
		ids   = 50_000
		limit = 1 << 20 // bytes of heap left after the failures of every id
	)
	checkNoLeak(t)
	r := newReg(selService("1", "n1", "n2"))
	c := cache.New(r, cache.WithLogger(benchLogger))
	defer c.Stop()
	sel := cache.NewSelector(c, cache.WithEjectionTime(time.Hour, time.Hour))
	_, err := sel.Select("svc")
	require.NoError(t, err)

	addrs := make([]*registry.Node, ids)
	for i := range addrs {
		addrs[i] = withAddressNode(fmt.Sprintf("10.%d.%d.%d:8080", i>>16, (i>>8)&255, i&255))
	}
	retained := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	base := retained()
	done := 0
	var grown int64
	for done < ids {
		for end := done + 1000; done < end; done++ {
			for k := 0; k < 3; k++ {
				sel.Mark("svc", addrs[done], errRefused)
			}
		}
		// Stop at the first batch over the limit: today's code takes
		// time quadratic in the ids.
		if grown = retained() - base; grown > limit {
			break
		}
	}
	runtime.KeepAlive(addrs)
	assert.LessOrEqual(t, grown, int64(limit),
		"heap kept after %d off-list node ids failed 3 times each: %.1f MB (%d bytes an id); want it bounded, at most %d MB",
		done, float64(grown)/(1<<20), grown/int64(done), limit>>20)

	st := selStats(t, sel)
	assert.LessOrEqual(t, len(st.Ejected), 2, "rows of Ejected: no more than the listed nodes, whatever the off-list failures")

	// The listed nodes keep their share: n2, dead, is ejected.
	failN(t, sel, listedNode("n2"), 3)
	st = selStats(t, sel)
	assert.Contains(t, ejectedIDs(st), "n2", "after %d off-list failing ids, n2 failed 3 times; Ejected %s", done, ejectedRows(st))
}
