package cache_test

import (
	"context"
	"errors"
	"net"
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
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/transport"

	cache "github.com/regcache/cache"
)

// errMarkRefused is what go-micro's client passes to Mark for a node it
// cannot connect to.
var errMarkRefused = merrors.InternalServerError("go.micro.client",
	"connection error: dial tcp 127.0.0.1:1: connect: connection refused")

func TestNewSelectorPanicsOnInvalidHealthOptions(t *testing.T) {
	c := cache.New(newBenchReg(), cache.WithLogger(benchLogger))
	defer c.Stop()
	for _, tt := range []struct {
		opt  selector.Option
		want string
	}{
		{cache.WithEjectAfter(-1), "regcache: NewSelector: WithEjectAfter: -1 failures is negative"},
		{cache.WithEjectionTime(0, time.Minute), "regcache: NewSelector: WithEjectionTime: base 0s is not positive"},
		{cache.WithEjectionTime(time.Minute, time.Second), "regcache: NewSelector: WithEjectionTime: max 1s is below the base 1m0s"},
		{cache.WithMaxEjectedPercent(101), "regcache: NewSelector: WithMaxEjectedPercent: 101 is outside [0, 100]"},
		{cache.WithMaxEjectedPercent(-1), "regcache: NewSelector: WithMaxEjectedPercent: -1 is outside [0, 100]"},
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
			cache.WithMaxEjectedPercent(0), cache.WithMaxEjectedPercent(100))
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
		sel.Mark("svc", &registry.Node{Id: "n5", Address: "n5:8080"}, errMarkRefused)
	}
	require.Len(t, selStats(t, sel).Ejected, 1)
	// And the Next's record of its first pick, for a service with state.
	assert.EqualValues(t, 2, testing.AllocsPerRun(1000, selectNext), "Select+Next, one node ejected")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { sel.Mark("svc", n1, nil) }), "Mark of a healthy node")
	handlerErr := merrors.InternalServerError("svc", "boom")
	assert.Zero(t, testing.AllocsPerRun(1000, func() { sel.Mark("svc", n1, handlerErr) }), "Mark of a handler error")
}

// TestSelectorConcurrentMarks races Select, Next, Mark, Stats, Reset and
// Init for the race detector, and checks the ejection share throughout.
func TestSelectorConcurrentMarks(t *testing.T) {
	_, _, sel := selSetup(t, cache.WithEjectAfter(2))
	var wg sync.WaitGroup
	var stop atomic.Bool
	outcomes := []error{nil, nil, errMarkRefused, merrors.Timeout("go.micro.client", "timeout"), errors.New("handler")}
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

// greeterNode runs a go-micro server of MarkGreeter with the id on
// 127.0.0.1, on its own registry, with handler as its Hello, and returns
// its node. Cleanup stops it.
func greeterNode(t *testing.T, id string, handler func(*SelHello, *SelHello) error) *registry.Node {
	t.Helper()
	reg := registry.NewMemoryRegistry()
	srv := server.NewServer(
		server.Name("regcache.greeter"),
		server.Id(id), // the default Id is the same for every server of a process
		server.Address("127.0.0.1:0"),
		server.Registry(reg),
		server.Transport(transport.NewHTTPTransport()),
		server.Broker(broker.NewMemoryBroker(broker.Registry(reg))),
		server.WithLogger(benchLogger),
	)
	require.NoError(t, srv.Handle(srv.NewHandler(&MarkGreeter{handler})))
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Stop() })
	svcs, err := reg.GetService("regcache.greeter")
	require.NoError(t, err)
	return svcs[0].Nodes[0]
}

// MarkGreeter serves Hello with a handler of the test's choice.
type MarkGreeter struct {
	hello func(*SelHello, *SelHello) error
}

func (g *MarkGreeter) Hello(_ context.Context, req *SelHello, rsp *SelHello) error {
	return g.hello(req, rsp)
}

// deadAddress returns a loopback address that refuses connections.
func deadAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// markingSelector counts, per node address, the nodes that Next hands out
// and the errors that the client passes to Mark.
type markingSelector struct {
	selector.Selector
	mu     sync.Mutex
	picks  map[string]int
	marked map[string][]error
	// inFlight counts, by address, the attempts picked and not yet
	// marked, and mostInFlight the most there were at once.
	inFlight, mostInFlight map[string]int
	// retried counts, by address, the picks that were not the first of
	// their Next: the retries of a call.
	retried map[string]int
}

func (s *markingSelector) Select(service string, opts ...selector.SelectOption) (selector.Next, error) {
	next, err := s.Selector.Select(service, opts...)
	if err != nil {
		return nil, err
	}
	picked := false
	return func() (*registry.Node, error) {
		n, err := next()
		if n != nil {
			s.mu.Lock()
			s.picks[n.Address]++
			if s.inFlight == nil {
				s.inFlight, s.mostInFlight, s.retried = map[string]int{}, map[string]int{}, map[string]int{}
			}
			if picked {
				s.retried[n.Address]++
			}
			picked = true
			s.inFlight[n.Address]++
			s.mostInFlight[n.Address] = max(s.mostInFlight[n.Address], s.inFlight[n.Address])
			s.mu.Unlock()
		}
		return n, err
	}, nil
}

func (s *markingSelector) Mark(service string, node *registry.Node, err error) {
	s.mu.Lock()
	s.marked[node.Address] = append(s.marked[node.Address], err)
	if s.inFlight[node.Address] > 0 {
		s.inFlight[node.Address]--
	}
	s.mu.Unlock()
	s.Selector.Mark(service, node, err)
}

// TestGoMicroClientMarksReachTheSelector makes real go-micro RPCs to a
// service of two live nodes and one that refuses connections, all listed
// in the registry: the client's Marks reach the selector, which ejects the
// dead node after its first few failures. The handler of one live node
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

	assert.Equal(t, 3, sel.picks[dead.Address], "attempts on the dead node: the first 3 failures, then none")
	assert.Greater(t, sel.picks[failing.Address], 100, "the node with handler errors kept its share")
	assert.Greater(t, sel.picks[ok.Address], 100)
	st := selStats(t, sel.Selector)
	require.Len(t, st.Ejected, 1)
	assert.Equal(t, dead.Address, st.Ejected[0].Address)
	assert.EqualValues(t, 3, st.Failures)
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
			r := newBenchReg(selService("1", "a", "b", "dead"))
			c := cache.New(r, cache.WithLogger(benchLogger))
			defer c.Stop()
			sel := cache.NewSelector(c)
			next, err := sel.Select("svc", tc.opts...)
			require.NoError(t, err)
			dead := &registry.Node{Id: "dead", Address: "dead:8080"}
			for i := 0; i < 3; i++ { // the default ejects after 3 in a row
				sel.Mark("svc", dead, errMarkRefused)
			}
			for i := 0; i < 3000; i++ {
				n, err := next()
				require.NoError(t, err)
				require.NotEqual(t, "dead", n.Id, "pick %d went to the node ejected after Select", i)
			}
		})
	}
}
