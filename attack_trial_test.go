//go:build go1.25

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
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// Attacks, through the public API, on two rules: a trial goes to a Next's
// first pick, or to a retry only when nothing else may be picked; and the
// sweep of idle state keeps a node on trial while its service is in use.
// The comments say what the first version of the rules got wrong.

// orderedOnce is a custom strategy that tries each node once per call, in
// list order, then has nothing more to offer: a "never retry the same
// node" strategy.
func orderedOnce(svcs []*registry.Service) selector.Next {
	var nodes []*registry.Node
	for _, s := range svcs {
		nodes = append(nodes, s.Nodes...)
	}
	i := 0
	return func() (*registry.Node, error) {
		if i >= len(nodes) {
			return nil, selector.ErrNoneAvailable
		}
		i++
		return nodes[i-1], nil
	}
}

// onlyNode is a custom strategy kept to one node (a zone of one).
func onlyNode(id string) selector.Strategy {
	return func(svcs []*registry.Service) selector.Next {
		return func() (*registry.Node, error) {
			for _, s := range svcs {
				for _, n := range s.Nodes {
					if n.Id == id {
						return n, nil
					}
				}
			}
			return nil, selector.ErrNoneAvailable
		}
	}
}

// TestAttackTrialRetryOfAnEndingStrategyGetsAnUnclaimedTrial: n3 is on
// trial, claimable, nobody holds it. A call with a strategy that offers
// each node once reaches its third attempt: the strategy offers n3, which
// a retry takes only when nothing else may be picked, and then ends. The
// retry takes the trial: another caller's first pick does not get n3, and
// Ignored stays 0. The first version handed the retry n3 without its
// trial, counted in Ignored though n3 was not ejected, and the next first
// pick took the same trial: two callers at once.
func TestAttackTrialRetryOfAnEndingStrategyGetsAnUnclaimedTrial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sel := newHealthSim(t, 3, cache.WithEjectAfter(1), cache.WithEjectionTime(time.Second, 10*time.Second)).sel
		failN(t, sel, listedNode("n3"), 1)
		require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, sel)))
		time.Sleep(2 * time.Second) // n3 is on trial, claimable
		require.Empty(t, selStats(t, sel).Ejected)

		a, err := sel.Select("svc", selector.WithStrategy(orderedOnce))
		require.NoError(t, err)
		var got []string
		var third *registry.Node
		for i := 0; i < 3; i++ {
			n, err := a()
			require.NoError(t, err)
			got = append(got, n.Id)
			third = n
		}
		t.Logf("call A's attempts: %v; Ignored %d", got, selStats(t, sel).Ignored)

		b, err := sel.Select("svc", selector.WithStrategy(onlyNode("n3")))
		require.NoError(t, err)
		bn, err := b()
		require.NoError(t, err)
		t.Logf("call B's first attempt: %s", bn.Id)
		assert.False(t, third.Id == "n3" && bn.Id == "n3",
			"n3's trial went to two callers at once: A's retry (unclaimed) and B's first attempt")
		assert.Zero(t, selStats(t, sel).Ignored, "Ignored counts a pick of an ejected node; no node is ejected")
	})
}

// TestAttackTrialEndingStrategyUnclaimedTrialManyCallers: the same with
// many calls in flight. The first retry that its strategy ends on n3
// takes the trial; the strategies of the 9 others end on n3 held, and
// they get it as a strategy that ends on ejected nodes does (counted in
// Ignored): it may keep to a zone. In the first version none took the
// trial.
func TestAttackTrialEndingStrategyUnclaimedTrialManyCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sel := newHealthSim(t, 3, cache.WithEjectAfter(1), cache.WithEjectionTime(time.Second, 10*time.Second)).sel
		failN(t, sel, listedNode("n3"), 1)
		time.Sleep(2 * time.Second)
		holders := 0
		for call := 0; call < 10; call++ {
			next, err := sel.Select("svc", selector.WithStrategy(orderedOnce))
			require.NoError(t, err)
			var n *registry.Node
			for i := 0; i < 3; i++ {
				n, err = next()
				require.NoError(t, err)
			}
			if n.Id == "n3" {
				holders++
			}
		}
		assert.Equal(t, 10, holders, "calls whose strategy ended on n3")
		assert.EqualValues(t, 9, selStats(t, sel).Ignored, "calls that got n3 while another held its trial")
	})
}

// TestAttackTrialRetryNeverGetsTrialWhileFreeNode: go-micro's RoundRobin,
// Random and the default: n3 is on trial and held by nobody, n1 ejected,
// n2 free. Retries get n2, never n3 nor n1; Ignored stays 0.
func TestAttackTrialRetryNeverGetsTrialWhileFreeNode(t *testing.T) {
	for _, st := range trialStrategies {
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sel := newHealthSim(t, 4, cache.WithEjectAfter(1), cache.WithMaxEjectedPercent(75),
					cache.WithEjectionTime(time.Second, 10*time.Second)).sel
				failN(t, sel, listedNode("n3"), 1)
				failN(t, sel, listedNode("n4"), 1)
				time.Sleep(2 * time.Second) // n3, n4 on trial
				failN(t, sel, listedNode("n1"), 1)
				require.Equal(t, []string{"n1"}, ejectedIDs(selStats(t, sel)))
				for call := 0; call < 100; call++ {
					next, err := sel.Select("svc", st.opts...)
					require.NoError(t, err)
					first, err := next()
					require.NoError(t, err)
					require.NotEqual(t, "n1", first.Id)
					if first.Id != "n2" {
						sel.Mark("svc", first, handlerErr) // readmitted
						failN(t, sel, listedNode(first.Id), 1)
						time.Sleep(2 * time.Second)
						failN(t, sel, listedNode("n1"), 1)
						continue
					}
					for retry := 0; retry < 3; retry++ {
						n, err := next()
						require.NoError(t, err)
						require.Equal(t, "n2", n.Id, "call %d retry %d", call, retry)
					}
				}
				assert.Zero(t, selStats(t, sel).Ignored)
			})
		})
	}
}

// TestAttackTrialSweepKeepsStateOfServicesNeverCalledAgain: one failed
// client.WithAddress call each to many services (a prober, a fan-out to
// per-tenant services): each target is ejected, off the list, on trial.
// No Next ever picks it (go-micro's client makes no Select for such a
// call), so only another call to it could end its trial. Long after, a
// failure sweeps idle state: the state of a service that no Select uses
// is forgotten, nodes on trial or not. The first version kept it, and
// every service called once kept its state for good: the heap grew with
// the services ever called.
func TestAttackTrialSweepKeepsStateOfServicesNeverCalledAgain(t *testing.T) {
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

// TestAttackTrialSweepKeepsNodesOfADeregisteredService: a listed service's
// node is ejected, the whole service is deregistered, and nobody calls it
// again. Its state, on trial, is never matched against a list again (the
// cache holds none), so it stays listed and on trial; the second sweep
// after its last Select forgets it. The first version kept it for good.
// Measured through the heap across many such services.
func TestAttackTrialSweepKeepsNodesOfADeregisteredService(t *testing.T) {
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
				s.reg.put(svc)
				_, err := s.sel.Select(svc.Name)
				require.NoError(t, err)
				s.sel.Mark(svc.Name, svc.Nodes[0], errRefused) // ejected
				s.reg.mu.Lock()
				delete(s.reg.svcs, svc.Name)
				s.reg.mu.Unlock()
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
	// keeps is the cache's, not the trials'.
	control := heap(5_000, 2)
	big := heap(5_000, 1)
	t.Logf("heap kept a minute after an ejection in each of 5 000 deregistered services: %d B; control (failing, not ejected): %d B", big, control)
	assert.Less(t, big, control+1<<20, "state of deregistered services is kept for good (unbounded)")
}

// TestAttackTrialStrategyErrorOnFirstCallMakesFirstPickARetry: a custom
// strategy whose first answer is an error (a transient failure; go-micro's
// client fails that attempt and retries with the same Next). The next
// call of Next is the call's first attempt on a node, but a retry of the
// call, which has failed once: it does not take n2's trial while n1 is
// free. The strategy keeps offering n2 only, so the selector draws n1
// itself, as for a strategy that keeps offering nodes that may not be
// picked.
func TestAttackTrialStrategyErrorOnFirstCallMakesFirstPickARetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sel := newHealthSim(t, 2, cache.WithEjectAfter(1), cache.WithEjectionTime(time.Second, 10*time.Second)).sel
		failN(t, sel, listedNode("n2"), 1)
		time.Sleep(2 * time.Second)
		flaky := func(svcs []*registry.Service) selector.Next {
			inner := onlyNode("n2")(svcs)
			calls := 0
			return func() (*registry.Node, error) {
				if calls++; calls == 1 {
					return nil, fmt.Errorf("transient")
				}
				return inner()
			}
		}
		next, err := sel.Select("svc", selector.WithStrategy(flaky))
		require.NoError(t, err)
		_, err = next()
		require.Error(t, err)
		n, err := next()
		require.NoError(t, err)
		assert.Equal(t, "n1", n.Id, "the node handed out after a strategy error, with n2 on trial")
		assert.Zero(t, selStats(t, sel).Ignored)
	})
}

// TestAttackTrialHungHolderReleasesAfterHold: the caller holding n3's
// trial hangs and never Marks. Past the maximum ejection time, with
// sweeps in between, another caller's first pick takes the trial, and
// only one: the trial is neither lost by the sweep nor held for good.
func TestAttackTrialHungHolderReleasesAfterHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sel := newHealthSim(t, 3, cache.WithEjectAfter(1), cache.WithEjectionTime(time.Second, 5*time.Second)).sel
		failN(t, sel, listedNode("n3"), 1)
		time.Sleep(2 * time.Second)
		only3 := selector.WithStrategy(onlyNode("n3"))
		a, err := sel.Select("svc", only3)
		require.NoError(t, err)
		an, err := a()
		require.NoError(t, err)
		require.Equal(t, "n3", an.Id, "A takes the trial")
		b, err := sel.Select("svc", only3)
		require.NoError(t, err)
		bn, err := b()
		require.NoError(t, err)
		require.NotEqual(t, "n3", bn.Id, "B while A holds the trial")
		for i := 0; i < 3; i++ { // A hangs; failures of n1 sweep meanwhile
			time.Sleep(3 * time.Second)
			sel.Mark("svc", listedNode("n1"), handlerErr)
			failN(t, sel, listedNode("n1"), 1)
			sel.Mark("svc", listedNode("n1"), handlerErr)
		}
		got := 0
		for call := 0; call < 5; call++ {
			next, err := sel.Select("svc", only3)
			require.NoError(t, err)
			n, err := next()
			require.NoError(t, err)
			if n.Id == "n3" {
				got++
			}
		}
		assert.Equal(t, 1, got, "first picks that took n3's trial after A's claim ran out")
		assert.Zero(t, selStats(t, sel).Ignored)
	})
}
