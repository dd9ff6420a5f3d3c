package cache_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/transport"

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

// orderedOnce is a custom strategy that tries each node once per call, in
// list order, then has nothing more to offer: a "never retry the same
// node" strategy.
func orderedOnce(svcs []*registry.Service) selector.Next {
	var nodes []*registry.Node
	for _, s := range svcs {
		nodes = append(nodes, s.Nodes...)
	}
	i := 0
	return func() (*registry.Node, error) {
		if i >= len(nodes) {
			return nil, selector.ErrNoneAvailable
		}
		i++
		return nodes[i-1], nil
	}
}

// onlyNode is a custom strategy kept to one node (a zone of one).
func onlyNode(id string) selector.Strategy {
	return func(svcs []*registry.Service) selector.Next {
		return func() (*registry.Node, error) {
			for _, s := range svcs {
				for _, n := range s.Nodes {
					if n.Id == id {
						return n, nil
					}
				}
			}
			return nil, selector.ErrNoneAvailable
		}
	}
}

// n3 is dead and readmitted on trial before every call. A call's first
// pick may take the trial, and some do; its retries, after an attempt
// answered with an error, never do.
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

// With every node ejected and both readmitted on trial, a call's first pick
// takes one trial and fails it; its retry takes the other trial rather than
// an ejected node.
func TestARetryTakesATrialWhenNothingElseMay(t *testing.T) {
	for _, st := range trialStrategies {
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sel := newHealthSim(t, 2, cache.WithEjectAfter(1), cache.WithMaximumEjectedPercent(100),
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

// n3 is on trial, claimable, nobody holds it. A call with a strategy that
// offers each node once reaches its third attempt: the strategy offers n3,
// which a retry takes only when nothing else may be picked, and then ends.
// The retry takes the trial: another caller's first pick does not get n3,
// and Ignored stays 0.
//
// Regression: the retry got n3 without its trial, counted in Ignored though
// n3 was not ejected, and the next first pick took the same trial: two
// callers at once.
func TestARetryOfAnEndingStrategyTakesAnUnclaimedTrial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sel := newHealthSim(t, 3, cache.WithEjectAfter(1), cache.WithEjectionTime(time.Second, 10*time.Second)).sel
		failN(t, sel, listedNode("n3"), 1)
		require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, sel)))
		time.Sleep(2 * time.Second) // n3 is on trial, claimable
		require.Empty(t, selStats(t, sel).Ejected)

		a, err := sel.Select("svc", selector.WithStrategy(orderedOnce))
		require.NoError(t, err)
		var got []string
		var third *registry.Node
		for i := 0; i < 3; i++ {
			n, err := a()
			require.NoError(t, err)
			got = append(got, n.Id)
			third = n
		}
		t.Logf("call A's attempts: %v; Ignored %d", got, selStats(t, sel).Ignored)

		b, err := sel.Select("svc", selector.WithStrategy(onlyNode("n3")))
		require.NoError(t, err)
		bn, err := b()
		require.NoError(t, err)
		t.Logf("call B's first attempt: %s", bn.Id)
		assert.False(t, third.Id == "n3" && bn.Id == "n3",
			"n3's trial went to two callers at once: A's retry (unclaimed) and B's first attempt")
		assert.Zero(t, selStats(t, sel).Ignored, "Ignored counts a pick of an ejected node; no node is ejected")
	})
}

// The same with many calls in flight. The first retry that its strategy
// ends on n3 takes the trial; the strategies of the 9 others end on n3
// held, and they get it as a strategy that ends on ejected nodes does
// (counted in Ignored): it may keep to a zone.
//
// Regression: none of the retries took the trial.
func TestEndingStrategiesOfManyCallersShareOneTrial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sel := newHealthSim(t, 3, cache.WithEjectAfter(1), cache.WithEjectionTime(time.Second, 10*time.Second)).sel
		failN(t, sel, listedNode("n3"), 1)
		time.Sleep(2 * time.Second)
		holders := 0
		for call := 0; call < 10; call++ {
			next, err := sel.Select("svc", selector.WithStrategy(orderedOnce))
			require.NoError(t, err)
			var n *registry.Node
			for i := 0; i < 3; i++ {
				n, err = next()
				require.NoError(t, err)
			}
			if n.Id == "n3" {
				holders++
			}
		}
		assert.Equal(t, 10, holders, "calls whose strategy ended on n3")
		assert.EqualValues(t, 9, selStats(t, sel).Ignored, "calls that got n3 while another held its trial")
	})
}

// go-micro's RoundRobin, Random and the default: n3 is on trial and held
// by nobody, n1 ejected, n2 free. Retries get n2, never n3 nor n1; Ignored
// stays 0.
func TestARetryNeverTakesATrialWhileANodeIsFree(t *testing.T) {
	for _, st := range trialStrategies {
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sel := newHealthSim(t, 4, cache.WithEjectAfter(1), cache.WithMaximumEjectedPercent(75),
					cache.WithEjectionTime(time.Second, 10*time.Second)).sel
				failN(t, sel, listedNode("n3"), 1)
				failN(t, sel, listedNode("n4"), 1)
				time.Sleep(2 * time.Second) // n3, n4 on trial
				failN(t, sel, listedNode("n1"), 1)
				require.Equal(t, []string{"n1"}, ejectedIDs(selStats(t, sel)))
				for call := 0; call < 100; call++ {
					next, err := sel.Select("svc", st.opts...)
					require.NoError(t, err)
					first, err := next()
					require.NoError(t, err)
					require.NotEqual(t, "n1", first.Id)
					if first.Id != "n2" {
						sel.Mark("svc", first, handlerErr) // readmitted
						failN(t, sel, listedNode(first.Id), 1)
						time.Sleep(2 * time.Second)
						failN(t, sel, listedNode("n1"), 1)
						continue
					}
					for retry := 0; retry < 3; retry++ {
						n, err := next()
						require.NoError(t, err)
						require.Equal(t, "n2", n.Id, "call %d retry %d", call, retry)
					}
				}
				assert.Zero(t, selStats(t, sel).Ignored)
			})
		})
	}
}

// A custom strategy whose first answer is an error (a transient failure;
// go-micro's client fails that attempt and retries with the same Next). The
// next call of Next is the call's first attempt on a node, but a retry of
// the call, which has failed once: it does not take n2's trial while n1 is
// free. The strategy keeps offering n2 only, so the selector draws n1
// itself, as for a strategy that keeps offering nodes that may not be
// picked.
func TestAPickAfterAStrategyErrorIsARetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sel := newHealthSim(t, 2, cache.WithEjectAfter(1), cache.WithEjectionTime(time.Second, 10*time.Second)).sel
		failN(t, sel, listedNode("n2"), 1)
		time.Sleep(2 * time.Second)
		flaky := func(svcs []*registry.Service) selector.Next {
			inner := onlyNode("n2")(svcs)
			calls := 0
			return func() (*registry.Node, error) {
				if calls++; calls == 1 {
					return nil, fmt.Errorf("transient")
				}
				return inner()
			}
		}
		next, err := sel.Select("svc", selector.WithStrategy(flaky))
		require.NoError(t, err)
		_, err = next()
		require.Error(t, err)
		n, err := next()
		require.NoError(t, err)
		assert.Equal(t, "n1", n.Id, "the node handed out after a strategy error, with n2 on trial")
		assert.Zero(t, selStats(t, sel).Ignored)
	})
}

// go-micro's real client, explicit registry, loopback only: two live nodes
// and one that refuses connections, calls retried on any error
// (client.RetryAlways). Ejections are short, so the dead node is readmitted
// on trial again and again while 8 goroutines call at once; one attempt on
// a live node, while the dead one is on trial, reaches Mark as timed out
// (go-micro's 408, as a loaded machine gives now and then), and that node
// is ejected for it. Every call succeeds, the client passes the
// trial copy back to Mark, every attempt on the dead node ejects it again
// at once (no second caller ever got it while it was on trial), and only
// first attempts get it.
//
// Regressions: before trials went to first attempts only, a call whose
// attempt on a live node hung had its retries sent to the dead node's
// trials, one after the other, and failed. With the default share (one of
// three nodes ejected at most), the live node's ejection put the dead node
// back in rotation for every caller: 4 attempts on it out at once.
func TestGoMicroClientRetriesAroundADeadNodeOnTrial(t *testing.T) {
	okA := greeterNode(t, "ok-a", func(req, rsp *SelHello) error { rsp.Name = "hello " + req.Name; return nil })
	okB := greeterNode(t, "ok-b", func(req, rsp *SelHello) error { rsp.Name = "hello " + req.Name; return nil })
	dead := &registry.Node{Id: "regcache.greeter-dead", Address: deadAddress(t)}
	reg := registry.NewMemoryRegistry()
	require.NoError(t, reg.Register(&registry.Service{
		Name: "regcache.greeter", Version: "latest", Nodes: []*registry.Node{okA, okB, dead},
	}))
	c := cache.New(reg, cache.WithLogger(benchLogger))
	t.Cleanup(c.Stop)
	// Two of the three nodes may be ejected at once: the dead one and a
	// live one that timed out.
	inner := cache.NewSelector(c, cache.WithEjectAfter(1), cache.WithMaximumEjectedPercent(67),
		cache.WithEjectionTime(300*time.Millisecond, 300*time.Millisecond))
	sel := &markingSelector{Selector: inner, picks: map[string]int{}, marked: map[string][]error{}}
	cl := client.NewClient(
		client.Selector(sel),
		client.Registry(c),
		client.Transport(transport.NewHTTPTransport()),
		client.Broker(broker.NewMemoryBroker(broker.Registry(reg))),
		client.Retries(3),
		client.Retry(client.RetryAlways),
		client.WithLogger(benchLogger),
	)
	call := func() error {
		req := cl.NewRequest("regcache.greeter", "MarkGreeter.Hello", &SelHello{Name: "x"})
		return cl.Call(context.Background(), req, &SelHello{})
	}
	for selStats(t, inner).Ejections == 0 {
		require.NoError(t, call())
	}
	sel.mu.Lock()
	// An attempt on ok-a that times out while the dead node is on trial.
	sel.timeOut, sel.timeOutWhile = okA, dead.Address
	sel.mu.Unlock()
	var wg sync.WaitGroup
	var failedMu sync.Mutex
	var failed []error
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000 && selStats(t, inner).Ejections < 8; i++ {
				if err := call(); err != nil {
					failedMu.Lock()
					failed = append(failed, err)
					failedMu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	st := selStats(t, inner)
	sel.mu.Lock()
	defer sel.mu.Unlock()
	t.Logf("picks %v; failures %d, ejections %d, readmitted %d, ignored %d", sel.picks, st.Failures, st.Ejections, st.Readmitted, st.Ignored)
	liveFailures := 0
	for addr, errs := range sel.marked {
		for _, err := range errs {
			if err != nil && addr != dead.Address {
				liveFailures++
				t.Logf("a live node's attempt failed: %s: %v", addr, err)
			}
		}
	}
	assert.Empty(t, failed, "calls that failed with two live nodes and retries")
	require.Nil(t, sel.timeOut, "ok-a's attempt reported timed out")
	require.GreaterOrEqual(t, liveFailures, 1, "ok-a's attempt reported timed out")
	// The dead node is never back in rotation: each attempt on it was a
	// trial, which ejected it again (the live node's ejection counts too).
	// And one trial caller at a time: never two attempts on it out at
	// once, counted from Next to Mark.
	assert.LessOrEqual(t, uint64(sel.picks[dead.Address]), st.Ejections, "attempts on the dead node, each ejecting it")
	assert.Equal(t, 1, sel.mostInFlight[dead.Address], "most attempts on the dead node out at once")
	// Its trials go to first attempts: a call's retries go to the live
	// nodes, the retry of ok-a's timed-out attempt included. (Unless the
	// loaded machine timed out the other live node too: both live nodes
	// ejected leave only the trial to hand out.)
	if liveFailures == 1 {
		assert.Zero(t, sel.retried[dead.Address], "retries sent to the dead node")
	}
	assert.LessOrEqual(t, st.Ejections, st.Failures)
	// Every pick of the dead node came back to Mark.
	assert.Len(t, sel.marked[dead.Address], sel.picks[dead.Address], "Marks of the dead node's attempts")
	assert.Zero(t, st.Ignored)
}
