//go:build go1.25

package cache_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// ejectN3 makes n3 refuse connections until it is ejected.
func (s *healthSim) ejectN3() {
	s.t.Helper()
	s.answer = func(id string) error {
		if id == "n3" {
			return errRefused
		}
		return nil
	}
	for len(selStats(s.t, s.sel).Ejected) == 0 {
		s.call()
		time.Sleep(callEvery)
	}
	require.Equal(s.t, []string{"n3"}, ejectedIDs(selStats(s.t, s.sel)))
}

// event applies a watch event to the cache and waits until it has.
func (s *healthSim) event(action string, svc *registry.Service) {
	s.reg.events <- &registry.Result{Action: action, Service: svc}
	benchBarrier(s.reg)
}

// TestNodeThatLeavesKeepsItsState: the state of a node that leaves the
// cached node list is kept, off the list: the same node (Id and address)
// back within its ejection is still ejected, while an instance under a new
// Id at the same address starts afresh.
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
				return errRefused
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

// TestNodeListChangeKeepsTheStateOfNodesThatStay: a node joining does not
// readmit an ejected one.
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

// TestGoMicroStrategiesSkipEjectedNodes: strategies given with SetStrategy
// or WithStrategy skip ejected nodes too.
func TestGoMicroStrategiesSkipEjectedNodes(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []selector.Option
		sopt []selector.SelectOption
	}{
		{"RoundRobin with SetStrategy", []selector.Option{selector.SetStrategy(selector.RoundRobin)}, nil},
		{"Random with WithStrategy", nil, []selector.SelectOption{selector.WithStrategy(selector.Random)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newHealthSim(t, 3, tt.opts...)
				s.ejectN3()
				next, err := s.sel.Select("svc", tt.sopt...)
				require.NoError(t, err)
				ids := selSet(selDraw(t, next, 300))
				assert.Equal(t, map[string]bool{"n1": true, "n2": true}, ids)
			})
		})
	}
}

// TestFilterLeavingOnlyEjectedNodes: when the filters leave only ejected
// nodes, Next hands them out.
func TestFilterLeavingOnlyEjectedNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBenchReg(selService("1", "n1", "n2"), selService("2", "n3", "n4", "n5"))
		c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
		defer c.Stop()
		sel := cache.NewSelector(c)
		for _, id := range []string{"n1", "n2"} {
			for i := 0; i < 3; i++ {
				// Select before each attempt, as go-micro's client does.
				_, err := sel.Select("svc")
				require.NoError(t, err)
				sel.Mark("svc", &registry.Node{Id: id, Address: id + ":8080"}, errRefused)
			}
		}
		require.Equal(t, []string{"n1", "n2"}, ejectedIDs(selStats(t, sel)), "2 of 5 nodes")

		next, err := sel.Select("svc", selector.WithFilter(selector.FilterVersion("1")))
		require.NoError(t, err)
		assert.Equal(t, map[string]bool{"n1": true, "n2": true}, selSet(selDraw(t, next, 100)))
		assert.EqualValues(t, 100, selStats(t, sel).Ignored)

		next, err = sel.Select("svc")
		require.NoError(t, err)
		assert.Equal(t, map[string]bool{"n3": true, "n4": true, "n5": true}, selSet(selDraw(t, next, 300)))
	})
}

// TestResetReadmitsAtOnce: Reset forgets the service's state.
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

// TestInitTunesAndTurnsOffPassiveHealth: options given to Init apply from
// then on; turning passive health off forgets every state.
func TestInitTunesAndTurnsOffPassiveHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		require.NoError(t, s.sel.Init(cache.WithEjectAfter(1), cache.WithEjectionTime(time.Minute, time.Hour)))
		s.ejectN3()
		st := selStats(t, s.sel)
		assert.EqualValues(t, 1, st.Failures, "ejected by its first failure")
		assert.InDelta(t, time.Minute, st.Ejected[0].Remaining, float64(callEvery))

		require.NoError(t, s.sel.Init(cache.WithEjectAfter(0)))
		assert.Empty(t, selStats(t, s.sel).Ejected)
		before := s.snapshot()
		s.run(time.Minute)
		assert.Greater(t, s.share("n3", before), 0.25)
		assert.EqualValues(t, 1, selStats(t, s.sel).Failures, "no failure counted while off")
	})
}
