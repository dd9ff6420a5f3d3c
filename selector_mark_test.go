package cache_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/transport"

	cache "github.com/regcache/cache"
)

func TestNewSelectorPanicsOnInvalidHealthOptions(t *testing.T) {
	c := cache.New(newReg(), cache.WithLogger(benchLogger))
	defer c.Stop()
	for _, tt := range []struct {
		opt  selector.Option
		want string
	}{
		{cache.WithEjectAfter(-1), "regcache: NewSelector: WithEjectAfter: -1 failures is negative"},
		{cache.WithEjectionTime(0, time.Minute), "regcache: NewSelector: WithEjectionTime: base 0s is not positive"},
		{cache.WithEjectionTime(time.Minute, time.Second), "regcache: NewSelector: WithEjectionTime: max 1s is below the base 1m0s"},
		{cache.WithMaximumEjectedPercent(101), "regcache: NewSelector: WithMaximumEjectedPercent: 101 is outside [0, 100]"},
		{cache.WithMaximumEjectedPercent(-1), "regcache: NewSelector: WithMaximumEjectedPercent: -1 is outside [0, 100]"},
	} {
		assert.PanicsWithValue(t, tt.want, func() { cache.NewSelector(c, tt.opt) })
	}
	// Init reports the same problems as errors, and keeps its options.
	sel := cache.NewSelector(c, cache.WithEjectAfter(2))
	before := sel.Options()
	err := sel.Init(selector.SetStrategy(selector.RoundRobin), cache.WithEjectAfter(-1))
	assert.EqualError(t, err, "regcache: selector Init: WithEjectAfter: -1 failures is negative")
	assert.Equal(t, before.Context, sel.Options().Context)
	// Valid values at their limits.
	assert.NotPanics(t, func() {
		cache.NewSelector(c, cache.WithEjectAfter(0), cache.WithEjectionTime(time.Second, time.Second),
			cache.WithMaximumEjectedPercent(0), cache.WithMaximumEjectedPercent(100))
	})
}

// TestSelectorHotPathAllocations: passive health adds no allocation to
// Select and Next, with or without an ejected node, nor to Mark of an
// answered attempt.
func TestSelectorHotPathAllocations(t *testing.T) {
	_, _, sel := selSetup(t, cache.WithEjectionTime(time.Hour, time.Hour))
	n1 := &registry.Node{Id: "n1", Address: "n1:8080"}
	selectNext := func() {
		next, err := sel.Select("svc")
		if err != nil {
			panic(err)
		}
		if _, err := next(); err != nil {
			panic(err)
		}
	}
	assert.EqualValues(t, 1, testing.AllocsPerRun(1000, selectNext), "Select+Next, all healthy")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { sel.Mark("svc", n1, nil) }), "Mark, all healthy")

	for i := 0; i < 3; i++ {
		sel.Mark("svc", &registry.Node{Id: "n5", Address: "n5:8080"}, errRefused)
	}
	require.Len(t, selStats(t, sel).Ejected, 1)
	// And the Next's record of its first pick, for a service with state.
	assert.EqualValues(t, 2, testing.AllocsPerRun(1000, selectNext), "Select+Next, one node ejected")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { sel.Mark("svc", n1, nil) }), "Mark of a healthy node")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { sel.Mark("svc", n1, handlerErr) }), "Mark of a handler error")
}

// TestSelectorConcurrentMarks races Select, Next, Mark, Stats, Reset and
// Init for the race detector, and checks the ejection share throughout.
func TestSelectorConcurrentMarks(t *testing.T) {
	_, _, sel := selSetup(t, cache.WithEjectAfter(2))
	var wg sync.WaitGroup
	var stop atomic.Bool
	outcomes := []error{nil, nil, errRefused, merrors.Timeout("go.micro.client", "timeout"), errors.New("handler")}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				next, err := sel.Select("svc")
				if err != nil {
					t.Error(err)
					return
				}
				node, err := next()
				if err != nil {
					t.Error(err)
					return
				}
				// Nodes n1 and n2 fail often, the others seldom.
				out := outcomes[(i+g)%len(outcomes)]
				if node.Id > "n2" && out != nil && i%7 != 0 {
					out = nil
				}
				sel.Mark("svc", node, out)
			}
		}(g)
	}
	var checker sync.WaitGroup
	checker.Add(1)
	go func() {
		defer checker.Done()
		for i := 0; !stop.Load(); i++ {
			st := selStats(t, sel)
			if len(st.Ejected) > 2 { // 50 % of 5 nodes
				t.Errorf("%d nodes ejected: %v", len(st.Ejected), ejectedIDs(st))
			}
			if i%50 == 0 {
				sel.Reset("svc")
				_ = sel.Init(cache.WithEjectAfter(2 + i%2))
			}
		}
	}()
	wg.Wait()
	stop.Store(true)
	checker.Wait()
}

// TestGoMicroClientMarksReachTheSelector makes real go-micro RPCs to a
// service of two live nodes and one that refuses connections, all listed
// in the registry: the client's Marks reach the selector, which ejects the
// dead node at its first refused connection. The handler of one live node
// returns errors, one of them shaped as the client's own connection error,
// as a handler that passes on the error of its own call would: none count.
func TestGoMicroClientMarksReachTheSelector(t *testing.T) {
	ok := greeterNode(t, "ok", func(req, rsp *SelHello) error { rsp.Name = "hello " + req.Name; return nil })
	failing := greeterNode(t, "failing", func(req, _ *SelHello) error {
		if req.Name == "relay" {
			return merrors.InternalServerError("go.micro.client", "connection error: dial tcp 10.0.0.1:1: refused")
		}
		return merrors.InternalServerError("regcache.greeter", "database down")
	})
	dead := &registry.Node{Id: "regcache.greeter-dead", Address: deadAddress(t)}

	reg := registry.NewMemoryRegistry()
	require.NoError(t, reg.Register(&registry.Service{
		Name: "regcache.greeter", Version: "latest", Nodes: []*registry.Node{ok, failing, dead},
	}))
	checkNoLeak(t)
	c := cache.New(reg, cache.WithLogger(benchLogger))
	t.Cleanup(c.Stop)
	// An ejection longer than any run of the test, however slow the
	// machine: no readmission on trial during it.
	health := cache.WithEjectionTime(time.Hour, time.Hour)
	sel := &markingSelector{Selector: cache.NewSelector(c, health), picks: map[string]int{}, marked: map[string][]error{}}
	cl := client.NewClient(
		client.Selector(sel),
		client.Registry(reg),
		client.Transport(transport.NewHTTPTransport()),
		client.Broker(broker.NewMemoryBroker(broker.Registry(reg))),
		client.PoolSize(0),
		client.Retries(0),
		client.WithLogger(benchLogger),
	)

	call := func(name string) error {
		req := cl.NewRequest("regcache.greeter", "MarkGreeter.Hello", &SelHello{Name: name})
		return cl.Call(context.Background(), req, &SelHello{})
	}
	for i := 0; i < 300; i++ {
		name := "regcache"
		if i%2 == 1 {
			name = "relay"
		}
		_ = call(name)
	}

	sel.mu.Lock()
	defer sel.mu.Unlock()
	// The client reported every attempt, with the errors described in
	// internal/eject/decide.go.
	require.Len(t, sel.marked[dead.Address], sel.picks[dead.Address])
	for _, err := range sel.marked[dead.Address] {
		var e *merrors.Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, "go.micro.client", e.Id)
		assert.EqualValues(t, 500, e.Code)
		assert.Contains(t, e.Detail, "connection error")
	}
	for _, err := range sel.marked[failing.Address] {
		require.Error(t, err)
		var e *merrors.Error
		assert.False(t, errors.As(err, &e), "a handler error reaches Mark as text: %T", err)
	}

	assert.Equal(t, 1, sel.picks[dead.Address], "attempts on the dead node: its refused connection ejects it, then none")
	assert.Greater(t, sel.picks[failing.Address], 100, "the node with handler errors kept its share")
	assert.Greater(t, sel.picks[ok.Address], 100)
	st := selStats(t, sel.Selector)
	require.Len(t, st.Ejected, 1)
	assert.Equal(t, dead.Address, st.Ejected[0].Address)
	assert.EqualValues(t, 1, st.Failures)
	t.Logf("picks: ok %d, handler errors %d, dead %d", sel.picks[ok.Address], sel.picks[failing.Address], sel.picks[dead.Address])
}

// go-micro's client takes every retry of an RPC from the one Next that its
// Select returned. A Next handed out before a node is ejected skips it from
// the ejection on, with the default strategy and with a custom one.
func TestANextTakenBeforeAnEjectionSkipsTheNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []selector.SelectOption
	}{{"default strategy", nil}, {"round robin", []selector.SelectOption{selector.WithStrategy(selector.RoundRobin)}}} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeak(t)
			r := newReg(selService("1", "a", "b", "dead"))
			c := cache.New(r, cache.WithLogger(benchLogger))
			defer c.Stop()
			sel := cache.NewSelector(c)
			next, err := sel.Select("svc", tc.opts...)
			require.NoError(t, err)
			dead := &registry.Node{Id: "dead", Address: "dead:8080"}
			for i := 0; i < 3; i++ { // the default ejects after 3 in a row
				sel.Mark("svc", dead, errRefused)
			}
			for i := 0; i < 3000; i++ {
				n, err := next()
				require.NoError(t, err)
				require.NotEqual(t, "dead", n.Id, "pick %d went to the node ejected after Select", i)
			}
		})
	}
}
