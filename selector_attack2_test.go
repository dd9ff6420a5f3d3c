//go:build go1.25

package cache_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/transport"

	cache "github.com/regcache/cache"
)

// Second round of black-box attacks on the passive health of
// cache.NewSelector, through the public API only. Each test states what the
// behaviour must be; the comment says what went wrong before and why it
// matters to a user. The tests marked "held" passed from the start and
// stay as guards. (docs/client.md, "Limits", lists what was found and is
// documented rather than changed.)

// foreignCache is a Cache that is not regcache's own type: a user's
// wrapper around regcache's cache (for metrics, tracing, a fallback to a
// second cache, ...). NewSelector accepts any Cache. If list is set,
// Lookup answers it instead of the wrapped cache (a wrapper that merges or
// re-slices lists, or serves from one of several replicas).
type foreignCache struct {
	cache.Cache
	list atomic.Pointer[[]*registry.Service]
}

func (f *foreignCache) Lookup(name string) ([]*registry.Service, error) {
	if p := f.list.Load(); p != nil && name == "svc" {
		return *p, nil
	}
	return f.Cache.Lookup(name)
}

func (f *foreignCache) answer(svcs []*registry.Service) { f.list.Store(&svcs) }

// newForeign returns regcache's cache over a registry of "svc" with the
// nodes, and the same cache wrapped.
func newForeign(t *testing.T, ids ...string) (*benchReg, cache.Cache, *foreignCache) {
	t.Helper()
	r := newBenchReg(selService("1", ids...))
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	t.Cleanup(c.Stop)
	return r, c, &foreignCache{Cache: c}
}

// F1. With a Cache that is not regcache's own, a failure Mark has no list
// to count the share on (held is nil), and a service's state gets its list
// only from the next Select that runs after the state exists. Every
// failure reported before that (the retries of in-flight calls whose
// Select ran while the service had no state: exactly the calls that meet a
// zone outage first) is of a node "off the list": ejected with no cap and
// hidden from Stats().Ejected. With 3 of 4 nodes failing, 3 are ejected
// (cap: 2), every Next in flight sends all its retries to the one node
// left, and an operator looking at Stats sees no ejection at all.
func TestForeignCacheFailuresBeforeTheNextSelectAreCapped(t *testing.T) {
	for _, own := range []bool{true, false} {
		name := "wrapped cache"
		if own {
			name = "regcache's cache (control)"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, c, f := newForeign(t, "n1", "n2", "n3", "n4")
				var cc cache.Cache = f
				if own {
					cc = c
				}
				sel := cache.NewSelector(cc, cache.WithEjectionTime(time.Hour, time.Hour))
				next, err := sel.Select("svc") // in-flight calls: Selected before any failure
				require.NoError(t, err)
				for _, id := range []string{"n1", "n2", "n3"} { // their attempts fail
					for k := 0; k < 3; k++ {
						sel.Mark("svc", listedNode(id), errRefused)
					}
				}
				st := selStats(t, sel)
				picks := pickCounts(t, next, 400)
				assert.Len(t, st.Ejected, 2, "Stats().Ejected of 4 listed nodes with 3 failing, cap 50 %%: %s (Ejections %d, Refused %d)", ejectedRows(st), st.Ejections, st.Refused)
				assert.Positive(t, picks["n1"]+picks["n2"]+picks["n3"], "picks of the failing nodes: with the cap at 2 of 4, one stays in rotation (picks %v)", picks)
				_, err = sel.Select("svc") // the next call
				require.NoError(t, err)
				t.Logf("after the next Select: Ejected %s", ejectedRows(selStats(t, sel)))
			})
		})
	}
}

// F3. With a Cache that is not regcache's own, a list with a nil node (a
// registry plugin that leaves holes, a wrapper that filters in place)
// makes every Select panic once the service has passive health state:
// Select indexes the whole list (nodeKey(nil)). Without state the same
// Select works (the nil node is merely one of the picks), so one
// connection failure turns a service with a bad entry into a panic on
// every call.
func TestForeignCacheNilNodeDoesNotPanicSelect(t *testing.T) {
	_, _, f := newForeign(t, "n1", "n2")
	svc := selService("1", "n1", "n2")
	svc.Nodes = append(svc.Nodes, nil)
	f.answer([]*registry.Service{svc})
	sel := cache.NewSelector(f)
	_, err := sel.Select("svc")
	require.NoError(t, err, "Select without state")
	sel.Mark("svc", listedNode("n1"), errRefused) // one connection failure
	assert.NotPanics(t, func() {
		next, err := sel.Select("svc")
		if err == nil {
			for i := 0; i < 20; i++ {
				_, _ = next()
			}
		}
	}, "Select of a list with a nil node, after one failure Mark")
}

// F4. Init(WithEjectionTime(base, max)) does not apply to the ejections
// running: a node ejected under a long maximum stays out for the old time,
// whatever the new maximum. An operator who finds the ejection time far
// too long (1 h, a dead node's replacement reusing its Id and address) and
// lowers it with Init still waits the hour: the only ways to get the node
// back are Reset or turning passive health off and on, which forget every
// failing node (of the service, or of all).
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

func remaining(st cache.SelectorStats) []time.Duration {
	out := []time.Duration{}
	for _, e := range st.Ejected {
		out = append(out, e.Remaining)
	}
	return out
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

// F5. A custom strategy's error is dropped once it has returned an ejected
// node: skipEjected breaks out and draws a node itself among all the
// nodes of the list, also those the strategy never offered. With a
// zone-local strategy whose zone's nodes are all ejected, Next returns a
// node of another zone instead of the strategy's ErrNoneAvailable (or, as
// when every node a caller may pick is ejected, the ejected node it
// offered). If the strategy's very first answer is the error, Next
// returns it: the outcome depends on the order of the strategy's answers.
func TestCustomStrategyErrorIsNotReplacedByANodeItNeverOffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 4, cache.WithMaxEjectedPercent(100))
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

// ---- held ----

// H1 (held). Duplicate Ids at different addresses within one list are
// distinct nodes: ejecting one leaves the other in rotation, and the share
// counts both.
func TestHeldDuplicateIdsAreDistinctNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := selService("1", "n1", "n2")
		svc.Nodes = append(svc.Nodes, &registry.Node{Id: "n1", Address: "n1:9090"})
		r := newBenchReg(svc)
		c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
		defer c.Stop()
		sel := cache.NewSelector(c, cache.WithEjectionTime(time.Hour, time.Hour))
		failN(t, sel, listedNode("n1"), 3)
		st := selStats(t, sel)
		require.Len(t, st.Ejected, 1)
		assert.Equal(t, "n1:8080", st.Ejected[0].Address)
		next, err := sel.Select("svc")
		require.NoError(t, err)
		picks := map[string]int{}
		for i := 0; i < 300; i++ {
			n, err := next()
			require.NoError(t, err)
			picks[n.Id+"@"+n.Address]++
		}
		assert.Zero(t, picks["n1@n1:8080"])
		assert.Positive(t, picks["n1@n1:9090"])
	})
}

// H2 (held). A Mark with a nil node, an empty service, and nodes without
// Id or address do not panic; strategies returning nil or an error at once
// pass it on.
func TestHeldOddInputs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		assert.NotPanics(t, func() {
			s.sel.Mark("svc", nil, errRefused)
			s.sel.Mark("", listedNode("n1"), errRefused)
			s.sel.Mark("svc", &registry.Node{}, errRefused)
			s.sel.Mark("svc", &registry.Node{}, nil)
			s.sel.Mark("svc", &registry.Node{Id: "n1"}, errRefused)
		})
		boom := errors.New("boom")
		next, err := s.sel.Select("svc", selector.WithStrategy(func([]*registry.Service) selector.Next {
			return func() (*registry.Node, error) { return nil, boom }
		}))
		require.NoError(t, err)
		_, err = next()
		assert.ErrorIs(t, err, boom)
	})
}

// resliced is a Cache that is not regcache's own and whose Lookup returns
// a new list slice on every call (the same services): a wrapper that
// merges the lists of two caches, or appends a canary version.
type resliced struct{ cache.Cache }

func (r resliced) Lookup(name string) ([]*registry.Service, error) {
	svcs, err := r.Cache.Lookup(name)
	if err != nil {
		return nil, err
	}
	return append([]*registry.Service(nil), svcs...), nil
}

// F8. Refused is documented as "the ejections not made because the
// service had its maximum share of nodes ejected already", but it counts
// every failure of a node kept in by the share: one dead node that the
// share keeps in rotation adds one per failed call, 28 for 30 failures,
// thousands a minute under load. An alert on Refused (the share is
// exhausted: more nodes dead than the cap) cannot tell one dead node from
// many; the log, which says it once per node, can.
func TestRefusedCountsEjectionsNotFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 4, cache.WithEjectionTime(time.Hour, time.Hour))
		failN(t, s.sel, listedNode("n1"), 3)
		failN(t, s.sel, listedNode("n2"), 3)
		require.Len(t, selStats(t, s.sel).Ejected, 2)
		failN(t, s.sel, listedNode("n3"), 30) // dead, kept in by the share
		st := selStats(t, s.sel)
		assert.EqualValues(t, 1, st.Refused, "Refused after one node kept in by the share failed 30 times (Failures %d)", st.Failures)
	})
}

// H3 (held). A node whose address flips on every registration, with a
// failure of its old address in flight each time, and an Id failing at
// ever-new addresses off the list, keep the state of a service bounded:
// the heap does not grow with the number of addresses.
func TestHeldOneIdAtEverNewAddressesStaysBounded(t *testing.T) {
	heap := func(addresses int) int64 {
		var grew int64
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3, cache.WithEjectionTime(time.Hour, time.Hour))
			_, err := s.sel.Select("svc")
			require.NoError(t, err)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := 0; i < addresses; i++ {
				s.sel.Mark("svc", &registry.Node{Id: "n3", Address: fmt.Sprintf("10.2.%d.%d:%d", i/60000, (i/250)%240, 1000+i%250)}, errRefused)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			grew = int64(after.HeapAlloc) - int64(before.HeapAlloc)
			runtime.KeepAlive(s)
		})
		return grew
	}
	small, big := heap(500), heap(50_000)
	t.Logf("heap kept after failures of one Id at 500 addresses: %d B, at 50 000: %d B", small, big)
	assert.Less(t, big, small+2<<20, "state grows with the addresses of one Id (unbounded, 50 000 states would keep over 7 MB)")
}

// H4 (held). go-micro's real client, explicit registry, loopback only: two
// live nodes and one that refuses connections, calls retried on any error
// (client.RetryAlways). Ejections are short, so the dead node is
// readmitted on trial again and again while 8 goroutines call at once:
// every call succeeds, the client passes the trial copy back to Mark,
// every attempt on the dead node ejects it again at once (no second caller
// ever got it while it was on trial), and only first attempts get it.
// Before trials went to first attempts only, a call whose attempt on a
// live node hung had its retries sent to the dead node's trials, one
// after the other, and failed.
func TestHeldGoMicroClientRetriesAroundADeadNodeOnTrial(t *testing.T) {
	okA := greeterNode(t, "ok-a", func(req, rsp *SelHello) error { rsp.Name = "hello " + req.Name; return nil })
	okB := greeterNode(t, "ok-b", func(req, rsp *SelHello) error { rsp.Name = "hello " + req.Name; return nil })
	dead := &registry.Node{Id: "regcache.greeter-dead", Address: deadAddress(t)}
	reg := registry.NewMemoryRegistry()
	require.NoError(t, reg.Register(&registry.Service{
		Name: "regcache.greeter", Version: "latest", Nodes: []*registry.Node{okA, okB, dead},
	}))
	c := cache.New(reg, cache.WithLogger(benchLogger))
	t.Cleanup(c.Stop)
	inner := cache.NewSelector(c, cache.WithEjectAfter(1), cache.WithEjectionTime(300*time.Millisecond, 300*time.Millisecond))
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
	var wg sync.WaitGroup
	var failedMu sync.Mutex
	var failed []error
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 400 && selStats(t, inner).Ejections < 5; i++ {
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
	// One trial caller at a time: never two attempts on the dead node
	// out at once, counted from Next to Mark. (Failures and Ejections
	// would say the same on a quiet machine, but a live node's timeout
	// under load adds a failure, and an ejection only when the share
	// allows one.)
	assert.Equal(t, 1, sel.mostInFlight[dead.Address], "most attempts on the dead node out at once")
	// Its trials go to first attempts: a call's retries go to the live
	// nodes. (Unless a live node failed too: go-micro's connection pool
	// now and then holds an attempt on a live node for its 5 s connection
	// timeout, and a live node may then be ejected in the dead one's
	// place.)
	if liveFailures == 0 {
		assert.Zero(t, sel.retried[dead.Address], "retries sent to the dead node")
	}
	assert.LessOrEqual(t, st.Ejections, st.Failures)
	// Every pick of the dead node came back to Mark.
	assert.Len(t, sel.marked[dead.Address], sel.picks[dead.Address], "Marks of the dead node's attempts")
	assert.Zero(t, st.Ignored)
}

// F9. Two Inits at once: each swaps the options in, then
// installs its passive health configuration, in either order. The
// selector can end with the options of one Init (Options() shows its
// strategy and its WithEjectAfter) and the passive health of the other:
// turned off while Options says on, or the reverse, until the next Init.
// The window is a few instructions wide; the test counts how often it is
// hit in many rounds.
func TestConcurrentInitsLeaveOptionsAndHealthAgreeing(t *testing.T) {
	r := newBenchReg(selService("1", "n1", "n2", "n3"))
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	defer c.Stop()
	_, err := c.Lookup("svc")
	require.NoError(t, err)
	stratOff := func(svcs []*registry.Service) selector.Next { return selector.Random(svcs) }
	stratOn := func(svcs []*registry.Service) selector.Next { return selector.RoundRobin(svcs) }
	offPtr := reflect.ValueOf(selector.Strategy(stratOff)).Pointer()
	mismatch := 0
	const rounds = 100000
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

// F10. A trial claim lapses after the base ejection time, whatever the
// client's attempt timeout. With a base ejection below the time an attempt
// on a black-holed node takes to fail (WithEjectionTime(1s, 30s), tuned for
// fast recovery, and go-micro's default 5 s timeout), the claim lapses
// while the claimer's attempt is still hanging: another caller gets the
// node on trial every second until the first attempt times out, so each
// readmission costs about 5 attempts, each hanging for 5 s, not the "at
// most one failed attempt, however many callers there are" that
// docs/client.md promises. Nothing in the options warns that base must
// exceed the client's timeout.
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

// H5 (held). A node ejected while off the list joins with the share at
// 100 % (it stays ejected, with the others) and at 0 % (one ejection
// stays: the one that ends last).
func TestHeldOffListEjectionJoiningAtTheExtremes(t *testing.T) {
	for _, tt := range []struct {
		pct  int
		want []string
	}{{100, []string{"n1", "n3"}}, {0, []string{"n3"}}} {
		t.Run(fmt.Sprint(tt.pct, "%"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newHealthSim(t, 2, cache.WithMaxEjectedPercent(tt.pct), cache.WithEjectionTime(time.Minute, time.Hour))
				_, err := s.sel.Select("svc")
				require.NoError(t, err)
				failN(t, s.sel, listedNode("n1"), 3) // listed, ejected for 1 min
				time.Sleep(time.Second)              // n3's ejection will end after n1's
				for k := 0; k < 3; k++ {             // n3, off the list, ejected
					s.sel.Mark("svc", listedNode("n3"), errRefused)
				}
				s.event("create", selService("1", "n3"))
				_, err = s.sel.Select("svc")
				require.NoError(t, err)
				st := selStats(t, s.sel)
				assert.Equal(t, tt.want, ejectedIDs(st), "Ejected %s", ejectedRows(st))
				next, err := s.sel.Select("svc")
				require.NoError(t, err)
				picks := pickCounts(t, next, 300)
				for _, id := range tt.want {
					assert.Zero(t, picks[id], "picks of ejected %s (picks %v)", id, picks)
				}
			})
		})
	}
}

// H6 (held, run with -race). A foreign Cache whose lists alternate between
// an old and a new one, under concurrent Selects, Nexts, Marks (trial
// copies included), Resets and Inits: no race, no panic, and once every
// node answers again nothing stays ejected.
func TestHeldForeignCacheConcurrentChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, f := newForeign(t, "n1", "n2", "n3", "n4")
		sel := cache.NewSelector(f, cache.WithEjectionTime(time.Second, 4*time.Second))
		lists := [][]*registry.Service{
			{selService("1", "n1", "n2", "n3", "n4")},
			{selService("1", "n1", "n2")},
			{selService("1", "n2", "n3", "n4")},
		}
		f.answer(lists[0])
		var wg sync.WaitGroup
		end := time.Now().Add(time.Minute)
		for g := 0; g < 6; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 3))
				for time.Now().Before(end) {
					switch rng.IntN(10) {
					case 0:
						f.answer(lists[rng.IntN(len(lists))])
					case 1:
						sel.Reset("svc")
					case 2:
						_ = sel.Init(cache.WithMaxEjectedPercent([]int{0, 50, 100}[rng.IntN(3)]))
					default:
						next, err := sel.Select("svc")
						if err != nil {
							break
						}
						n, err := next()
						if err != nil || n == nil {
							t.Errorf("next: %v %v", n, err)
							return
						}
						var e error
						if n.Id == "n3" || n.Id == "n4" {
							e = errRefused
						}
						time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
						sel.Mark("svc", n, e)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}(g)
		}
		wg.Wait()
		time.Sleep(10 * time.Second)
		f.answer(lists[0])
		for i := 1; i <= 4; i++ {
			sel.Mark("svc", listedNode(fmt.Sprintf("n%d", i)), nil)
		}
		_, err := sel.Select("svc")
		require.NoError(t, err)
		assert.Empty(t, selStats(t, sel).Ejected)
	})
}

// F11. classify walks the error chain with errors.Unwrap, which follows
// only single wrapping: an error with several wrapped errors (fmt.Errorf
// with two %w, errors.Join: Unwrap() []error, common since Go 1.20) is
// read as "reached". go-micro's client passes to Mark the error that its
// call wrappers return, so a wrapper that annotates the client's
// connection error this way turns off passive health for every node: a
// dead node is never ejected, and its failures even count as answers
// (reset its count, end its trial).
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

// lineLog records log lines; with gate set, it blocks every line that
// contains on until gate is closed.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	on    string
	gate  chan struct{}
}

func (l *lineLog) Init(...logger.Option) error                 { return nil }
func (l *lineLog) Options() logger.Options                     { return logger.Options{} }
func (l *lineLog) Fields(map[string]interface{}) logger.Logger { return l }
func (l *lineLog) String() string                              { return "lines" }
func (l *lineLog) Log(level logger.Level, v ...interface{})    { l.add(fmt.Sprint(v...)) }
func (l *lineLog) Logf(level logger.Level, format string, v ...interface{}) {
	l.add(fmt.Sprintf(format, v...))
}
func (l *lineLog) add(s string) {
	if l.gate != nil && strings.Contains(s, l.on) {
		<-l.gate
	}
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}
func (l *lineLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// H7 (held). A logger that hangs on the ejection line blocks only the
// Mark that ejected: Selects, picks, other Marks (of the same service)
// and Stats go on, and the node is out already.
func TestHeldHangingLoggerBlocksOnlyTheEjectingMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &lineLog{on: "ejected", gate: make(chan struct{})}
		r := newBenchReg(selService("1", "n1", "n2", "n3"))
		c := cache.New(r, cache.WithLogger(l), cache.WithTTL(time.Hour))
		defer c.Stop()
		sel := cache.NewSelector(c)
		failN(t, sel, listedNode("n3"), 2)
		done := make(chan struct{})
		go func() {
			defer close(done)
			sel.Mark("svc", listedNode("n3"), errRefused) // ejects, then hangs in the logger
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("the logger did not block")
		default:
		}
		next, err := sel.Select("svc")
		require.NoError(t, err)
		picks := pickCounts(t, next, 300)
		assert.Zero(t, picks["n3"])
		sel.Mark("svc", listedNode("n2"), errRefused)
		sel.Mark("svc", listedNode("n2"), nil)
		sel.Mark("svc", listedNode("n3"), errRefused)
		assert.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, sel)))
		close(l.gate)
		<-done
	})
}

// F13. Stats().Ejected shows the nodes of the cached list as the state
// last matched it, at the last Select or failure Mark of the service, not
// the list the cache holds: a node ejected and then deregistered is still
// shown (and counted in the share) until the service's next call, and the
// share cap "enforced on every list change" is enforced only then. With
// no traffic to the service (its callers gave up, or the admin page is
// read during an incident) the status page shows a node the cache no
// longer lists, as ejected.
func TestStatsEjectedFollowsTheCachedList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 4, cache.WithEjectionTime(time.Hour, time.Hour))
		failN(t, s.sel, listedNode("n3"), 3)
		require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, s.sel)))
		s.event("delete", selService("1", "n3")) // n3 deregistered
		svcs, err := s.c.Lookup("svc")
		require.NoError(t, err)
		require.Len(t, svcs[0].Nodes, 3, "the cache no longer lists n3")
		st := selStats(t, s.sel)
		assert.Empty(t, st.Ejected, "Stats().Ejected after n3 left the cached list: %s", ejectedRows(st))
	})
}

// H8 (held). regcache's own cache drops nil nodes, in a registry's answer
// and in watch events, so Select, Next and Mark never meet one.
func TestHeldNilNodesInEventsNeverReachTheSelector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		_, err := s.sel.Select("svc")
		require.NoError(t, err)
		svc := selService("1", "n4")
		svc.Nodes = append([]*registry.Node{nil}, svc.Nodes...)
		s.event("update", svc)
		s.event("delete", &registry.Service{Name: "svc", Version: "1", Nodes: []*registry.Node{nil}})
		s.sel.Mark("svc", listedNode("n1"), errRefused) // the service has state
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		for i := 0; i < 100; i++ {
			n, err := next()
			require.NoError(t, err)
			require.NotNil(t, n)
		}
	})
}

// F14. go-micro's client never calls Select for a client.WithAddress call,
// so passive health cannot change where such a call goes; yet its
// failures count in Failures, eject the address (Ejections), and its next
// answer counts in Readmitted, while Stats().Ejected, by design, never
// shows it. A client that makes WithAddress calls to a flaky address (a
// sidecar, a static dependency) shows a stream of ejections and
// readmissions, none of which changed a pick, and that no row explains:
// the counters and the rows disagree, and an alert on Ejections fires for
// nothing.
func TestWithAddressFailuresDoNotCountAsEjections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		_, err := s.sel.Select("svc")
		require.NoError(t, err)
		direct := withAddressNode("10.9.9.9:8080")
		for round := 0; round < 5; round++ {
			for i := 0; i < 3; i++ {
				s.sel.Mark("svc", direct, errRefused)
			}
			time.Sleep(3 * time.Minute)
			s.sel.Mark("svc", direct, nil)
		}
		st := selStats(t, s.sel)
		assert.Zero(t, st.Ejections+st.Readmitted, "Ejections %d and Readmitted %d from WithAddress calls alone, which no pick ever skipped (Ejected %s)", st.Ejections, st.Readmitted, ejectedRows(st))
	})
}

// F15. The 64 states a service keeps off its list are shared by two kinds
// of node: nodes that left the list (whose state keeps an old Next, and the
// node if it comes back, from a dead node) and client.WithAddress targets
// (no Id: they can only ever match a listed node without an Id, and no
// pick ever consults them, as go-micro's client makes no Select for such a
// call). 64 failed WithAddress calls to distinct addresses (a sidecar
// pool, a health prober, a fan-out to static addresses) push out the state
// of a dead node that just left the list: a Next taken before it left
// (every retry of a call in flight) hands the dead node out again.
func TestWithAddressFailuresDoNotEvictTheStateOfANodeThatLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		s.ejectN3()
		next, err := s.sel.Select("svc") // a call in flight, about to retry
		require.NoError(t, err)
		require.Zero(t, pickCounts(t, next, 300)["n3"])
		s.event("delete", selService("1", "n3")) // the dead node is deregistered
		_, err = s.sel.Select("svc")
		require.NoError(t, err)
		for i := 0; i < 64; i++ {
			s.sel.Mark("svc", withAddressNode(fmt.Sprintf("10.8.0.%d:8080", i)), errRefused)
		}
		picks := pickCounts(t, next, 300)
		assert.Zero(t, picks["n3"], "picks of the dead n3 by a Next taken while it was ejected, after 64 WithAddress failures (picks %v)", picks)
	})
}
