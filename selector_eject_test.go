package cache_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// An ejection follows the node, its Id and its address, through changes
// of the cached list, and Reset ends it.

// The state of a node that leaves the cached node list is kept, off the
// list: the same node (Id and address) back within its ejection is still
// ejected, while an instance under a new Id at the same address starts
// afresh.
func TestNodeThatLeavesKeepsItsState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		s.ejectN3()
		s.event("delete", selService("1", "n3"))
		s.call() // Select sees the new list
		assert.Empty(t, selStats(t, s.sel).Ejected, "a node off the list is not shown")

		// Back with the same Id and address, within its ejection:
		// still out, and shown again.
		s.event("create", selService("1", "n3"))
		s.answer = func(string) error { return nil }
		before := s.snapshot()
		s.run(10 * time.Second)
		assert.Zero(t, s.picks["n3"]-before["n3"], "picks of n3, back within its ejection")
		assert.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, s.sel)))

		// A new instance at the same address, under a new Id: in
		// rotation at once, and its failures count from zero.
		s.event("delete", selService("1", "n3"))
		renewed := selService("1", "n4")
		renewed.Nodes[0].Address = "n3:8080"
		s.event("create", renewed)
		before = s.snapshot()
		s.run(10 * time.Second) // 1 000 picks: the share's deviation is 0.015
		assert.InDelta(t, 1.0/3, s.share("n4", before), 0.075)
		s.answer = func(id string) error {
			if id == "n4" {
				return errDialTimedOut
			}
			return nil
		}
		before = s.snapshot()
		for !slices.Contains(ejectedIDs(selStats(t, s.sel)), "n4") {
			s.call()
			time.Sleep(callEvery)
		}
		assert.Equal(t, 3, s.picks["n4"]-before["n4"], "failures before the ejection")
	})
}

// A node joining does not readmit an ejected one.
func TestNodeListChangeKeepsTheStateOfNodesThatStay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		s.ejectN3()
		s.event("update", selService("1", "n4"))
		before := s.snapshot()
		s.run(20 * time.Second) // within the 30 s ejection
		assert.Zero(t, s.picks["n3"]-before["n3"])
		assert.Positive(t, s.picks["n4"])
		st := selStats(t, s.sel)
		require.Equal(t, []string{"n3"}, ejectedIDs(st))
		assert.Equal(t, "n3:8080", st.Ejected[0].Address)
		assert.Equal(t, "svc", st.Ejected[0].Service)
		assert.Less(t, st.Ejected[0].Remaining, 11*time.Second)
	})
}

// Passive health state follows the node, its Id and its address: a node
// that re-registers at a new address under the same Id starts clean, and
// failures of the address it left do not count against it.
//
// Regression: state was keyed by the Id alone. The node at its new address
// stayed ejected for the failures of an address that no longer existed,
// Stats showed it with the old address, and late failures of the old
// address ejected it.
func TestANewAddressUnderTheSameIdStartsClean(t *testing.T) {
	moved := func() *registry.Service {
		svc := selService("1", "n3")
		svc.Nodes[0].Address = "n3:9090"
		return svc
	}
	share := func(t *testing.T, s *healthSim) (float64, map[string]int) {
		t.Helper()
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		counts := map[string]int{}
		for i := 0; i < 3000; i++ {
			node, err := next()
			require.NoError(t, err)
			counts[node.Id+"@"+node.Address]++
		}
		return float64(counts["n3@n3:9090"]) / 3000, counts
	}
	t.Run("ejected at the old address", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3)
			s.ejectN3() // n3 at n3:8080
			s.event("update", moved())
			got, counts := share(t, s)
			assert.InDelta(t, 1.0/3, got, 0.05, "share of n3 at its new address, n3:9090, which never failed (picks %v)", counts)
			st := selStats(t, s.sel)
			assert.Empty(t, st.Ejected, "Ejected, once the list no longer has n3:8080: %s", ejectedRows(st))
		})
	})
	t.Run("late failures of the old address", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3)
			failN(t, s.sel, listedNode("n3"), 2) // n3 at n3:8080
			s.event("update", moved())
			_, err := s.sel.Select("svc") // sees n3 at n3:9090
			require.NoError(t, err)
			// Two attempts on n3:8080 still in flight fail, and the
			// first attempt on n3:9090 too: one failure at that
			// address, not three.
			s.sel.Mark("svc", listedNode("n3"), errDialTimedOut)
			s.sel.Mark("svc", listedNode("n3"), errDialTimedOut)
			s.sel.Mark("svc", &registry.Node{Id: "n3", Address: "n3:9090"}, errDialTimedOut)
			st := selStats(t, s.sel)
			for _, e := range st.Ejected {
				assert.NotEqual(t, "n3:9090", e.Address, "n3 at n3:9090 failed once: not ejected (Ejected %s)", ejectedRows(st))
			}
			got, counts := share(t, s)
			assert.InDelta(t, 1.0/3, got, 0.05, "share of n3 at n3:9090, which failed once (picks %v)", counts)
		})
	})
}

// A failure of another address under the same Id (a call still in flight
// to the address a node moved from, go-micro's client holding the old list)
// leaves the listed node's state alone, its ejection included.
//
// Regression: state was stored under the Id alone, and such a failure
// replaced the listed node's state: one late failure readmitted the ejected
// node, and failures of both addresses in turn never ejected it.
func TestOldAddressFailureLeavesTheListedNodesEjection(t *testing.T) {
	moved := func() *registry.Service {
		svc := selService("1", "n3")
		svc.Nodes[0].Address = "n3:9090"
		return svc
	}
	t.Run("one late failure readmits the ejected node", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3)
			_, err := s.sel.Select("svc") // the cache looks the service up and watches
			require.NoError(t, err)
			s.event("update", moved()) // n3 now listed at n3:9090
			_, err = s.sel.Select("svc")
			require.NoError(t, err)
			failN(t, s.sel, &registry.Node{Id: "n3", Address: "n3:9090"}, 3) // dead at its new address
			require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, s.sel)))

			s.sel.Mark("svc", listedNode("n3"), errRefused) // one late failure at n3:8080
			st := selStats(t, s.sel)
			assert.Equal(t, []string{"n3"}, ejectedIDs(st), "n3 at n3:9090 after an off-list failure of n3:8080: Ejected %s", ejectedRows(st))
			next, err := s.sel.Select("svc")
			require.NoError(t, err)
			picks := map[string]int{}
			for i := 0; i < 300; i++ {
				n, _ := next()
				picks[n.Id+"@"+n.Address]++
			}
			assert.Zero(t, picks["n3@n3:9090"], "picks of n3@n3:9090, ejected a moment ago (picks %v)", picks)
		})
	})
	t.Run("interleaved failures of both addresses never eject", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3)
			_, err := s.sel.Select("svc") // the cache looks the service up and watches
			require.NoError(t, err)
			s.event("update", moved())
			_, err = s.sel.Select("svc")
			require.NoError(t, err)
			for i := 0; i < 30; i++ {
				s.sel.Mark("svc", &registry.Node{Id: "n3", Address: "n3:9090"}, errRefused)
				s.sel.Mark("svc", listedNode("n3"), errRefused)
			}
			st := selStats(t, s.sel)
			assert.Equal(t, []string{"n3"}, ejectedIDs(st), "n3@n3:9090 failed 30 times (each followed by a failure of n3:8080): Ejected %s, Ejections %d", ejectedRows(st), st.Ejections)
		})
	})
}

// Duplicate Ids at different addresses within one list are distinct nodes:
// ejecting one leaves the other in rotation, and the share counts both.
func TestDuplicateIdsAreDistinctNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := selService("1", "n1", "n2")
		svc.Nodes = append(svc.Nodes, &registry.Node{Id: "n1", Address: "n1:9090"})
		r := newReg(svc)
		c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
		defer c.Stop()
		sel := cache.NewSelector(c, cache.WithEjectionTime(time.Hour, time.Hour))
		failN(t, sel, listedNode("n1"), 3)
		st := selStats(t, sel)
		require.Len(t, st.Ejected, 1)
		assert.Equal(t, "n1:8080", st.Ejected[0].Address)
		next, err := sel.Select("svc")
		require.NoError(t, err)
		picks := map[string]int{}
		for i := 0; i < 300; i++ {
			n, err := next()
			require.NoError(t, err)
			picks[n.Id+"@"+n.Address]++
		}
		assert.Zero(t, picks["n1@n1:8080"])
		assert.Positive(t, picks["n1@n1:9090"])
	})
}

// Reset forgets the service's state.
func TestResetReadmitsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		s.ejectN3()
		s.sel.Reset("svc")
		assert.Empty(t, selStats(t, s.sel).Ejected)
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		assert.True(t, selSet(selDraw(t, next, 100))["n3"])
	})
}
