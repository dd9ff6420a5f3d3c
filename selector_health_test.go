//go:build go1.25

// testing/synctest needs the Go 1.23 timer semantics, which synctest_test.go
// and faults_test.go set for the test binary.

package cache_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// The passive health tests drive a selector as go-micro's client does, in
// a testing/synctest bubble where time is fake: ten minutes of calls take a
// fraction of a second, and the bubble fails the test if a goroutine of the
// cache outlives it.

// The errors that go-micro v4.11.0's client passes to Mark
// (client/rpc_client.go, rpc_codec.go) when it cannot reach a node.
var (
	errRefused = merrors.InternalServerError("go.micro.client",
		"connection error: dial tcp 127.0.0.1:1: connect: connection refused")
	errTimedOut = merrors.Timeout("go.micro.client", "context deadline exceeded")
	errBroken   = merrors.InternalServerError("go.micro.client.transport", "read tcp: connection reset by peer")
)

// healthSim is a service of nodes behind a cache and a selector, and a
// client that calls it every callEvery.
type healthSim struct {
	t   *testing.T
	reg *benchReg
	c   cache.Cache
	sel selector.Selector
	// answer returns the error of an attempt on the node with the id.
	answer func(id string) error
	// picks counts the attempts per node id.
	picks map[string]int
}

const callEvery = 10 * time.Millisecond

// newHealthSim starts the simulation with nodes n1 … n<nodes> of service
// "svc". It must run in a bubble; the cache stops when the test ends.
func newHealthSim(t *testing.T, nodes int, opts ...selector.Option) *healthSim {
	t.Helper()
	ids := make([]string, nodes)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%d", i+1)
	}
	r := newBenchReg(selService("1", ids...))
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	t.Cleanup(c.Stop)
	return &healthSim{
		t: t, reg: r, c: c, sel: cache.NewSelector(c, opts...),
		answer: func(string) error { return nil },
		picks:  map[string]int{},
	}
}

// call makes one call as go-micro's client does with its default retry
// policy (client.RetryOnError, 5 retries): Select, then an attempt on each
// node that Next hands out, each reported to Mark, retried on a timeout
// only. It fails the test if Select or Next does.
func (s *healthSim) call() {
	s.t.Helper()
	next, err := s.sel.Select("svc")
	require.NoError(s.t, err)
	for try := 0; try <= 5; try++ {
		node, err := next()
		require.NoError(s.t, err)
		s.picks[node.Id]++
		err = s.answer(node.Id)
		s.sel.Mark("svc", node, err)
		var e *merrors.Error
		if !errors.As(err, &e) || e.Code != 408 {
			return
		}
	}
}

// run calls every callEvery for d of fake time.
func (s *healthSim) run(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		s.call()
		time.Sleep(callEvery)
	}
}

// share returns the share of the picks since before that went to id.
func (s *healthSim) share(id string, before map[string]int) float64 {
	total, got := 0, s.picks[id]-before[id]
	for k, v := range s.picks {
		total += v - before[k]
	}
	return float64(got) / float64(total)
}

func (s *healthSim) snapshot() map[string]int {
	m := make(map[string]int, len(s.picks))
	for k, v := range s.picks {
		m[k] = v
	}
	return m
}

func selStats(t *testing.T, sel selector.Selector) cache.SelectorStats {
	t.Helper()
	s, ok := sel.(cache.Selector)
	require.True(t, ok, "the selector has no Stats method")
	return s.Stats()
}

func ejectedIDs(st cache.SelectorStats) []string {
	ids := []string{}
	for _, e := range st.Ejected {
		ids = append(ids, e.Id)
	}
	return ids
}

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
		{"any share", []selector.Option{cache.WithMaxEjectedPercent(100)}, 3},
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
				return errRefused
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
