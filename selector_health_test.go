package cache_test

import (
	"context"
	"errors"
	"fmt"
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

// Which failures count against a node, and what a client then sees:
// a dead node gets few picks, handler errors never eject, a recovered node
// gets its share back, and the share of ejected nodes holds when many fail.

// TestDeadNodeGetsFewPicks: a node that refuses connections gets at most
// 2 % of the picks once it has failed a few times, however it fails; without
// passive health it gets its third.
func TestDeadNodeGetsFewPicks(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"connection refused", errRefused},
		{"timeout", errTimedOut},
		{"broken connection", errBroken},
		{"wrapped", fmt.Errorf("call wrapper: %w", errRefused)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newHealthSim(t, 3)
				s.answer = func(id string) error {
					if id == "n3" {
						return tt.err
					}
					return nil
				}
				for s.picks["n3"] < 3 { // the first few failures
					s.call()
					time.Sleep(callEvery)
				}
				before := s.snapshot()
				s.run(10 * time.Minute)
				share := s.share("n3", before)
				assert.LessOrEqual(t, share, 0.02, "share of the picks after the first few failures")
				// The others share its picks evenly.
				assert.InDelta(t, 0.5, s.share("n1", before), 0.02)
				st := selStats(t, s.sel)
				assert.Equal(t, []string{"n3"}, ejectedIDs(st))
				assert.GreaterOrEqual(t, st.Ejections, uint64(2), "readmitted on trial and ejected again")
				// Each readmission costs one failed attempt: the first
				// failure on trial ejects the node again.
				assert.LessOrEqual(t, s.picks["n3"]-before["n3"], int(st.Ejections))
				t.Logf("dead node: %.3f%% of %d picks in 10 min, %d ejections",
					100*share, s.picks["n1"]+s.picks["n2"]+s.picks["n3"], st.Ejections)
			})
		})
	}
	t.Run("without passive health", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3, cache.WithEjectAfter(0))
			s.answer = func(id string) error {
				if id == "n3" {
					return errRefused
				}
				return nil
			}
			s.run(time.Minute)
			assert.Greater(t, s.share("n3", nil), 0.25)
			assert.Zero(t, selStats(t, s.sel).Failures)
		})
	})
}

// TestHandlerErrorsNeverEject: nodes whose handler answers with errors keep
// their share of the picks, whatever the error.
func TestHandlerErrorsNeverEject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		handlerErrs := map[string]error{
			// A plain error, as the client sees any handler error it
			// cannot parse.
			"n1": errors.New("business rule violated"),
			// The service's own Id, a 500.
			"n2": merrors.InternalServerError("svc", "database down"),
			// 4xx, and the client's own errors about the request.
			"n3": merrors.BadRequest("go.micro.client", "bad request"),
		}
		calls := 0
		s.answer = func(id string) error {
			calls++
			if calls%2 == 0 {
				return nil
			}
			return handlerErrs[id]
		}
		s.run(5 * time.Minute)
		for _, id := range []string{"n1", "n2", "n3"} {
			assert.InDelta(t, 1.0/3, s.share(id, nil), 0.03, id)
		}
		st := selStats(t, s.sel)
		assert.Zero(t, st.Failures)
		assert.Zero(t, st.Ejections)
		assert.Empty(t, st.Ejected)
	})
}

// A connection error wrapped several times at once (fmt.Errorf with two %w,
// errors.Join: Unwrap() []error) counts as one: go-micro's client passes to
// Mark the error that its call wrappers return.
//
// Regression: classify walked the chain with errors.Unwrap, which follows
// single wrapping only, and read such an error as "reached". A wrapper that
// annotated the client's connection error this way turned passive health
// off for every node: a dead node was never ejected, and its failures even
// counted as answers (reset its count, ended its trial).
func TestMultiWrappedConnectionErrorsCount(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"fmt.Errorf with two %w", fmt.Errorf("call wrapper: %w (%w)", errRefused, context.DeadlineExceeded)},
		{"errors.Join", errors.Join(errRefused, errors.New("span: rpc failed"))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newHealthSim(t, 3)
				for i := 0; i < 3; i++ {
					_, err := s.sel.Select("svc")
					require.NoError(t, err)
					s.sel.Mark("svc", listedNode("n3"), tt.err)
				}
				st := selStats(t, s.sel)
				assert.Equal(t, []string{"n3"}, ejectedIDs(st), "n3 after 3 connection errors wrapped by %s (Failures %d)", tt.name, st.Failures)

				// On trial, such a failure readmits the node in full.
				s.sel.Reset("svc")
				failN(t, s.sel, listedNode("n3"), 3)
				require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, s.sel)))
				time.Sleep(time.Minute) // the ejection is over: n3 on trial
				var trial *registry.Node
				for i := 0; i < 300 && trial == nil; i++ {
					next, err := s.sel.Select("svc")
					require.NoError(t, err)
					if n, _ := next(); n.Id == "n3" {
						trial = n
					}
				}
				require.NotNil(t, trial)
				s.sel.Mark("svc", trial, tt.err) // the trial attempt could not connect
				st = selStats(t, s.sel)
				assert.Zero(t, st.Readmitted, "Readmitted after n3's trial attempt failed to connect (%s)", tt.name)
				next, err := s.sel.Select("svc")
				require.NoError(t, err)
				picks := pickCounts(t, next, 300)
				assert.Zero(t, picks["n3"], "picks of n3 after its trial attempt failed to connect (picks %v)", picks)
			})
		})
	}
}

// TestRecoveredNodeGetsItsShareBack: a node that was dead long enough to
// reach the longest ejection is readmitted within that time of its
// recovery, and then gets its share.
func TestRecoveredNodeGetsItsShareBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		dead := true
		s.answer = func(id string) error {
			if id == "n3" && dead {
				return errRefused
			}
			return nil
		}
		s.run(10 * time.Minute)
		dead = false
		recovered := time.Now()
		for start := s.picks["n3"]; s.picks["n3"] == start && time.Since(recovered) < time.Hour; {
			s.call()
			time.Sleep(callEvery)
		}
		back := time.Since(recovered)
		assert.LessOrEqual(t, back, 2*time.Minute, "the longest ejection is 2 min")
		before := s.snapshot()
		s.run(time.Minute)
		assert.InDelta(t, 1.0/3, s.share("n3", before), 0.04, "share in the minute after")
		st := selStats(t, s.sel)
		assert.Empty(t, st.Ejected)
		assert.EqualValues(t, 1, st.Readmitted)
		t.Logf("readmitted %v after its recovery", back)
	})
}

// TestEveryNodeFailing: when every node fails, Select and Next keep handing
// out nodes, all of them.
func TestEveryNodeFailing(t *testing.T) {
	for _, tt := range []struct {
		name       string
		opts       []selector.Option
		maxEjected int
	}{
		{"default share", nil, 1},
		{"any share", []selector.Option{cache.WithMaximumEjectedPercent(100)}, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newHealthSim(t, 3, tt.opts...)
				s.answer = func(string) error { return errRefused }
				s.run(10 * time.Minute) // call fails the test if Select or Next does
				for _, id := range []string{"n1", "n2", "n3"} {
					assert.Greater(t, s.picks[id], 0, id)
				}
				st := selStats(t, s.sel)
				assert.LessOrEqual(t, len(st.Ejected), tt.maxEjected)
				if tt.maxEjected == 3 {
					assert.Positive(t, st.Ignored, "picks of ejected nodes when all are")
				} else {
					assert.Positive(t, st.Refused)
				}
			})
		})
	}
}

// TestMaxEjectedShare: with 7 of 10 nodes dead, half are ejected at most,
// and the others stay in rotation.
func TestMaxEjectedShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 10)
		s.answer = func(id string) error {
			if id >= "n4" || id == "n10" { // n4 … n10; n10 sorts before n2
				return errDialTimedOut
			}
			return nil
		}
		s.run(2 * time.Minute)
		st := selStats(t, s.sel)
		assert.Len(t, st.Ejected, 5)
		assert.Positive(t, st.Refused)
		for _, e := range st.Ejected {
			assert.NotContains(t, []string{"n1", "n2", "n3"}, e.Id)
		}
	})
}
