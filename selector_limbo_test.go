package cache_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// Limbo: nodes that the registry loses in bulk, while their servers still
// serve, stay in the selector's rotation, each dropped by its first
// failure, when it registers again, or when the limbo's bound ends. The
// cache keeps answering what the registry says.

// limboSim is services of nodes behind a cache and a selector, and a client
// that calls them one attempt per call, as go-micro's default retry policy
// does for a refused connection. It runs in a testing/synctest bubble.
type limboSim struct {
	t   *testing.T
	reg *fakereg.Registry
	c   cache.Cache
	sel cache.Selector
	log *lineLogger
	// down holds the ids of the nodes whose server stopped: an attempt
	// on one is refused.
	down map[string]bool
	// picks counts the attempts per node id; failed, the calls that
	// failed (Select, Next or the attempt).
	picks  map[string]int
	failed int
}

// newLimboSim starts the simulation with a service "svc" of the nodes; the
// cache stops when the test ends.
func newLimboSim(t *testing.T, ids []string, copts []cache.Option, sopts ...selector.Option) *limboSim {
	t.Helper()
	r := newReg(selService("1", ids...))
	l := &lineLogger{}
	c := cache.New(r, append([]cache.Option{cache.WithLogger(l), cache.WithTTL(time.Minute)}, copts...)...)
	t.Cleanup(c.Stop)
	s := &limboSim{t: t, reg: r, c: c, sel: cache.NewSelector(c, sopts...), log: l,
		down: map[string]bool{}, picks: map[string]int{}}
	_, err := s.sel.Select("svc") // fills the cache and opens its stream
	require.NoError(t, err)
	synctest.Wait()
	return s
}

// call makes one call of service: Select, Next, one attempt reported to
// Mark. It returns the error of whichever failed.
func (s *limboSim) call(service string) error {
	next, err := s.sel.Select(service)
	if err != nil {
		s.failed++
		return err
	}
	node, err := next()
	if err != nil {
		s.failed++
		return err
	}
	s.picks[node.Id]++
	if s.down[node.Id] {
		s.sel.Mark(service, node, errRefused)
		s.failed++
		return errRefused
	}
	s.sel.Mark(service, node, nil)
	return nil
}

// run calls service every callEvery for d of fake time.
func (s *limboSim) run(service string, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		_ = s.call(service)
		time.Sleep(callEvery)
	}
}

// lose makes the registry drop the nodes of "svc" with the ids, as a
// lease expiry does (a delete event, the registry agreeing after), while
// their servers keep serving, and waits until the cache believes it.
func (s *limboSim) lose(ids ...string) {
	s.t.Helper()
	require.NoError(s.t, s.reg.Deregister(selService("1", ids...)))
	time.Sleep(time.Second) // past the cache's grace for a delete that empties
	synctest.Wait()
}

// stats is the selector's Stats.
func (s *limboSim) stats() cache.SelectorStats { return s.sel.Stats() }

// linesWith returns the log lines that contain sub.
func (s *limboSim) linesWith(sub string) []string {
	var out []string
	for _, l := range s.log.since(0) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%d", i+1)
	}
	return out
}

// The registry loses every node of a service whose servers keep serving:
// the calls go on to the same nodes with no error, while GetService and
// Lookup answer what the registry says.
func TestLimboKeepsRoutingThroughAMassLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(3), nil)
		s.lose("n1", "n2", "n3")
		_, err := s.c.GetService("svc")
		require.ErrorIs(t, err, registry.ErrNotFound, "the cache answers what the registry says")
		_, err = s.c.Lookup("svc")
		require.ErrorIs(t, err, registry.ErrNotFound)

		s.run("svc", 30*time.Second)
		assert.Zero(t, s.failed, "failed calls")
		for _, id := range ids(3) {
			assert.Positive(t, s.picks[id], "calls to %s", id)
		}
		st := s.stats()
		assert.Equal(t, 3, st.LimboNodes)
		assert.EqualValues(t, 1, st.MassLosses)
		require.Len(t, st.Limbo, 3, "a row per node in limbo")
		for i, row := range st.Limbo {
			assert.Equal(t, "svc", row.Service)
			assert.Equal(t, ids(3)[i], row.Id)
			assert.Equal(t, ids(3)[i]+":8080", row.Address)
			assert.True(t, row.Reached, "answered since")
			assert.Equal(t, 30*time.Second, row.Age.Round(time.Second))
			assert.Equal(t, 30*time.Second, row.Remaining.Round(time.Second), "one TTL, a minute, from the loss")
			assert.Equal(t, "the registry dropped 3 of the service's 3 nodes at once", row.Reason)
		}
		assert.Len(t, s.linesWith("lost 3 of its 3 nodes"), 1, "one line per mass loss: %v", s.log.since(0))
	})
}

// A rolling deployment removes one node at a time, and a small scale-down
// a small share: applied at once, as before.
func TestLimboLeavesASingleRemovalAndASmallScaleDownAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(4), nil)
		require.NoError(t, s.reg.Register(selService("1", "n5")))
		synctest.Wait()
		s.lose("n1") // 1 of 5
		p1 := s.picks["n1"]
		s.run("svc", 5*time.Second)
		s.lose("n2") // 1 of 4, seconds after the first: another loss
		p2 := s.picks["n2"]
		s.run("svc", 10*time.Second)
		assert.Equal(t, p1, s.picks["n1"], "attempts to n1 after it left")
		assert.Equal(t, p2, s.picks["n2"], "attempts to n2 after it left")
		st := s.stats()
		assert.Zero(t, st.LimboNodes)
		assert.Zero(t, st.MassLosses)
		assert.Zero(t, s.failed)

		// Exactly half is not more than half.
		s2 := newLimboSim(t, ids(4), nil)
		s2.lose("n1", "n2")
		s2.run("svc", 5*time.Second)
		assert.Zero(t, s2.picks["n1"]+s2.picks["n2"], "picks of the nodes removed: %v", s2.picks)
		assert.Zero(t, s2.stats().MassLosses)
	})
}

// A node in limbo whose attempt cannot reach it leaves limbo at once: one
// failed attempt, not the run of failures that ejects.
func TestLimboDropsANodeAtItsFirstFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(3), nil)
		s.lose("n1", "n2", "n3")
		s.down["n2"] = true
		s.run("svc", 20*time.Second)
		assert.Equal(t, 1, s.picks["n2"], "attempts to n2")
		assert.Equal(t, 1, s.failed)
		assert.Equal(t, 2, s.stats().LimboNodes)
	})
}

// Two calls in flight at once send at most one attempt to a node in limbo
// that nothing has answered from yet.
func TestLimboTakesOneAttemptAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(1), nil)
		s.lose("n1")
		next1, err := s.sel.Select("svc")
		require.NoError(t, err)
		next2, err := s.sel.Select("svc")
		require.NoError(t, err)
		n1, err := next1()
		require.NoError(t, err)
		require.Equal(t, "n1", n1.Id)
		n2, err := next2()
		assert.ErrorIs(t, err, selector.ErrNoneAvailable, "the second Next while the first attempt is out: %v", n2)

		// It answered: every call may take it now.
		s.sel.Mark("svc", n1, nil)
		for i := 0; i < 3; i++ {
			n, err := next2()
			require.NoError(t, err)
			assert.Equal(t, "n1", n.Id)
		}

		// Its server stopped: the first failure ends it, and the service is
		// not found.
		s.down["n1"] = true
		require.ErrorIs(t, s.call("svc"), errRefused)
		_, err = s.sel.Select("svc")
		assert.ErrorIs(t, err, selector.ErrNotFound)
		assert.ErrorIs(t, err, registry.ErrNotFound)
	})
}

// A real scale-to-zero: the servers stopped. Each node in limbo costs one
// attempt, then Select answers not-found.
func TestLimboEndsAScaleToZeroAfterOneAttemptPerNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(3), nil)
		for _, id := range ids(3) {
			s.down[id] = true
		}
		s.lose("n1", "n2", "n3")
		s.run("svc", 10*time.Second)
		for _, id := range ids(3) {
			assert.Equal(t, 1, s.picks[id], "attempts to %s", id)
		}
		_, err := s.sel.Select("svc")
		require.ErrorIs(t, err, selector.ErrNotFound)
		assert.Zero(t, s.stats().LimboNodes)
		assert.Len(t, s.linesWith("limbo of service"), 1, "one line when it ends: %v", s.log.since(0))
	})
}

// The limbo's bound, one TTL of the cache by default, ends it.
func TestLimboEndsWithItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(2), nil) // TTL: one minute
		s.lose("n1", "n2")
		s.run("svc", 58*time.Second)
		assert.Zero(t, s.failed)
		time.Sleep(2 * time.Second)
		_, err := s.sel.Select("svc")
		require.ErrorIs(t, err, selector.ErrNotFound)
		assert.Zero(t, s.stats().LimboNodes)

		// WithLimbo sets another bound.
		s2 := newLimboSim(t, ids(2), nil, cache.WithLimbo(0.5, 5*time.Second))
		s2.lose("n1", "n2")
		s2.run("svc", 4*time.Second)
		assert.Zero(t, s2.failed)
		time.Sleep(time.Second)
		_, err = s2.sel.Select("svc")
		require.ErrorIs(t, err, selector.ErrNotFound)
	})
}

// A node that registers again leaves limbo: it is on the list, as
// normal, and the others stay.
func TestLimboEndsForANodeThatRegistersAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(3), nil)
		s.lose("n1", "n2", "n3")
		require.NoError(t, s.reg.Register(selService("1", "n1")))
		synctest.Wait()
		s.run("svc", time.Second)
		assert.Equal(t, 2, s.stats().LimboNodes)
		svcs, err := s.c.GetService("svc")
		require.NoError(t, err)
		require.Len(t, svcs[0].Nodes, 1)

		// The others end with the bound; n1 stays.
		time.Sleep(time.Minute)
		s.picks = map[string]int{}
		s.run("svc", time.Second)
		assert.Equal(t, []string{"n1"}, keys(s.picks))
		assert.Zero(t, s.failed)
	})
}

func keys(m map[string]int) []string {
	var out []string
	for k, v := range m {
		if v > 0 {
			out = append(out, k)
		}
	}
	return out
}

// Many services that lose a few nodes each within a second are a mass
// loss too.
func TestLimboHoldsSmallLossesOfManyServicesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var svcs []*registry.Service
		for i := 0; i < 3; i++ {
			s := selService("1", ids(4)...)
			s.Name = fmt.Sprintf("svc%d", i)
			svcs = append(svcs, s)
		}
		r := newReg(svcs...)
		c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Minute))
		t.Cleanup(c.Stop)
		sel := cache.NewSelector(c)
		for _, s := range svcs {
			_, err := sel.Select(s.Name)
			require.NoError(t, err)
		}
		synctest.Wait()
		for _, s := range svcs {
			lost := selService("1", "n1")
			lost.Name = s.Name
			require.NoError(t, r.Deregister(lost))
			synctest.Wait()
			_, err := sel.Select(s.Name) // the selector sees each loss
			require.NoError(t, err)
		}
		picked := map[string]int{}
		for i := 0; i < 200; i++ {
			for _, s := range svcs {
				next, err := sel.Select(s.Name)
				require.NoError(t, err)
				n, err := next()
				require.NoError(t, err)
				sel.Mark(s.Name, n, nil)
				picked[s.Name+"/"+n.Id]++
			}
		}
		for _, s := range svcs {
			assert.Positive(t, picked[s.Name+"/n1"], "%s's n1 in limbo: %v", s.Name, picked)
		}
		assert.Equal(t, 3, sel.(cache.Selector).Stats().LimboNodes)
	})
}

// With a Cache that is not regcache's own, limbo works from the lists that
// Select meets, and its bound is a minute.
func TestLimboWithAForeignCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, f := newForeign(t, "n1", "n2", "n3")
		sel := cache.NewSelector(f)
		_, err := sel.Select("svc")
		require.NoError(t, err)
		synctest.Wait()
		f.answer(nil) // the wrapper's list loses every node
		next, err := sel.Select("svc")
		require.NoError(t, err, "the nodes the wrapper dropped are in limbo")
		n, err := next()
		require.NoError(t, err)
		sel.Mark("svc", n, nil)
		time.Sleep(61 * time.Second)
		_, err = sel.Select("svc")
		assert.ErrorIs(t, err, selector.ErrNoneAvailable, "an empty list after the bound")
	})
}

// Per-service watches bring the loss the same way.
func TestLimboWithPerServiceWatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(3), []cache.Option{cache.WithWatchPerService()})
		s.lose("n1", "n2", "n3")
		_, err := s.c.GetService("svc")
		require.ErrorIs(t, err, registry.ErrNotFound)
		s.run("svc", 10*time.Second)
		assert.Zero(t, s.failed)
		assert.Equal(t, 3, s.stats().LimboNodes)
	})
}

// WithLimbo(0, 0) turns limbo off: the loss is applied at once.
func TestLimboOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(3), nil, cache.WithLimbo(0, 0))
		s.lose("n1", "n2", "n3")
		_, err := s.sel.Select("svc")
		require.ErrorIs(t, err, selector.ErrNotFound)
		assert.Zero(t, s.stats().MassLosses)
	})
}

// Invalid values are refused.
func TestLimboOptionValues(t *testing.T) {
	r := newReg(selService("1", "n1"))
	c := cache.New(r, cache.WithLogger(benchLogger))
	defer c.Stop()
	for _, o := range []selector.Option{cache.WithLimbo(-0.1, 0), cache.WithLimbo(1.1, 0), cache.WithLimbo(0.5, -time.Second)} {
		assert.Panics(t, func() { cache.NewSelector(c, o) })
		assert.Error(t, cache.NewSelector(c).Init(o))
	}
	assert.NotPanics(t, func() { cache.NewSelector(c, cache.WithLimbo(1, time.Hour)) })
	err := cache.NewSelector(c).Init(cache.WithLimbo(2, 0))
	assert.True(t, err != nil && strings.Contains(err.Error(), "WithLimbo"), "%v", err)
}

// A registry sends a loss as one delete per node. The share is measured
// over the removals within a second, against the nodes before the first:
// three of four deleted one by one are a mass loss, all three in limbo;
// three of six are half, applied at once.
func TestLimboCountsALossEventByEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(4), nil)
		for _, id := range []string{"n1", "n2", "n3"} {
			require.NoError(t, s.reg.Deregister(selService("1", id)))
			synctest.Wait()
			require.NoError(t, s.call("svc"))
		}
		assert.Equal(t, 3, s.stats().LimboNodes)

		s2 := newLimboSim(t, ids(6), nil)
		for _, id := range []string{"n1", "n2", "n3"} {
			require.NoError(t, s2.reg.Deregister(selService("1", id)))
			synctest.Wait()
			require.NoError(t, s2.call("svc"))
		}
		assert.Zero(t, s2.stats().LimboNodes)
	})
}

// Init turning limbo off ends it at once, and turned on again it starts
// from the lists it meets then, not from those it met before.
func TestLimboTurnedOffByInit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newLimboSim(t, ids(3), nil)
		s.lose("n1", "n2", "n3")
		require.NoError(t, s.call("svc"))
		require.Equal(t, 3, s.stats().LimboNodes)
		require.NoError(t, s.sel.Init(cache.WithLimbo(0, 0)))
		assert.Zero(t, s.stats().LimboNodes)
		_, err := s.sel.Select("svc")
		require.ErrorIs(t, err, selector.ErrNotFound)

		s2 := newLimboSim(t, ids(4), nil)
		require.NoError(t, s2.sel.Init(cache.WithLimbo(0, 0)))
		s2.lose("n1", "n2", "n3") // while off
		require.NoError(t, s2.call("svc"))
		require.NoError(t, s2.sel.Init(cache.WithLimbo(0.5, 0)))
		s2.run("svc", time.Second)
		assert.Zero(t, s2.stats().LimboNodes, "a loss met while off is not one")
		assert.Zero(t, s2.failed)
	})
}

// Selects, Nexts, Marks, Stats and Inits race losses and re-registrations,
// for the race detector: nothing panics, and every node handed out is one
// the service listed at some point.
func TestLimboConcurrentUse(t *testing.T) {
	r := newReg(selService("1", ids(4)...))
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Minute))
	defer c.Stop()
	sel := cache.NewSelector(c).(cache.Selector)
	_, err := sel.Select("svc")
	require.NoError(t, err)
	known := map[string]bool{}
	for _, id := range ids(4) {
		known[id] = true
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				next, err := sel.Select("svc")
				if err != nil {
					continue
				}
				n, err := next()
				if err != nil {
					continue
				}
				if !known[n.Id] {
					t.Errorf("a node never listed: %v", n.Id)
					return
				}
				switch (i + g) % 3 {
				case 0:
					sel.Mark("svc", n, nil)
				case 1:
					sel.Mark("svc", n, errRefused)
				default:
					sel.Mark("svc", n, handlerErr)
				}
			}
		}(g)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			_ = sel.Stats()
		}
	}()
	for round := 0; round < 50; round++ {
		if round%10 == 5 {
			require.NoError(t, sel.Init(cache.WithLimbo(0, 0)))
		} else if round%10 == 6 {
			require.NoError(t, sel.Init(cache.WithLimbo(0.5, 0)))
		}
		require.NoError(t, r.Deregister(selService("1", ids(4)...)))
		time.Sleep(2 * time.Millisecond)
		require.NoError(t, r.Register(selService("1", ids(4)[:1+round%4]...)))
		time.Sleep(2 * time.Millisecond)
	}
	close(done)
	wg.Wait()
}
