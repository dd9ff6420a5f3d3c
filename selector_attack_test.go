//go:build go1.25

package cache_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/client"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// Black-box attacks on the passive health of cache.NewSelector, through
// the public API only. Each comment says what went wrong before; the test
// holds that it no longer does.

// A1. go-micro's client calls Mark for a client.WithAddress call without
// any Select. A failure Mark reads the cached list with c.Lookup; for a
// service the cache does not hold (the usual case for WithAddress), that
// is a registry call, made inline in Mark, under the cache's lock.
func TestFailureMarkNeverCallsTheRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBenchReg(selService("1", "n1", "n2"))
		r.hang = 5 * time.Second // a registry that times out after 5 s
		c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
		defer c.Stop()
		sel := cache.NewSelector(c)
		_, err := sel.Select("svc")
		require.NoError(t, err)
		r.mode.Store(benchHang)
		before := r.calls.Load()

		start := time.Now()
		sel.Mark("direct", withAddressNode("10.1.1.1:8080"), errRefused)
		took := time.Since(start)
		t.Logf("one failure Mark of a WithAddress call to an uncached service: %v, %d registry calls", took, r.calls.Load()-before)
		assert.Less(t, took, time.Millisecond, "a failure Mark waited for the registry")

		// Concurrent callers whose WithAddress attempts fail all wait.
		r.mode.Store(benchOK)
		entries := c.Stats().Entries
		var wg sync.WaitGroup
		before = r.calls.Load()
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				sel.Mark(fmt.Sprintf("direct-%d", i), withAddressNode("10.1.1.1:8080"), errRefused)
			}(i)
		}
		wg.Wait()
		assert.Zero(t, r.calls.Load()-before, "registry calls made by 50 failure Marks of 50 uncached services")
		assert.Zero(t, c.Stats().Entries-entries, "cache entries created by 50 failure Marks alone")

		// One service never registered, called with WithAddress once a
		// second for 10 minutes, every call failing.
		before = r.calls.Load()
		for i := 0; i < 600; i++ {
			sel.Mark("direct-0", withAddressNode("10.1.1.1:8080"), errRefused)
			time.Sleep(time.Second)
		}
		t.Logf("600 failure Marks of one unregistered service over 10 min: %d registry calls", r.calls.Load()-before)
	})
}

// A1, through go-micro's real client: a call made with client.WithAddress
// to a dead address, for a service the registry does not list, while the
// registry is slow (it answers after 2 s). The call fails at once, yet
// returns only when Mark's registry lookup does.
func TestWithAddressCallDoesNotWaitForTheRegistry(t *testing.T) {
	r := newBenchReg(selService("1", "n1"))
	r.hang = time.Hour // a registry that does not answer during the test
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	defer c.Stop()
	sel := cache.NewSelector(c)
	cl := client.NewClient(client.Registry(c), client.Selector(sel), client.Retries(0), client.RequestTimeout(5*time.Second))
	r.mode.Store(benchHang)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	l.Close()
	before := r.calls.Load()
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
	assert.Zero(t, r.calls.Load()-before, "registry calls made by a WithAddress call")
}

// A2. State follows Id and address, but it is stored under the Id alone:
// a failure of another address under the same Id (a call still in flight
// to the address a node moved from, go-micro's client holding the old
// list) replaces the listed node's state, ejection included.
func TestOldAddressFailureLeavesTheListedNodesEjection(t *testing.T) {
	moved := func() *registry.Service {
		svc := selService("1", "n3")
		svc.Nodes[0].Address = "n3:9090"
		return svc
	}
	t.Run("one late failure readmits the ejected node", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3)
			_, err := s.sel.Select("svc") // the cache looks the service up and watches
			require.NoError(t, err)
			s.event("update", moved()) // n3 now listed at n3:9090
			_, err = s.sel.Select("svc")
			require.NoError(t, err)
			failN(t, s.sel, &registry.Node{Id: "n3", Address: "n3:9090"}, 3) // dead at its new address
			require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, s.sel)))

			s.sel.Mark("svc", listedNode("n3"), errRefused) // one late failure at n3:8080
			st := selStats(t, s.sel)
			assert.Equal(t, []string{"n3"}, ejectedIDs(st), "n3 at n3:9090 after an off-list failure of n3:8080: Ejected %s", ejectedRows(st))
			next, err := s.sel.Select("svc")
			require.NoError(t, err)
			picks := map[string]int{}
			for i := 0; i < 300; i++ {
				n, _ := next()
				picks[n.Id+"@"+n.Address]++
			}
			assert.Zero(t, picks["n3@n3:9090"], "picks of n3@n3:9090, ejected a moment ago (picks %v)", picks)
		})
	})
	t.Run("interleaved failures of both addresses never eject", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newHealthSim(t, 3)
			_, err := s.sel.Select("svc") // the cache looks the service up and watches
			require.NoError(t, err)
			s.event("update", moved())
			_, err = s.sel.Select("svc")
			require.NoError(t, err)
			for i := 0; i < 30; i++ {
				s.sel.Mark("svc", &registry.Node{Id: "n3", Address: "n3:9090"}, errRefused)
				s.sel.Mark("svc", listedNode("n3"), errRefused)
			}
			st := selStats(t, s.sel)
			assert.Equal(t, []string{"n3"}, ejectedIDs(st), "n3@n3:9090 failed 30 times (each followed by a failure of n3:8080): Ejected %s, Ejections %d", ejectedRows(st), st.Ejections)
		})
	})
}

// A3. Off-list nodes are ejected with no cap; when they join the list they
// keep their ejection, and the share of the listed nodes ejected goes over
// the cap, up to all of them.
func TestOffListEjectionsJoinWithinTheCap(t *testing.T) {
	for _, tt := range []struct {
		name  string
		opts  []selector.Option
		nodes int // listed at first: n1 … n<nodes>; n<nodes+1> … n<nodes+extra> fail off the list, then join
		extra int
		cap   int // ejected nodes allowed once all have joined
	}{
		{"default 50 %, 2 listed + 1 joining", nil, 2, 1, 1},
		{"default 50 %, 2 listed + 2 joining", nil, 2, 2, 2},
		{"WithMaxEjectedPercent(0), 3 listed + 3 joining", []selector.Option{cache.WithMaxEjectedPercent(0)}, 3, 3, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newHealthSim(t, tt.nodes, tt.opts...)
				_, err := s.sel.Select("svc")
				require.NoError(t, err)
				failN(t, s.sel, listedNode("n1"), 3) // the one node that may always be ejected
				require.Equal(t, []string{"n1"}, ejectedIDs(selStats(t, s.sel)))
				ids := []string{}
				for i := 1; i <= tt.nodes+tt.extra; i++ {
					ids = append(ids, fmt.Sprintf("n%d", i))
				}
				for _, id := range ids[tt.nodes:] { // in flight before they (re)appeared
					for k := 0; k < 3; k++ {
						s.sel.Mark("svc", listedNode(id), errRefused)
					}
				}
				for _, id := range ids[tt.nodes:] {
					s.event("create", selService("1", id))
				}
				_, err = s.sel.Select("svc")
				require.NoError(t, err)
				st := selStats(t, s.sel)
				assert.LessOrEqual(t, len(st.Ejected), tt.cap, "ejected of the %d listed nodes: %s (Refused %d)", len(ids), ejectedRows(st), st.Refused)
			})
		})
	}
}

// A4. A Next taken while n3 was ejected (a call about to retry) hands n3
// out again once n3 leaves the list: leaving drops its state, and the old
// Next still holds the old list. The dead node is back in that Next's
// rotation, for every retry.
func TestOldNextSkipsAnEjectedNodeThatLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		s.ejectN3()
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		before := pickCounts(t, next, 300)
		require.Zero(t, before["n3"])

		s.event("delete", selService("1", "n3")) // n3 deregistered (or expired): it was dead
		_, err = s.sel.Select("svc")             // any other caller: the state follows the list
		require.NoError(t, err)
		picks := pickCounts(t, next, 300)
		assert.Zero(t, picks["n3"], "picks of n3 by a Next taken while n3 was ejected, after n3 left the list (picks %v)", picks)
	})
}

// manyServices returns a registry of n services "s00000" … each with one
// node "<name>-n1", plus "svc" (n1, n2, n3), a cache that holds them all,
// and a selector with no ejection ending during the test.
func manyServices(t testing.TB, n int, opts ...selector.Option) (*benchReg, cache.Cache, selector.Selector, []string) {
	names := make([]string, n)
	svcs := []*registry.Service{selService("1", "n1", "n2", "n3")}
	for i := range names {
		names[i] = fmt.Sprintf("s%05d", i)
		svcs = append(svcs, &registry.Service{Name: names[i], Version: "1",
			Nodes: []*registry.Node{{Id: names[i] + "-n1", Address: names[i] + ":8080"}}})
	}
	r := newBenchReg(svcs...)
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	for _, name := range append(names, "svc") {
		_, err := c.Lookup(name)
		require.NoError(t, err)
	}
	sel := cache.NewSelector(c, append([]selector.Option{cache.WithEjectionTime(time.Hour, time.Hour)}, opts...)...)
	return r, c, sel, names
}

// allocated returns the bytes allocated while fn runs.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// failEach makes one node of each of the services fail once.
func failEach(sel selector.Selector, names []string) {
	for _, name := range names {
		sel.Mark(name, &registry.Node{Id: name + "-n1", Address: name + ":8080"}, errRefused)
	}
}

// A5. The map of services with state was copied whole by the first
// failure of a service and again when its state was dropped: with many
// services failing (a registry outage with stale nodes), one transient
// connection reset of a healthy service cost bytes in proportion to them,
// and the first failures of n services cost O(n²).
func TestFirstFailureOfAServiceCostsTheSameWhateverTheServices(t *testing.T) {
	const n = 100
	cost := func(services int) (pair, first uint64) {
		_, c, sel, names := manyServices(t, services+n)
		defer c.Stop()
		failEach(sel, names[:services]) // every service has a node failing once
		pair = allocated(func() {
			for i := 0; i < n; i++ {
				sel.Mark("svc", listedNode("n1"), errBroken) // one connection reset
				sel.Mark("svc", listedNode("n1"), nil)       // and the next call works
			}
		}) / n
		first = allocated(func() { failEach(sel, names[services:]) }) / n
		return pair, first
	}
	smallPair, smallFirst := cost(10)
	bigPair, bigFirst := cost(8_000)
	t.Logf("a failure and a success Mark of one node: %d B with 10 other services failing, %d B with 8 000", smallPair, bigPair)
	t.Logf("a service's first failure: %d B with 10 other services failing, %d B with 8 000", smallFirst, bigFirst)
	assert.Less(t, bigPair, smallPair+1024, "bytes of a failure + success Mark grow with the services with state")
	assert.Less(t, bigFirst, smallFirst+1024, "bytes of a service's first failure grow with the services with state")
}

// A6. The sweep runs inside one failure Mark, over every service's state;
// each service it empties is removed by copying the map of services. With
// many services the one Mark that sweeps costs O(services²).
func TestTheSweepingMarkIsLinearInServices(t *testing.T) {
	sweep := func(services int) (bytes uint64) {
		synctest.Test(t, func(t *testing.T) {
			_, c, sel, names := manyServices(t, services, cache.WithEjectionTime(time.Second, time.Second))
			defer c.Stop()
			failEach(sel, names)
			time.Sleep(2 * time.Second) // every state idle past the max ejection time
			bytes = allocated(func() { sel.Mark("svc", listedNode("n1"), errRefused) })
		})
		return bytes
	}
	a, b := sweep(1_000), sweep(4_000)
	t.Logf("bytes of the failure Mark that sweeps: %d with 1 000 services with state, %d with 4 000 (x%.1f for x4)", a, b, float64(b)/float64(a))
	assert.Less(t, float64(b)/float64(a), 8.0, "the sweeping Mark grows faster than linearly")
}

// A7. Init turning passive health off resets every service, each reset
// copying the map of services with state: quadratic too. (Reset of each
// service in turn is the same.)
func TestInitOffIsLinearInServices(t *testing.T) {
	off := func(services int) (bytes uint64) {
		_, c, sel, names := manyServices(t, services)
		defer c.Stop()
		failEach(sel, names)
		return allocated(func() { require.NoError(t, sel.Init(cache.WithEjectAfter(0))) })
	}
	a, b := off(1_000), off(4_000)
	t.Logf("bytes of Init(WithEjectAfter(0)): %d with 1 000 services with state, %d with 4 000 (x%.1f for x4)", a, b, float64(b)/float64(a))
	assert.Less(t, float64(b)/float64(a), 8.0, "Init off grows faster than linearly")
}

// A8. Init turning passive health off forgets every state, but a failure
// Mark that read the configuration just before goes on and records its
// ejection after the reset: passive health is off, yet a node is ejected,
// and it still is when passive health is turned on again.
func TestInitOffWinsOverARacingFailureMark(t *testing.T) {
	r := newBenchReg(selService("1", "n1", "n2", "n3"))
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

// A9. The queue of off-list states keeps the keys of states dropped since
// and counts them towards its 64: an off-list node that failed once and
// answered, 64 times over, fills it with its own key, and then every new
// state off the list is evicted as it is made. With a single node off the
// list, its failures are lost: it appears on the list, dead, and is picked.
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

// A10. Random churn, checked against the selector's own Stats: joins,
// leaves, address moves, failures of listed and off-list nodes, answers,
// time, Reset and Init changing the percent. After each decisive run of
// failures of a listed node, whether it was ejected or refused must match
// the share that Stats shows (the ejected rows among the listed nodes);
// no pick may be an ejected node while a listed one is not; and once
// everything has recovered, nothing stays counted.
func TestChurnKeepsTheShareAccountingExact(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { churn(t, seed, 4000) })
		})
	}
}

func churn(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	s := newHealthSim(t, 1) // n1, always listed
	_, err := s.sel.Select("svc")
	require.NoError(t, err)
	pool := []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"}
	addr := map[string]string{"n1": "n1:8080"} // listed ids and their addresses
	pct := 50
	other := func(a string) string {
		if a[len(a)-4:] == "8080" {
			return a[:len(a)-4] + "9090"
		}
		return a[:len(a)-4] + "8080"
	}
	send := func(action, id, address string) {
		full := &registry.Service{Name: "svc", Version: "1"}
		for _, i := range pool {
			if a, ok := addr[i]; ok {
				full.Nodes = append(full.Nodes, &registry.Node{Id: i, Address: a})
			}
		}
		s.reg.put(full) // the registry agrees with the events
		s.event(action, &registry.Service{Name: "svc", Version: "1", Nodes: []*registry.Node{{Id: id, Address: address}}})
	}
	listedIDs := func() []string {
		ids := []string{}
		for _, id := range pool {
			if _, ok := addr[id]; ok {
				ids = append(ids, id)
			}
		}
		return ids
	}
	ejectedNow := func() map[string]bool {
		_, err := s.sel.Select("svc") // the selector sees the current list
		require.NoError(t, err)
		m := map[string]bool{}
		for _, e := range selStats(t, s.sel).Ejected {
			m[e.Id+"@"+e.Address] = true
		}
		return m
	}
	codec := merrors.InternalServerError("go.micro.client.codec", "bad request")
	checked, decided := 0, 0
	for op := 0; op < ops; op++ {
		switch k := rng.IntN(100); {
		case k < 8: // join
			id := pool[rng.IntN(len(pool))]
			if _, ok := addr[id]; !ok {
				a := id + ":8080"
				if rng.IntN(2) == 0 {
					a = other(a)
				}
				addr[id] = a
				send("create", id, a)
			}
		case k < 14: // leave
			id := pool[1+rng.IntN(len(pool)-1)]
			if _, ok := addr[id]; ok {
				delete(addr, id)
				send("delete", id, "x")
			}
		case k < 17: // move
			id := pool[rng.IntN(len(pool))]
			if a, ok := addr[id]; ok {
				addr[id] = other(a)
				send("update", id, addr[id])
			}
		case k < 45: // failures of a node, listed or not
			id := pool[rng.IntN(len(pool))]
			a, ok := addr[id]
			if !ok || rng.IntN(4) == 0 {
				a = other(id + ":8080")
			}
			for n := 1 + rng.IntN(3); n > 0; n-- {
				s.sel.Mark("svc", &registry.Node{Id: id, Address: a}, errRefused)
			}
		case k < 60: // an answer
			id := pool[rng.IntN(len(pool))]
			a, ok := addr[id]
			if !ok {
				a = id + ":8080"
			}
			s.sel.Mark("svc", &registry.Node{Id: id, Address: a}, nil)
		case k < 75:
			time.Sleep([]time.Duration{time.Second, 10 * time.Second, 31 * time.Second, 61 * time.Second, 130 * time.Second}[rng.IntN(5)])
		case k < 76:
			s.sel.Reset("svc")
		case k < 78:
			pct = []int{0, 25, 50, 100}[rng.IntN(4)]
			require.NoError(t, s.sel.Init(cache.WithMaxEjectedPercent(pct)))
		case k < 90: // picks: none ejected while a listed node is not
			ej := ejectedNow()
			ids := listedIDs()
			admitted := 0
			for _, id := range ids {
				if !ej[id+"@"+addr[id]] {
					admitted++
				}
			}
			next, err := s.sel.Select("svc")
			require.NoError(t, err)
			for i := 0; i < 30; i++ {
				n, err := next()
				require.NoError(t, err)
				if admitted > 0 && ej[n.Id+"@"+n.Address] {
					t.Fatalf("op %d: picked %s@%s, ejected, while %d of the %d listed nodes are not (ejected %v)", op, n.Id, n.Address, admitted, len(ids), ej)
				}
				s.sel.Mark("svc", n, codec) // releases a trial claim, says nothing of the node
			}
			checked++
		default: // decisive: a listed node not ejected fails 3 times
			ids := listedIDs()
			ej := ejectedNow()
			id := ids[rng.IntN(len(ids))]
			node := &registry.Node{Id: id, Address: addr[id]}
			if ej[id+"@"+node.Address] {
				continue
			}
			rows := 0
			for _, i := range ids {
				if ej[i+"@"+addr[i]] {
					rows++
				}
			}
			before := selStats(t, s.sel)
			for n := 0; n < 3; n++ {
				s.sel.Mark("svc", node, errRefused)
			}
			after := selStats(t, s.sel)
			want := rows == 0 || (rows+1)*100 <= pct*len(ids)
			got := ejectedNow()[id+"@"+node.Address]
			if got != want {
				svcs, _ := s.c.Lookup("svc")
				list := []string{}
				for _, sv := range svcs {
					for _, n := range sv.Nodes {
						list = append(list, n.Id+"@"+n.Address)
					}
				}
				next, _ := s.sel.Select("svc")
				picks := map[string]int{}
				for i := 0; i < 300; i++ {
					n, _ := next()
					picks[n.Id+"@"+n.Address]++
				}
				t.Logf("cached list %v, Ejected %s, picks %v", list, ejectedRows(after), picks)
				t.Fatalf("op %d: %s of %d listed nodes, %d ejected, max %d %%: ejected %v, want %v (Refused +%d, Ejections +%d)",
					op, id, len(ids), rows, pct, got, want, after.Refused-before.Refused, after.Ejections-before.Ejections)
			}
			decided++
		}
	}
	// Everything recovers.
	time.Sleep(10 * time.Minute)
	for _, id := range listedIDs() {
		s.sel.Mark("svc", &registry.Node{Id: id, Address: addr[id]}, nil)
	}
	require.Empty(t, ejectedNow(), "ejected after every node recovered")
	require.NoError(t, s.sel.Init(cache.WithMaxEjectedPercent(100)))
	before := selStats(t, s.sel)
	ids := listedIDs()
	for _, id := range ids {
		for n := 0; n < 3; n++ {
			s.sel.Mark("svc", &registry.Node{Id: id, Address: addr[id]}, errRefused)
		}
	}
	after := selStats(t, s.sel)
	assert.Len(t, ejectedNow(), len(ids), "with 100 %%, all %d listed nodes failing are ejected (Refused +%d)", len(ids), after.Refused-before.Refused)
	t.Logf("seed %d: %d pick checks, %d decisions", seed, checked, decided)
}

// A11. Concurrent Selects, Nexts, Marks of every kind, list changes,
// Resets, Inits (percent, off and on) and Stats, under -race; then
// everything recovers and nothing stays ejected.
func TestSelectorConcurrentEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 6, cache.WithEjectionTime(time.Second, 4*time.Second))
		_, err := s.sel.Select("svc")
		require.NoError(t, err)
		codec := merrors.InternalServerError("go.micro.client.codec", "bad request")
		errs := []error{nil, errRefused, errTimedOut, errBroken, codec, merrors.InternalServerError("svc", "handler")}
		opts := [][]selector.SelectOption{nil,
			{selector.WithStrategy(selector.RoundRobin)},
			{selector.WithStrategy(selector.Random)},
			{selector.WithFilter(selector.FilterLabel("zone", "a"))}}
		var wg sync.WaitGroup
		end := time.Now().Add(2 * time.Minute)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for time.Now().Before(end) {
					next, err := s.sel.Select("svc", opts[rng.IntN(len(opts))]...)
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					for try := 0; try < 3; try++ {
						n, err := next()
						if err != nil {
							break
						}
						e := errs[rng.IntN(len(errs))]
						if n.Id == "n5" || n.Id == "n6" {
							e = errRefused // dead
						}
						time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
						s.sel.Mark("svc", n, e)
						if e == nil {
							break
						}
					}
					s.sel.Mark("svc", withAddressNode(fmt.Sprintf("10.0.0.%d:1", rng.IntN(100))), errRefused)
					time.Sleep(5 * time.Millisecond)
				}
			}(g)
		}
		wg.Add(1)
		go func() { // control
			defer wg.Done()
			rng := rand.New(rand.NewPCG(99, 1))
			for time.Now().Before(end) {
				switch rng.IntN(6) {
				case 0:
					s.sel.Reset("svc")
				case 1:
					_ = s.sel.Init(cache.WithMaxEjectedPercent([]int{0, 50, 100}[rng.IntN(3)]))
				case 2:
					_ = s.sel.Init(cache.WithEjectAfter(rng.IntN(2) * 3))
				case 3:
					_ = selStats(t, s.sel)
				case 4:
					id := fmt.Sprintf("n%d", 2+rng.IntN(5))
					if rng.IntN(2) == 0 {
						s.event("delete", &registry.Service{Name: "svc", Version: "1", Nodes: []*registry.Node{{Id: id, Address: "x"}}})
					} else {
						s.event("create", selService("1", id))
					}
				case 5:
					time.Sleep(500 * time.Millisecond)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		wg.Wait()
		require.NoError(t, s.sel.Init(cache.WithEjectAfter(3), cache.WithMaxEjectedPercent(50)))
		time.Sleep(time.Minute)
		for i := 1; i <= 6; i++ {
			s.sel.Mark("svc", listedNode(fmt.Sprintf("n%d", i)), nil)
		}
		st := selStats(t, s.sel)
		assert.Empty(t, st.Ejected, "after recovery")
		t.Logf("failures %d ejections %d refused %d readmitted %d ignored %d", st.Failures, st.Ejections, st.Refused, st.Readmitted, st.Ignored)
	})
}

// A12. A trial claim is not tied to its caller: any Mark of the node with
// an error that says nothing of it (a codec error of another caller's
// attempt, one begun before the ejection and still running) releases the
// claim, and a second caller gets the node on trial while the first
// attempt is still pending.
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

// A13. A failure Mark after the list changed rebuilds an index of the
// whole list. That pass is once per list, as the cache's own copy of the
// list is: every other failure Mark costs the same whatever the size of
// the service, and the Marks after a change share the one pass.
func TestFailureMarksShareOnePassPerListChange(t *testing.T) {
	type costs struct{ steady, change, after uint64 }
	cost := func(nodes int) costs {
		var c costs
		synctest.Test(t, func(t *testing.T) {
			ids := make([]string, nodes)
			for i := range ids {
				ids[i] = fmt.Sprintf("m%05d", i)
			}
			s := &healthSim{t: t}
			s.reg = newBenchReg(selService("1", ids...))
			cc := cache.New(s.reg, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
			defer cc.Stop()
			sel := cache.NewSelector(cc, cache.WithEjectAfter(1000))
			_, err := sel.Select("svc")
			require.NoError(t, err)
			sel.Mark("svc", listedNode("m00000"), errRefused)
			const n = 100
			c.steady = allocated(func() { // first failures, the list unchanged
				for i := 1; i <= n; i++ {
					sel.Mark("svc", listedNode(ids[i]), errRefused)
				}
			}) / n
			const changes = 20
			for i := 0; i < changes; i++ {
				s.event("update", selService("1", ids[i])) // a node re-registers
				c.change += allocated(func() { sel.Mark("svc", listedNode(ids[1]), errRefused) })
				c.after += allocated(func() {
					for k := 0; k < 10; k++ {
						sel.Mark("svc", listedNode(ids[1]), errRefused)
					}
				}) / 10
			}
			c.change /= changes
			c.after /= changes
		})
		return c
	}
	small, big := cost(200), cost(20_000)
	t.Logf("failure Marks with 200 nodes: %d B each with the list unchanged, %d B for the first after a change, %d B for the next", small.steady, small.change, small.after)
	t.Logf("failure Marks with 20 000 nodes: %d B each with the list unchanged, %d B for the first after a change, %d B for the next", big.steady, big.change, big.after)
	assert.Less(t, big.steady, small.steady+1024, "bytes of a first failure Mark grow with the nodes")
	assert.Less(t, big.after, small.after+1024, "bytes of the failure Marks after the first since a list change grow with the nodes")
}

// A14. The selector's own costs: no goroutine; Select + Next one
// allocation with a node ejected; success and repeated failure Marks
// allocate nothing (these hold). But a handler error as go-micro's client
// really passes it (text: client.serverError, a string type, never a
// *errors.Error) allocates in every Mark: classify's errors.As target
// escapes ("moved to heap: wrapped"). BenchmarkMark's handler-error row
// passes a *errors.Error, so it does not see it.
func TestSelectorCostsHold(t *testing.T) {
	r := newBenchReg(selService("1", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"))
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	defer c.Stop()
	_, err := c.Lookup("svc")
	require.NoError(t, err)
	sel := cache.NewSelector(c)
	for i := 0; i < 3; i++ {
		sel.Mark("svc", listedNode("n3"), errRefused)
	}
	require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, sel)))
	sel.Mark("svc", listedNode("n4"), errRefused) // n4 has state too
	// Counted by their code rather than by runtime.NumGoroutine: the
	// cache's own goroutines (its stream's dial, a refresh) start and end
	// meanwhile.
	for _, file := range []string{"/eject", "/selector.go"} {
		assert.Empty(t, cache.GoroutinesWith(file), "goroutines of the selector: it starts none")
	}
	allocs := testing.AllocsPerRun(1000, func() {
		next, _ := sel.Select("svc")
		next()
	})
	// The closure, and with state the Next's record of its first pick.
	assert.LessOrEqual(t, allocs, 2.0, "Select + Next with one node ejected")
	n1, n4, n3 := listedNode("n1"), listedNode("n4"), listedNode("n3")
	handler := merrors.Parse(`{"id":"svc","code":500,"detail":"no"}`).Error() // text, as the client passes it
	handlerErr := fmt.Errorf("%s", handler)
	wrapped := fmt.Errorf("call wrapper: %w", merrors.InternalServerError("svc", "no"))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { sel.Mark("svc", n1, nil) }), "success Mark")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { sel.Mark("svc", n1, handlerErr) }), "handler error Mark")
	t.Logf("a handler error wrapped by a call wrapper (fmt.Errorf %%w): %v allocs a Mark", testing.AllocsPerRun(1000, func() { sel.Mark("svc", n1, wrapped) }))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { sel.Mark("svc", n3, errRefused) }), "failure Mark of an ejected node")
	_ = n4
}

// A15 (held). A trial claim whose Mark never comes lapses after the
// maximum ejection time, not before; Reset during a trial puts the node back for
// everyone; the claimer's own codec error lets the next caller try.
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

// A16. A Next taken while passive health was off is the bare strategy:
// turned on again (Init), the node ejected since is still handed out by
// it, for every retry of the call.
func TestNextFromWhileHealthWasOffSkipsLaterEjections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3, cache.WithEjectAfter(0))
		next, err := s.sel.Select("svc")
		require.NoError(t, err)
		require.NoError(t, s.sel.Init(cache.WithEjectAfter(3)))
		failN(t, s.sel, listedNode("n3"), 3)
		require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, s.sel)))
		picks := pickCounts(t, next, 300)
		assert.Zero(t, picks["n3"], "picks of n3, ejected, by a Next taken while passive health was off (picks %v)", picks)
	})
}

// A3b. The share is only checked at an ejection: nodes leaving the list
// raise it over the cap (2 of 3 with 50 %), and Init lowering the percent
// leaves it over too.
func TestShareStaysWithinTheCapAfterLeavesAndInit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 4)
		failN(t, s.sel, listedNode("n1"), 3)
		failN(t, s.sel, listedNode("n2"), 3)
		require.Len(t, selStats(t, s.sel).Ejected, 2)
		s.event("delete", &registry.Service{Name: "svc", Version: "1", Nodes: []*registry.Node{{Id: "n4"}}})
		_, err := s.sel.Select("svc")
		require.NoError(t, err)
		assert.LessOrEqual(t, len(selStats(t, s.sel).Ejected), 1, "ejected of 3 listed nodes, cap 50 percent, after n4 left")
		require.NoError(t, s.sel.Init(cache.WithMaxEjectedPercent(0)))
		assert.LessOrEqual(t, len(selStats(t, s.sel).Ejected), 1, "ejected after Init(WithMaxEjectedPercent(0))")
	})
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 4)
		failN(t, s.sel, listedNode("n1"), 3)
		failN(t, s.sel, listedNode("n2"), 3)
		require.Len(t, selStats(t, s.sel).Ejected, 2)
		require.NoError(t, s.sel.Init(cache.WithMaxEjectedPercent(0))) // the list unchanged
		assert.Len(t, selStats(t, s.sel).Ejected, 1, "ejected of 4 listed nodes after Init(WithMaxEjectedPercent(0))")
		// A trial goes to the first pick of a Next: 300 calls, one
		// attempt each.
		picks := map[string]int{}
		for i := 0; i < 300; i++ {
			next, err := s.sel.Select("svc")
			require.NoError(t, err)
			n, err := next()
			require.NoError(t, err)
			picks[n.Id]++
		}
		assert.Positive(t, picks["n1"]+picks["n2"], "the node readmitted is handed out on trial (picks %v)", picks)
	})
}
