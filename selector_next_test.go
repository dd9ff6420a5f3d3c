package cache_test

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// A Next sees the passive health state as it is at each pick, whatever
// happened since its Select: go-micro's client takes every retry of a call
// from one Next.

// go-micro's client keeps one Next for all the retries of a call, and
// docs/client.md promises that each retry "calls Next again, which skips
// ejected nodes". A Next handed out while the service had passive health
// state looks at the state as it is at each pick, also after that state was
// dropped (by Reset, by the failing node answering again, or by a Select
// that forgot a node that left) and a node was ejected since.
//
// Regression: such a Next kept reading the state it was given, which was
// gone and ejected nothing: it handed out the node ejected later in about a
// third of its picks.
func TestANextFollowsThePassiveHealthStateAtEachPick(t *testing.T) {
	drops := []struct {
		name string
		drop func(t *testing.T, s *healthSim)
	}{
		{"Reset", func(t *testing.T, s *healthSim) { s.sel.Reset("svc") }},
		{"the failing node answers again", func(t *testing.T, s *healthSim) {
			s.sel.Mark("svc", listedNode("n2"), nil)
		}},
		{"a Select forgets the failing node, which left", func(t *testing.T, s *healthSim) {
			s.event("delete", selService("1", "n2"))
			_, err := s.sel.Select("svc") // sees the list without n2
			require.NoError(t, err)
		}},
	}
	strategies := []struct {
		name string
		opts []selector.SelectOption
	}{
		{"default strategy", nil},
		{"go-micro's RoundRobin", []selector.SelectOption{selector.WithStrategy(selector.RoundRobin)}},
		{"go-micro's Random", []selector.SelectOption{selector.WithStrategy(selector.Random)}},
	}
	for _, d := range drops {
		for _, st := range strategies {
			t.Run(d.name+"/"+st.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := newHealthSim(t, 3)
					// One failure of n2: the service has state, nothing
					// is ejected.
					s.sel.Mark("svc", listedNode("n2"), errDialTimedOut)
					next, err := s.sel.Select("svc", st.opts...)
					require.NoError(t, err)

					d.drop(t, s)
					failN(t, s.sel, listedNode("n3"), 3) // the default ejects after 3
					require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, s.sel)), "n3 is ejected")

					picks := pickCounts(t, next, 300)
					assert.Zero(t, picks["n3"],
						"a Next handed out before the state was dropped (%s) must skip n3, ejected since: "+
							"%d of its 300 picks went to n3 (picks %v)", d.name, picks["n3"], picks)
				})
			})
		}
	}
}

// A Next taken while n3 was ejected (a call about to retry) keeps skipping
// n3 after n3 leaves the list.
//
// Regression: leaving dropped n3's state while the old Next still held the
// old list, so the dead node was back in that Next's rotation, for every
// retry.
func TestOldNextSkipsAnEjectedNodeThatLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		s.ejectN3()
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		before := pickCounts(t, next, 300)
		require.Zero(t, before["n3"])

		s.event("delete", selService("1", "n3")) // n3 deregistered (or expired): it was dead
		_, err = s.sel.Select("svc")             // any other caller: the state follows the list
		require.NoError(t, err)
		picks := pickCounts(t, next, 300)
		assert.Zero(t, picks["n3"], "picks of n3 by a Next taken while n3 was ejected, after n3 left the list (picks %v)", picks)
	})
}

// A Next taken while passive health was off skips the nodes ejected after
// Init turned it on again.
//
// Regression: such a Next was the bare strategy, and handed out the node
// ejected since for every retry of the call.
func TestNextFromWhileHealthWasOffSkipsLaterEjections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3, cache.WithEjectAfter(0))
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		require.NoError(t, s.sel.Init(cache.WithEjectAfter(3)))
		failN(t, s.sel, listedNode("n3"), 3)
		require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, s.sel)))
		picks := pickCounts(t, next, 300)
		assert.Zero(t, picks["n3"], "picks of n3, ejected, by a Next taken while passive health was off (picks %v)", picks)
	})
}
