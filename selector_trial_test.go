//go:build go1.25

package cache_test

import (
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

// A node on trial is a probe of a node that was dead. go-micro's client
// takes every attempt of a call from one Next, so a Next's later picks
// are the retries of a call whose attempts have failed so far: its last
// attempt handed to the probe fails the call, where a node known to answer
// would have saved it. Only a Next's first pick takes a trial, unless no
// other node may be handed out.

// trialStrategies are the strategies a pick goes through: the default,
// which avoids ejected nodes itself, and custom ones, which the selector
// wraps.
var trialStrategies = []struct {
	name string
	opts []selector.SelectOption
}{
	{"default", nil},
	{"go-micro's RoundRobin", []selector.SelectOption{selector.WithStrategy(selector.RoundRobin)}},
	{"go-micro's Random", []selector.SelectOption{selector.WithStrategy(selector.Random)}},
	{"a custom strategy", []selector.SelectOption{selector.WithStrategy(func(svcs []*registry.Service) selector.Next {
		next := selector.Random(svcs)
		return func() (*registry.Node, error) { return next() }
	})}},
}

// handlerErr is an answer: the node was reached.
var handlerErr = merrors.InternalServerError("svc", "boom")

// TestARetryTakesNoNodeOnTrial: n3 is dead and readmitted on trial before
// every call. A call's first pick may take the trial, and some do; its
// retries, after an attempt answered with an error, never do.
func TestARetryTakesNoNodeOnTrial(t *testing.T) {
	for _, st := range trialStrategies {
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sel := newHealthSim(t, 3, cache.WithEjectAfter(1), cache.WithEjectionTime(time.Second, time.Second)).sel
				failN(t, sel, listedNode("n3"), 1)
				require.Len(t, selStats(t, sel).Ejected, 1)
				firstTrials := 0
				for call := 0; call < 200; call++ {
					time.Sleep(2 * time.Second) // the ejection is over: n3 is on trial
					next, err := sel.Select("svc", st.opts...)
					require.NoError(t, err)
					first, err := next()
					require.NoError(t, err)
					if first.Id == "n3" {
						firstTrials++
						sel.Mark("svc", first, errRefused) // ejected again
						continue
					}
					sel.Mark("svc", first, handlerErr)
					for retry := 0; retry < 4; retry++ {
						n, err := next()
						require.NoError(t, err)
						require.NotEqual(t, "n3", n.Id, "call %d, retry %d took the trial", call, retry)
						sel.Mark("svc", n, handlerErr)
					}
				}
				assert.Positive(t, firstTrials, "first picks that took the trial")
				assert.Zero(t, selStats(t, sel).Ignored)
			})
		})
	}
}

// TestARetryTakesATrialWhenNothingElseMay: with every node ejected and
// both readmitted on trial, a call's first pick takes one trial and fails
// it; its retry takes the other trial rather than an ejected node.
func TestARetryTakesATrialWhenNothingElseMay(t *testing.T) {
	for _, st := range trialStrategies {
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sel := newHealthSim(t, 2, cache.WithEjectAfter(1), cache.WithMaxEjectedPercent(100),
					cache.WithEjectionTime(time.Second, time.Second)).sel
				failN(t, sel, listedNode("n1"), 1)
				failN(t, sel, listedNode("n2"), 1)
				require.Len(t, selStats(t, sel).Ejected, 2)
				time.Sleep(2 * time.Second)
				next, err := sel.Select("svc", st.opts...)
				require.NoError(t, err)
				first, err := next()
				require.NoError(t, err)
				sel.Mark("svc", first, errRefused)
				second, err := next()
				require.NoError(t, err)
				assert.NotEqual(t, first.Id, second.Id, "the retry got the node ejected again, not the one on trial")
				assert.Zero(t, selStats(t, sel).Ignored, "picks of an ejected node")
				// The retry holds the trial: a third pick has nothing but
				// ejected or claimed nodes, and says so.
				_, err = next()
				require.NoError(t, err)
				assert.EqualValues(t, 1, selStats(t, sel).Ignored)
			})
		})
	}
}

// TestTheSweepKeepsANodeOnTrial: a node whose ejection ended long ago and
// that no caller has tried since is still on trial when the sweep of idle
// state runs: one caller at a time gets it, its first failure ejects it
// again. Forgotten, it would go to every caller at once and take 3
// failures to eject.
func TestTheSweepKeepsANodeOnTrial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sel := newHealthSim(t, 4, cache.WithEjectionTime(time.Second, 10*time.Second)).sel
		failN(t, sel, listedNode("n4"), 3)
		require.Equal(t, []string{"n4"}, ejectedIDs(selStats(t, sel)))
		time.Sleep(time.Minute)            // the ejection is long over; nobody called
		failN(t, sel, listedNode("n1"), 1) // a failure Mark sweeps idle state
		got := 0
		var trial *registry.Node
		for call := 0; call < 100; call++ {
			next, err := sel.Select("svc")
			require.NoError(t, err)
			n, err := next()
			require.NoError(t, err)
			if n.Id == "n4" {
				got++
				trial = n
			}
		}
		require.Equal(t, 1, got, "first picks of n4 with its trial out")
		sel.Mark("svc", trial, errRefused)
		assert.Equal(t, []string{"n4"}, ejectedIDs(selStats(t, sel)), "ejected again by the trial's one failure")
	})
}
