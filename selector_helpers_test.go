package cache_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/broker"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/transport"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// The helpers of the selector's passive health tests, which drive a
// selector through its public API as go-micro's client does.

// The errors that go-micro v4.11.0's client passes to Mark
// (client/rpc_client.go, rpc_codec.go) when it cannot reach a node. A
// refused connection ejects the node at once; the others count towards
// the run of failures that ejects it.
var (
	errRefused = merrors.InternalServerError("go.micro.client",
		"connection error: dial tcp 127.0.0.1:1: connect: connection refused")
	errDialTimedOut = merrors.InternalServerError("go.micro.client",
		"connection error: dial tcp 127.0.0.1:1: i/o timeout")
	errTimedOut = merrors.Timeout("go.micro.client", "context deadline exceeded")
	errBroken   = merrors.InternalServerError("go.micro.client.transport", "read tcp: connection reset by peer")
)

// handlerErr is an answer: the node was reached.
var handlerErr = merrors.InternalServerError("svc", "boom")

// listedNode is the node of "svc" with the id, as selService lists it.
func listedNode(id string) *registry.Node {
	return &registry.Node{Id: id, Address: id + ":8080"}
}

// withAddressNode is the node that go-micro's client (client/rpc_client.go,
// next) builds for a call made with client.WithAddress: an address, no Id,
// and it passes it to Mark under the service's name.
func withAddressNode(addr string) *registry.Node {
	return &registry.Node{Address: addr, Metadata: map[string]string{"protocol": "mucp"}}
}

// failN reports n failures to reach node, each after a Select, as
// go-micro's client does for n calls.
func failN(t *testing.T, sel selector.Selector, node *registry.Node, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		_, err := sel.Select("svc")
		require.NoError(t, err)
		sel.Mark("svc", node, errDialTimedOut)
	}
}

// pickCounts calls next n times and counts the picks per node id.
func pickCounts(t *testing.T, next selector.Next, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := 0; i < n; i++ {
		node, err := next()
		require.NoError(t, err)
		counts[node.Id]++
	}
	return counts
}

// selStats returns the Stats of sel, which must be a cache.Selector.
func selStats(t *testing.T, sel selector.Selector) cache.SelectorStats {
	t.Helper()
	s, ok := sel.(cache.Selector)
	require.True(t, ok, "the selector is not a cache.Selector")
	return s.Stats()
}

// ejectedIDs returns the Ids of the Ejected rows of st, in order.
func ejectedIDs(st cache.SelectorStats) []string {
	ids := []string{}
	for _, e := range st.Ejected {
		ids = append(ids, e.Id)
	}
	return ids
}

// ejectedRows formats the Ejected rows of st for failure messages.
func ejectedRows(st cache.SelectorStats) string {
	s := "["
	for i, e := range st.Ejected {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s(id %q, %s)", e.Service, e.Id, e.Address)
	}
	return s + "]"
}

// remaining returns the Remaining of the Ejected rows of st, in order.
func remaining(st cache.SelectorStats) []time.Duration {
	out := []time.Duration{}
	for _, e := range st.Ejected {
		out = append(out, e.Remaining)
	}
	return out
}

// healthSim is a service of nodes behind a cache and a selector, and a
// client that calls it every callEvery. The tests run it in a
// testing/synctest bubble where time is fake: ten minutes of calls take a
// fraction of a second, and the bubble fails the test if a goroutine of the
// cache outlives it.
type healthSim struct {
	t   *testing.T
	reg *fakereg.Registry
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
	r := newReg(selService("1", ids...))
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

// ejectN3 makes n3 refuse connections until it is ejected.
func (s *healthSim) ejectN3() {
	s.t.Helper()
	s.answer = func(id string) error {
		if id == "n3" {
			return errRefused
		}
		return nil
	}
	for len(selStats(s.t, s.sel).Ejected) == 0 {
		s.call()
		time.Sleep(callEvery)
	}
	require.Equal(s.t, []string{"n3"}, ejectedIDs(selStats(s.t, s.sel)))
}

// event applies a watch event to the cache and waits until it has.
func (s *healthSim) event(action string, svc *registry.Service) {
	sendEvent(s.reg, action, svc)
	barrier(s.reg)
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
	// timeOut, when set, is a node whose attempt fails with go-micro's
	// client timeout, as Mark hears it, the next time Next hands out the
	// node at the address timeOutWhile: once, an attempt on another node
	// that ends while that one is out.
	timeOut      *registry.Node
	timeOutWhile string
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
			var other *registry.Node
			if n.Address == s.timeOutWhile {
				other, s.timeOut = s.timeOut, nil
			}
			s.mu.Unlock()
			if other != nil {
				s.Mark(service, other, merrors.Timeout("go.micro.client", "<nil>"))
			}
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
