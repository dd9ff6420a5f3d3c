package cache_test

import (
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// Init changes the passive health options of a running selector, at once
// and as a whole.

// Options given to Init apply from then on; turning passive health off
// forgets every state.
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

// Init(WithEjectionTime(base, max)) applies to the ejections running: a
// node ejected under a long maximum is back by the new one.
//
// Regression: a node ejected under a long maximum stayed out for the old
// time. An operator who found the ejection time far too long (1 h, a dead
// node's replacement reusing its Id and address) and lowered it with Init
// still waited the hour, or used Reset or turned passive health off and on,
// which forget every failing node.
func TestInitShorterEjectionTimeAppliesToRunningEjections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3, cache.WithEjectionTime(time.Hour, time.Hour))
		s.ejectN3()
		require.NoError(t, s.sel.Init(cache.WithEjectionTime(time.Second, 2*time.Second)))
		time.Sleep(3 * time.Second) // past the new maximum
		st := selStats(t, s.sel)
		assert.Empty(t, st.Ejected, "ejected 3 s after Init lowered the maximum ejection to 2 s: %s, remaining %v", ejectedRows(st), remaining(st))
	})
}

// Init turning passive health off forgets every state, also the ejection of
// a failure Mark that read the configuration just before.
//
// Regression: such a Mark went on and recorded its ejection after the
// reset: passive health was off, yet a node was ejected, and it still was
// when passive health was turned on again.
func TestInitOffWinsOverARacingFailureMark(t *testing.T) {
	r := newReg(selService("1", "n1", "n2", "n3"))
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	defer c.Stop()
	sel := cache.NewSelector(c, cache.WithEjectAfter(1))
	_, err := sel.Select("svc")
	require.NoError(t, err)
	stale, stillOn := 0, 0
	const rounds = 3000
	for round := 0; round < rounds; round++ {
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				sel.Mark("svc", listedNode("n3"), errRefused)
			}
		}()
		runtime.Gosched()
		require.NoError(t, sel.Init(cache.WithEjectAfter(0)))
		stop.Store(true)
		wg.Wait()
		if len(selStats(t, sel).Ejected) > 0 {
			stale++
		}
		require.NoError(t, sel.Init(cache.WithEjectAfter(1)))
		if len(selStats(t, sel).Ejected) > 0 {
			stillOn++
		}
		sel.Reset("svc")
	}
	assert.Zero(t, stale, "rounds of %d where a node stayed ejected after Init turned passive health off", rounds)
	assert.Zero(t, stillOn, "rounds of %d where, turned on again with no failure since, a node was ejected", rounds)
}

// Two Inits at once leave the options and the passive health configuration
// of the same Init. The window was a few instructions wide; the test counts
// how often it is hit in many rounds.
//
// Regression: each Init swapped the options in, then installed its passive
// health configuration, in either order, so the selector could end with the
// options of one Init (Options() showing its strategy and its
// WithEjectAfter) and the passive health of the other, until the next Init.
func TestConcurrentInitsLeaveOptionsAndHealthAgreeing(t *testing.T) {
	r := newReg(selService("1", "n1", "n2", "n3"))
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	defer c.Stop()
	_, err := c.Lookup("svc")
	require.NoError(t, err)
	stratOff := func(svcs []*registry.Service) selector.Next { return selector.Random(svcs) }
	stratOn := func(svcs []*registry.Service) selector.Next { return selector.RoundRobin(svcs) }
	offPtr := reflect.ValueOf(selector.Strategy(stratOff)).Pointer()
	mismatch := 0
	rounds := cache.RaceScale(100000)
	for round := 0; round < rounds; round++ {
		sel := cache.NewSelector(c, cache.WithEjectAfter(2))
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_ = sel.Init(selector.SetStrategy(stratOff), cache.WithEjectAfter(0))
		}()
		go func() {
			defer wg.Done()
			<-start
			_ = sel.Init(selector.SetStrategy(stratOn), cache.WithEjectAfter(1))
		}()
		close(start)
		wg.Wait()
		optsOff := reflect.ValueOf(sel.Options().Strategy).Pointer() == offPtr
		sel.Mark("svc", listedNode("n1"), errRefused)
		healthOff := selStats(t, sel).Failures == 0
		if optsOff != healthOff {
			mismatch++
		}
	}
	assert.Zero(t, mismatch, "rounds of %d where Options() and passive health disagree after two concurrent Inits", rounds)
}
