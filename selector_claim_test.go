package cache_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// A node on trial goes to one caller at a time: the caller that took it
// holds a claim until its Mark, or until the claim lapses after the maximum
// ejection time.

// A node on trial (its ejection over) is handed to one caller at a time
// until its trial ends with that caller's Mark: a failure ejects it again,
// an answer puts it back for everyone.
//
// Regression: a node on trial was handed to every caller until the first
// Mark, so with 20 callers each readmission of a black-holed node cost
// about 20 failed attempts.
func TestANodeOnTrialGoesToOneCallerAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		s.ejectN3()

		// trialPick waits for n3's ejection to end and returns a Next's
		// pick of n3, on trial; its Mark is left for later.
		trialPick := func() {
			t.Helper()
			st := selStats(t, s.sel)
			require.Len(t, st.Ejected, 1)
			time.Sleep(st.Ejected[0].Remaining + time.Second)
			for i := 0; i < 1000; i++ {
				next, err := s.sel.Select("svc")
				require.NoError(t, err)
				node, err := next()
				require.NoError(t, err)
				if node.Id == "n3" {
					return
				}
				s.sel.Mark("svc", node, nil)
			}
			t.Fatal("n3, on trial, was not handed out in 1000 picks")
		}
		// others makes 20 callers pick 100 times each, through Nexts of
		// their own, and returns how many picks went to n3. Their picks
		// of the other nodes are answered; those of n3 are not marked,
		// as if they were still in flight.
		others := func() (n3, total int) {
			var wg sync.WaitGroup
			var got, all atomic.Int64
			for g := 0; g < 20; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 100; i++ {
						next, err := s.sel.Select("svc")
						if err != nil {
							t.Error(err)
							return
						}
						node, err := next()
						if err != nil {
							t.Error(err)
							return
						}
						all.Add(1)
						if node.Id == "n3" {
							got.Add(1)
							continue
						}
						s.sel.Mark("svc", node, nil)
					}
				}()
			}
			wg.Wait()
			return int(got.Load()), int(all.Load())
		}

		trialPick()
		got, total := others()
		assert.Zero(t, got, "while the Mark of n3's trial pick is pending, %d of %d picks by other callers went to n3, on trial; want none", got, total)

		s.sel.Mark("svc", listedNode("n3"), errTimedOut) // the trial fails
		st := selStats(t, s.sel)
		require.Equal(t, []string{"n3"}, ejectedIDs(st), "a failed trial ejects the node again")
		assert.Equal(t, 2, st.Ejected[0].Ejections)
		got, total = others()
		assert.Zero(t, got, "picks of n3, ejected again, of %d", total)

		trialPick()
		s.sel.Mark("svc", listedNode("n3"), nil) // the trial succeeds
		st = selStats(t, s.sel)
		assert.Empty(t, st.Ejected)
		assert.EqualValues(t, 1, st.Readmitted)
		got, total = others()
		assert.InDelta(t, 1.0/3, float64(got)/float64(total), 0.05,
			"share of n3 after its trial succeeded: back for every caller (%d of %d)", got, total)
	})
}

// A black-holed node (every attempt times out) and 20 goroutines calling:
// after its first ejection, each readmission costs one failed attempt.
//
// Regression: each readmission cost about one attempt per caller, 20.
func TestABlackHoledNodeCostsOneAttemptPerReadmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		const (
			callers = 20
			timeout = 5 * time.Second // go-micro's default request timeout
			every   = 50 * time.Millisecond
		)
		var afterFirst atomic.Int64 // attempts on n3 picked after its first ejection
		var mu sync.Mutex
		var perEjection []int64 // attempts on n3 picked after each ejection, by its count
		var wg sync.WaitGroup
		end := time.Now().Add(5 * time.Minute)
		for g := 0; g < callers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					next, err := s.sel.Select("svc")
					if err != nil {
						t.Error(err)
						return
					}
					node, err := next()
					if err != nil {
						t.Error(err)
						return
					}
					if node.Id != "n3" {
						time.Sleep(time.Millisecond)
						s.sel.Mark("svc", node, nil)
						time.Sleep(every)
						continue
					}
					if e := selStats(t, s.sel).Ejections; e > 0 {
						afterFirst.Add(1)
						mu.Lock()
						for int64(len(perEjection)) < int64(e) {
							perEjection = append(perEjection, 0)
						}
						perEjection[e-1]++
						mu.Unlock()
					}
					time.Sleep(timeout)
					s.sel.Mark("svc", node, errTimedOut)
					time.Sleep(every)
				}
			}()
		}
		wg.Wait()
		st := selStats(t, s.sel)
		require.GreaterOrEqual(t, st.Ejections, uint64(3), "n3 was ejected, readmitted on trial and ejected again")
		readmissions := st.Ejections - 1 // each failed trial ejects it again
		assert.LessOrEqual(t, afterFirst.Load(), int64(st.Ejections),
			"attempts on the black-holed n3 after its first ejection: %d over %d readmissions (per ejection %v); want one a readmission",
			afterFirst.Load(), readmissions, perEjection)
		t.Logf("%d attempts on n3 after its first ejection, %d ejections", afterFirst.Load(), st.Ejections)
	})
}

// A trial claim lasts as long as the maximum ejection, so that a base
// ejection shorter than the client's attempt timeout still costs one
// attempt per readmission, as docs/client.md promises ("at most one failed
// attempt, however many callers there are").
//
// Regression: a claim lapsed after the base ejection time. With
// WithEjectionTime(1s, 30s), tuned for fast recovery, and go-micro's default
// 5 s timeout, the claim lapsed while the claimer's attempt on a
// black-holed node still hung, and another caller got the node on trial
// every second: about 5 attempts per readmission, each hanging for 5 s.
func TestShortBaseEjectionStillCostsOneAttemptPerReadmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3, cache.WithEjectionTime(time.Second, 30*time.Second))
		const (
			callers = 20
			timeout = 5 * time.Second // go-micro's default request timeout
			every   = 50 * time.Millisecond
		)
		var afterFirst atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(3 * time.Minute)
		for g := 0; g < callers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					next, err := s.sel.Select("svc")
					if err != nil {
						t.Error(err)
						return
					}
					node, err := next()
					if err != nil {
						t.Error(err)
						return
					}
					if node.Id != "n3" {
						time.Sleep(time.Millisecond)
						s.sel.Mark("svc", node, nil)
						time.Sleep(every)
						continue
					}
					if selStats(t, s.sel).Ejections > 0 {
						afterFirst.Add(1)
					}
					time.Sleep(timeout)
					s.sel.Mark("svc", node, errTimedOut)
					time.Sleep(every)
				}
			}()
		}
		wg.Wait()
		st := selStats(t, s.sel)
		require.GreaterOrEqual(t, st.Ejections, uint64(3))
		assert.LessOrEqual(t, afterFirst.Load(), int64(st.Ejections),
			"attempts on the black-holed n3 after its first ejection: %d for %d ejections; want one a readmission", afterFirst.Load(), st.Ejections)
	})
}

// A trial claim is its caller's: a Mark of the node with an error that says
// nothing of it (a codec error of another caller's attempt, one begun
// before the ejection and still running) leaves the claim in place.
//
// Regression: any such Mark released the claim, and a second caller got the
// node on trial while the first attempt was still pending.
func TestAnotherCallersUnrelatedMarkKeepsTheTrialClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		s.ejectN3()
		time.Sleep(selStats(t, s.sel).Ejected[0].Remaining + time.Second)
		claim := func() bool { // a caller's pick of n3, its Mark left pending
			for i := 0; i < 300; i++ {
				next, err := s.sel.Select("svc")
				require.NoError(t, err)
				n, err := next()
				require.NoError(t, err)
				if n.Id == "n3" {
					return true
				}
			}
			return false
		}
		require.True(t, claim(), "first trial caller")
		require.False(t, claim(), "n3 is claimed")
		s.sel.Mark("svc", listedNode("n3"), merrors.InternalServerError("go.micro.client.codec", "bad response")) // another caller's old attempt
		assert.False(t, claim(), "a second caller got n3 on trial while the first caller's attempt is pending")
	})
}

// A trial claim whose Mark never comes lapses after the maximum ejection
// time, not before; Reset during a trial puts the node back for everyone;
// the claimer's own codec error lets the next caller try.
func TestTrialClaimLapsesAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		s.ejectN3()
		time.Sleep(selStats(t, s.sel).Ejected[0].Remaining + time.Second)
		var claimed *registry.Node // the node the last claimer got
		claim := func() bool {
			for i := 0; i < 300; i++ {
				next, err := s.sel.Select("svc")
				require.NoError(t, err)
				n, err := next()
				require.NoError(t, err)
				if n.Id == "n3" {
					claimed = n
					return true
				}
			}
			return false
		}
		require.True(t, claim())
		time.Sleep(119 * time.Second)
		assert.False(t, claim(), "claim held 119 s")
		time.Sleep(2 * time.Second)
		assert.True(t, claim(), "claim lapsed after 121 s, the maximum ejection time and a second")
		s.sel.Mark("svc", claimed, merrors.InternalServerError("go.micro.client.codec", "x")) // the claimer's own attempt
		assert.True(t, claim(), "after the claimer's codec error, the next caller tries")
		s.sel.Reset("svc")
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		picks := pickCounts(t, next, 300)
		assert.InDelta(t, 100, picks["n3"], 40, "after Reset during a trial, n3 is back for everyone (picks %v)", picks)
	})
}

// The caller holding n3's trial hangs and never Marks. Past the maximum
// ejection time, with sweeps in between, another caller's first pick takes
// the trial, and only one: the trial is neither lost by the sweep nor held
// for good.
func TestAHungTrialClaimLapsesAfterTheMaximumEjection(t *testing.T) {
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
