package cache_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// Failures of nodes off the cached list (client.WithAddress calls, calls in
// flight to a node that left) are remembered for when the node appears, but
// never take a listed node's place, and never call the registry.

// Failures reported for nodes that are not on the cached node list
// (client.WithAddress calls, calls still in flight to a node that left) do
// not take the ejection share of the listed nodes: ejections count, and are
// capped, only among the nodes of the cached list. What an off-list failure
// tells is kept, in case the node appears.
//
// Regression: the off-list node took the only slot of a 2-node service
// (50 %), and the listed dead node was refused: it stayed in rotation with
// half the picks.
func TestOffListFailuresDoNotTakeTheEjectionShare(t *testing.T) {
	t.Run("client.WithAddress calls to a dead address", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 2) // n1 answers, n2 is dead
			failN(t, s.sel, listedNode("n2"), 1)
			_, err := s.sel.Select("svc") // sees the list n1, n2, with state
			require.NoError(t, err)
			var next selector.Next
			for i := 0; i < 3; i++ { // a WithAddress call makes no Select
				s.sel.Mark("svc", withAddressNode("10.9.9.9:8080"), errRefused)
			}
			failN(t, s.sel, listedNode("n2"), 2)

			st := selStats(t, s.sel)
			assert.Contains(t, ejectedIDs(st), "n2",
				"n2, listed and failing 3 times in a row, must be ejected: a WithAddress failure must not take its place; Ejected %s, Refused %d",
				ejectedRows(st), st.Refused)
			assert.Zero(t, st.Refused, "ejections refused, with 0 of the 2 listed nodes ejected before n2")
			next, err = s.sel.Select("svc")
			require.NoError(t, err)
			picks := pickCounts(t, next, 300)
			assert.Zero(t, picks["n2"], "picks of the listed dead node n2, of 300 (picks %v)", picks)
		})
	})
	t.Run("calls in flight to a node that left", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3) // n2 is dead; n3 is about to leave
			failN(t, s.sel, listedNode("n2"), 1)
			s.event("delete", selService("1", "n3"))
			_, err := s.sel.Select("svc") // sees the list n1, n2
			require.NoError(t, err)
			for i := 0; i < 3; i++ { // the attempts on n3 still in flight fail
				s.sel.Mark("svc", listedNode("n3"), errRefused)
			}
			failN(t, s.sel, listedNode("n2"), 2)

			st := selStats(t, s.sel)
			assert.Contains(t, ejectedIDs(st), "n2",
				"n2, listed and failing 3 times in a row, must be ejected: n3, no longer listed, must not take its place; Ejected %s, Refused %d",
				ejectedRows(st), st.Refused)
			assert.Zero(t, st.Refused, "ejections refused, with 0 of the 2 listed nodes ejected before n2")
			next, err := s.sel.Select("svc")
			require.NoError(t, err)
			picks := pickCounts(t, next, 300)
			assert.Zero(t, picks["n2"], "picks of the listed dead node n2, of 300 (picks %v)", picks)
		})
	})
	// What an off-list failure tells is kept in case the node appears: a
	// node that failed enough while off the list is ejected when it is
	// listed again. (This holds today; the rewrite must keep it.)
	t.Run("a node that failed off the list and appears is ejected", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 4)
			_, err := s.sel.Select("svc") // the cache looks the service up and watches
			require.NoError(t, err)
			s.event("delete", selService("1", "n3"))
			_, err = s.sel.Select("svc")
			require.NoError(t, err)
			for i := 0; i < 3; i++ { // in flight to n3, which left
				s.sel.Mark("svc", listedNode("n3"), errRefused)
			}
			s.event("create", selService("1", "n3")) // back, still dead
			next, err := s.sel.Select("svc")
			require.NoError(t, err)
			picks := pickCounts(t, next, 300)
			assert.Zero(t, picks["n3"], "picks of n3, which failed 3 times in a row just before it appeared (picks %v)", picks)
		})
	})
}

// Off-list failures are remembered, up to 64 nodes a service: calls in
// flight to ten nodes that left fail three times each, and when the nodes
// come back, every one of them is out. The 65th node off the list pushes
// out the oldest.
func TestOffListFailuresAreRememberedWhenTheNodesAppear(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ids := []string{"n1"}
		for i := 0; i < 10; i++ {
			ids = append(ids, fmt.Sprintf("m%d", i))
		}
		s := newHealthSim(t, 1, cache.WithMaximumEjectedPercent(100))
		_, err := s.sel.Select("svc")
		require.NoError(t, err)
		for _, id := range ids[1:] {
			failN(t, s.sel, listedNode(id), 3) // in flight to a node not (yet) listed
		}
		require.Empty(t, selStats(t, s.sel).Ejected, "nodes off the list are not shown")
		s.event("create", selService("1", ids[1:]...))
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		assert.Len(t, selStats(t, s.sel).Ejected, 10, "ejected of the ten nodes that failed off the list, now listed")
		picks := pickCounts(t, next, 300)
		assert.Equal(t, 300, picks["n1"], "picks: only n1 never failed (picks %v)", picks)

		// Bounded: 65 more nodes fail off the list; the first of them
		// is forgotten.
		for i := 0; i < 65; i++ {
			failN(t, s.sel, listedNode(fmt.Sprintf("x%d", i)), 3)
		}
		s.event("create", selService("1", "x0", "x1"))
		_, err = s.sel.Select("svc")
		require.NoError(t, err)
		got := ejectedIDs(selStats(t, s.sel))
		assert.NotContains(t, got, "x0", "the oldest of 65 nodes off the list is forgotten")
		assert.Contains(t, got, "x1")
	})
}

// The queue of off-list states holds the states that are off the list now,
// so that a node failing off the list is remembered when it appears.
//
// Regression: the queue kept the keys of states dropped since and counted
// them towards its 64. An off-list node that failed once and answered, 64
// times over, filled it with its own key; every new state off the list was
// then evicted as it was made, and the node appeared on the list, dead, and
// was picked.
func TestOffListQueueKeepsAFreshState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		_, err := s.sel.Select("svc")
		require.NoError(t, err)
		s.event("delete", selService("1", "n3")) // n3 leaves; calls to it still in flight
		_, err = s.sel.Select("svc")
		require.NoError(t, err)
		s.sel.Mark("svc", listedNode("n1"), errRefused) // one failure of n1 keeps the service's state
		for i := 0; i < 64; i++ {                       // n3 flaky: fails once, then answers
			s.sel.Mark("svc", listedNode("n3"), errRefused)
			s.sel.Mark("svc", listedNode("n3"), nil)
		}
		for i := 0; i < 3; i++ { // now dead
			s.sel.Mark("svc", listedNode("n3"), errRefused)
		}
		s.event("create", selService("1", "n3")) // back, still dead
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		picks := pickCounts(t, next, 300)
		assert.Zero(t, picks["n3"], "picks of n3, which failed 3 times in a row off the list just before it appeared, the only node off the list (picks %v)", picks)
	})
}

// Failures of client.WithAddress calls never push out the state of a node
// that left the list. The 64 states a service keeps off its list hold two
// kinds of node: nodes that left the list, whose state keeps a dead node
// out of an old Next (and out of the list if it comes back), and
// WithAddress targets, which have no Id and which no pick consults, as
// go-micro's client makes no Select for such a call.
//
// Regression: 64 failed WithAddress calls to distinct addresses (a sidecar
// pool, a health prober, a fan-out to static addresses) pushed out the
// state of a dead node that had just left the list, and a Next taken before
// it left (every retry of a call in flight) handed the dead node out again.
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

// A failure Mark never calls the registry and creates no cache entry, also
// for a client.WithAddress call, which go-micro's client reports to Mark
// without any Select, for a service the cache may not hold.
//
// Regression: a failure Mark read the cached list with c.Lookup, and for a
// service the cache did not hold (the usual case for WithAddress) that was
// a registry call, made inline in Mark.
func TestFailureMarkNeverCallsTheRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newReg(selService("1", "n1", "n2"))
		c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
		defer c.Stop()
		sel := cache.NewSelector(c)
		_, err := sel.Select("svc")
		require.NoError(t, err)
		r.SetFault(timesOut(5 * time.Second)) // a registry that times out after 5 s
		before := r.TotalCalls()

		start := time.Now()
		sel.Mark("direct", withAddressNode("10.1.1.1:8080"), errRefused)
		took := time.Since(start)
		t.Logf("one failure Mark of a WithAddress call to an uncached service: %v, %d registry calls", took, r.TotalCalls()-before)
		assert.Less(t, took, time.Millisecond, "a failure Mark waited for the registry")

		// Concurrent callers whose WithAddress attempts fail all wait.
		r.SetFault(fakereg.Fault{})
		entries := c.Stats().Entries
		var wg sync.WaitGroup
		before = r.TotalCalls()
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				sel.Mark(fmt.Sprintf("direct-%d", i), withAddressNode("10.1.1.1:8080"), errRefused)
			}(i)
		}
		wg.Wait()
		assert.Zero(t, r.TotalCalls()-before, "registry calls made by 50 failure Marks of 50 uncached services")
		assert.Zero(t, c.Stats().Entries-entries, "cache entries created by 50 failure Marks alone")

		// One service never registered, called with WithAddress once a
		// second for 10 minutes, every call failing.
		before = r.TotalCalls()
		for i := 0; i < 600; i++ {
			sel.Mark("direct-0", withAddressNode("10.1.1.1:8080"), errRefused)
			time.Sleep(time.Second)
		}
		t.Logf("600 failure Marks of one unregistered service over 10 min: %d registry calls", r.TotalCalls()-before)
	})
}

// The same through go-micro's real client: a call made with
// client.WithAddress to a dead address, for a service the registry does not
// list, while the registry does not answer, fails at once.
//
// Regression: the call failed at once, yet returned only when its Mark's
// registry lookup did.
func TestWithAddressCallDoesNotWaitForTheRegistry(t *testing.T) {
	r := newReg(selService("1", "n1"))
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	defer c.Stop()
	sel := cache.NewSelector(c)
	cl := client.NewClient(client.Registry(c), client.Selector(sel), client.Retries(0), client.RequestTimeout(5*time.Second))
	r.SetFault(timesOut(time.Hour)) // a registry that does not answer during the test
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	l.Close()
	before := r.TotalCalls()
	done := make(chan error, 1)
	go func() {
		done <- cl.Call(context.Background(), cl.NewRequest("direct", "Direct.Get", map[string]string{}), &map[string]string{}, client.WithAddress(dead))
	}()
	select {
	case err = <-done:
		require.Error(t, err, "a call to a closed port")
	case <-time.After(time.Minute): // a liveness bound: the registry never answers
		t.Fatal("a call refused at once waits for a registry that does not answer: its Mark called the registry")
	}
	assert.Zero(t, r.TotalCalls()-before, "registry calls made by a WithAddress call")
}
