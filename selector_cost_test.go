package cache_test

import (
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// What passive health costs: Mark and Select allocate little and the same
// however many services and nodes have state.

// manyServices returns a registry of n services "s00000" … each with one
// node "<name>-n1", plus "svc" (n1, n2, n3), a cache that holds them all,
// and a selector with no ejection ending during the test.
func manyServices(t testing.TB, n int, opts ...selector.Option) (*fakereg.Registry, cache.Cache, selector.Selector, []string) {
	names := make([]string, n)
	svcs := []*registry.Service{selService("1", "n1", "n2", "n3")}
	for i := range names {
		names[i] = fmt.Sprintf("s%05d", i)
		svcs = append(svcs, &registry.Service{Name: names[i], Version: "1",
			Nodes: []*registry.Node{{Id: names[i] + "-n1", Address: names[i] + ":8080"}}})
	}
	r := newReg(svcs...)
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

// A service's first failure, and a failure and a success of one node, cost
// the same bytes however many other services have state.
//
// Regression: the map of services with state was copied whole by the first
// failure of a service and again when its state was dropped. With many
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

// The failure Mark that sweeps idle state costs bytes in proportion to the
// services with state, no more.
//
// Regression: the sweep removed each service it emptied by copying the map
// of services, so the one Mark that swept cost O(services²).
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

// Init turning passive health off costs bytes in proportion to the
// services with state, no more.
//
// Regression: it reset every service, each reset copying the map of
// services with state: O(services²), as was Reset of each service in turn.
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

// A failure Mark after the list changed indexes the whole list. That pass is
// once per list, as the cache's own copy of the list is: every other
// failure Mark costs the same whatever the size of the service, and the
// Marks after a change share the one pass.
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
			s.reg = newReg(selService("1", ids...))
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

// A first failure's Mark costs the same however many nodes of the service
// are failing already: no copy of the node map.
//
// Regression: each first failure copied the service's node map, 50 to
// 100 KB and a dozen allocations a Mark with 2 000 nodes failing, so the
// cost of n first failures grew with n².
func TestFirstFailureMarkCostDoesNotGrowWithTheFailingNodes(t *testing.T) {
	const (
		runs  = 100  // for AllocsPerRun, which makes one more
		bytes = 1000 // first failures measured for their bytes
		big   = 2000
	)
	ids := make([]string, big+runs+1+bytes)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%05d", i)
	}
	checkNoLeak(t)
	r := newReg(selService("1", ids...))
	c := cache.New(r, cache.WithLogger(benchLogger))
	defer c.Stop()
	nodes := make([]*registry.Node, len(ids))
	for i, id := range ids {
		nodes[i] = listedNode(id)
	}

	// cost returns the allocations and bytes of a first-failure Mark
	// with failing nodes failing already.
	cost := func(failing int) (allocs float64, perMark uint64) {
		// No ejection, no readmission and no sweep during the test.
		sel := cache.NewSelector(c, cache.WithEjectionTime(time.Hour, time.Hour), cache.WithEjectAfter(100))
		_, err := sel.Select("svc")
		require.NoError(t, err)
		i := 0
		for ; i < failing; i++ {
			sel.Mark("svc", nodes[i], errRefused)
		}
		_, err = sel.Select("svc")
		require.NoError(t, err)
		allocs = testing.AllocsPerRun(runs, func() {
			sel.Mark("svc", nodes[i], errRefused)
			i++
		})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for end := i + bytes; i < end; i++ {
			sel.Mark("svc", nodes[i], errRefused)
		}
		runtime.ReadMemStats(&after)
		require.EqualValues(t, failing+runs+1+bytes, selStats(t, sel).Failures)
		return allocs, (after.TotalAlloc - before.TotalAlloc) / bytes
	}
	smallAllocs, smallBytes := cost(10)
	bigAllocs, bigBytes := cost(big)
	t.Logf("first-failure Mark: %v allocs, %d B from 10 nodes failing; %v allocs, %d B from %d", smallAllocs, smallBytes, bigAllocs, bigBytes, big)
	assert.LessOrEqual(t, bigAllocs, smallAllocs+1,
		"allocations of a first-failure Mark with %d nodes failing (%v) against 10 (%v): must not grow with the nodes failing", big, bigAllocs, smallAllocs)
	assert.LessOrEqual(t, bigBytes, smallBytes+1024,
		"bytes of a first-failure Mark with %d to %d nodes failing (%d) against 10 to %d (%d): must not grow with the nodes failing",
		big, big+runs+1+bytes, bigBytes, 10+runs+1+bytes, smallBytes)
}

// The selector's own costs: no goroutine; Select + Next at most two
// allocations with a node ejected; success and handler-error Marks, and
// failure Marks of an ejected node, allocate nothing.
//
// Regression: a handler error as go-micro's client really passes it (text:
// client.serverError, a string type, never a *errors.Error) allocated in
// every Mark, as classify's errors.As target escaped. BenchmarkMark's
// handler-error row passes a *errors.Error, so it did not see it.
func TestSelectorCostsHold(t *testing.T) {
	r := newReg(selService("1", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"))
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
