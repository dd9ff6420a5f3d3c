package cache_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// No strategy, whether go-micro's, the caller's or the default, yields an
// ejected node while an admitted node is pickable; filters and strategies
// that leave nothing else get the ejected nodes.

// Strategies given with SetStrategy or WithStrategy skip ejected nodes too.
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

// When the filters leave only ejected nodes, Next hands them out.
func TestFilterLeavingOnlyEjectedNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newReg(selService("1", "n1", "n2"), selService("2", "n3", "n4", "n5"))
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

// stickyStrategy is a caller's strategy that always returns the first node
// of the first service, as an affinity strategy would for one key.
func stickyStrategy(svcs []*registry.Service) selector.Next {
	return func() (*registry.Node, error) {
		for _, s := range svcs {
			if len(s.Nodes) > 0 {
				return s.Nodes[0], nil
			}
		}
		return nil, selector.ErrNoneAvailable
	}
}

// No strategy (go-micro's, the caller's, or the default) yields an ejected
// node while an admitted one is pickable, and Stats.Ignored counts only the
// picks made when none is.
//
// Regression: a custom strategy was asked total+16 times and its first node
// handed out when all were ejected. go-micro's Random over a canary of 10
// nodes with 9 ejected gave an ejected node in 0.9^26 ≈ 6.5 % of the picks,
// counted in Ignored as if no node were left, and a strategy that always
// returned an ejected node got it every time.
func TestStrategiesNeverPickAnEjectedNodeWhileAnotherIsPickable(t *testing.T) {
	canary := []string{"c01", "c02", "c03", "c04", "c05", "c06", "c07", "c08", "c09", "c10"}
	stable := []string{"s01", "s02", "s03", "s04", "s05", "s06", "s07", "s08", "s09", "s10"}
	for _, tt := range []struct {
		name     string
		versions int // 2: stable (version 1) and canary (version 2); 1: canary only
		opts     []selector.Option
		sopts    []selector.SelectOption
	}{
		{"go-micro's Random with FilterVersion on the canary", 2, nil,
			[]selector.SelectOption{selector.WithFilter(selector.FilterVersion("2")), selector.WithStrategy(selector.Random)}},
		{"go-micro's Random, WithMaximumEjectedPercent(100)", 1, []selector.Option{cache.WithMaximumEjectedPercent(100)},
			[]selector.SelectOption{selector.WithStrategy(selector.Random)}},
		{"go-micro's Random through SetStrategy, WithMaximumEjectedPercent(100)", 1,
			[]selector.Option{cache.WithMaximumEjectedPercent(100), selector.SetStrategy(selector.Random)}, nil},
		{"a caller's strategy that always returns the same node", 2, nil,
			[]selector.SelectOption{selector.WithFilter(selector.FilterVersion("2")), selector.WithStrategy(stickyStrategy)}},
		// These hold today.
		{"go-micro's RoundRobin with FilterVersion on the canary", 2, nil,
			[]selector.SelectOption{selector.WithFilter(selector.FilterVersion("2")), selector.WithStrategy(selector.RoundRobin)}},
		{"the default strategy with FilterVersion on the canary", 2, nil,
			[]selector.SelectOption{selector.WithFilter(selector.FilterVersion("2"))}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				svcs := []*registry.Service{}
				if tt.versions == 2 {
					svcs = append(svcs, selService("1", stable...))
				}
				svcs = append(svcs, selService("2", canary...))
				r := newReg(svcs...)
				c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
				defer c.Stop()
				sel := cache.NewSelector(c, tt.opts...)
				for _, id := range canary[:9] {
					failN(t, sel, listedNode(id), 3)
				}
				st := selStats(t, sel)
				require.Equal(t, canary[:9], ejectedIDs(st), "9 of the 10 canary nodes ejected")
				ignored := st.Ignored

				next, err := sel.Select("svc", tt.sopts...)
				require.NoError(t, err)
				const n = 3000
				picks := pickCounts(t, next, n)
				bad := 0
				for _, id := range canary[:9] {
					bad += picks[id]
				}
				assert.Zero(t, bad, "picks of ejected nodes, of %d, while c10 is admitted (picks %v)", n, picks)
				assert.Equal(t, n, picks["c10"], "picks of c10, the only canary node admitted")
				assert.Equal(t, ignored, selStats(t, sel).Ignored,
					"Ignored counts only picks made when no node is pickable; c10 was, at every pick")
			})
		})
	}
}

// When a strategy keeps returning an ejected node, the node the selector
// draws instead is uniform over the pickable ones.
func TestTheSelectorsOwnDrawIsUniform(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 4)
		failN(t, s.sel, listedNode("n1"), 3) // the node stickyStrategy always returns
		require.Equal(t, []string{"n1"}, ejectedIDs(selStats(t, s.sel)))
		next, err := s.sel.Select("svc", selector.WithStrategy(stickyStrategy))
		require.NoError(t, err)
		const n = 3000
		picks := pickCounts(t, next, n)
		assert.Zero(t, picks["n1"])
		for _, id := range []string{"n2", "n3", "n4"} { // 1 000 each; the deviation is 26
			assert.InDelta(t, n/3, picks[id], 120, "picks of %s (picks %v)", id, picks)
		}
	})
}

// zoneAOnce is a strategy that offers the zone "a" nodes of its list, each
// once, then says there is none left: a zone-local strategy that must not
// send traffic to another zone (cost, latency, data residency).
func zoneAOnce(svcs []*registry.Service) selector.Next {
	var nodes []*registry.Node
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if n.Metadata["zone"] == "a" {
				nodes = append(nodes, n)
			}
		}
	}
	i := 0
	return func() (*registry.Node, error) {
		if i == len(nodes) {
			return nil, selector.ErrNoneAvailable
		}
		i++
		return nodes[i-1], nil
	}
}

// A custom strategy that ends with an error after offering only ejected
// nodes gets one of the nodes it offered, never one it did not offer: a
// zone-local strategy whose zone's nodes are all ejected keeps its traffic
// in its zone.
//
// Regression: the strategy's error was dropped once it had returned an
// ejected node, and the selector drew a node itself among all the nodes of
// the list, so Next returned a node of another zone; had the strategy's
// first answer been the error, Next would have returned it.
func TestCustomStrategyErrorIsNotReplacedByANodeItNeverOffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 4, cache.WithMaximumEjectedPercent(100))
		failN(t, s.sel, listedNode("n1"), 3) // zone a
		failN(t, s.sel, listedNode("n3"), 3) // zone a
		require.Equal(t, []string{"n1", "n3"}, ejectedIDs(selStats(t, s.sel)))
		next, err := s.sel.Select("svc", selector.WithStrategy(zoneAOnce))
		require.NoError(t, err)
		n, err := next()
		if err == nil {
			assert.Equal(t, "a", n.Metadata["zone"], "Next with a zone-a-only strategy handed out %s of zone %s, a node the strategy never offered", n.Id, n.Metadata["zone"])
		}
	})
}
