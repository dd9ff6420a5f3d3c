package gomicro_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/transport"
	"go-micro.dev/v4/util/cmd"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/gomicro"
)

// The retry policy of the one-line wiring: an attempt that could not open
// a connection is retried on another node; every other outcome is left to
// the client's own policy.

// Teller answers Hello with what its answer says, counting the requests
// that reach it.
type Teller struct {
	calls  atomic.Int64
	answer func(ctx context.Context) error
}

func (t *Teller) Hello(ctx context.Context, req *Hello, rsp *Hello) error {
	t.calls.Add(1)
	if t.answer != nil {
		if err := t.answer(ctx); err != nil {
			return err
		}
	}
	rsp.Name = "hello " + req.Name
	return nil
}

// tellerNode runs a go-micro server of the Teller with the id on
// 127.0.0.1, registered in a registry of its own, and returns its node.
// Cleanup stops it.
func tellerNode(t *testing.T, id string, teller *Teller) *registry.Node {
	t.Helper()
	reg := registry.NewMemoryRegistry()
	srv := server.NewServer(
		server.Name("regcache.teller"),
		server.Id(id), // the default Id is the same for every server of a process
		server.Address("127.0.0.1:0"),
		server.Registry(reg),
		server.Transport(transport.NewHTTPTransport()),
		server.Broker(broker.NewMemoryBroker(broker.Registry(reg))),
		server.WithLogger(quiet{}),
	)
	require.NoError(t, srv.Handle(srv.NewHandler(teller)))
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Stop() })
	svcs, err := reg.GetService("regcache.teller")
	require.NoError(t, err)
	return svcs[0].Nodes[0]
}

// deadNode returns a node of the service at a loopback address that
// refuses connections: its server is gone, its registration is not.
func deadNode(t *testing.T, id string, like *registry.Node) *registry.Node {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return &registry.Node{Id: id, Address: addr, Metadata: like.Metadata}
}

// tellers lists nodes as the service "regcache.teller" in a new memory
// registry.
func tellers(t *testing.T, nodes ...*registry.Node) registry.Registry {
	t.Helper()
	reg := registry.NewMemoryRegistry()
	require.NoError(t, reg.Register(&registry.Service{Name: "regcache.teller", Version: "latest", Nodes: nodes}))
	return reg
}

// dialCounter is the client's transport, counting its dials by address:
// with no connection pool, one per attempt.
type dialCounter struct {
	transport.Transport
	mu    sync.Mutex
	dials map[string]int
}

func newDialCounter() *dialCounter {
	return &dialCounter{Transport: transport.NewHTTPTransport(), dials: map[string]int{}}
}

func (d *dialCounter) Dial(addr string, opts ...transport.DialOption) (transport.Client, error) {
	d.mu.Lock()
	d.dials[addr]++
	d.mu.Unlock()
	return d.Transport.Dial(addr, opts...)
}

func (d *dialCounter) to(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials[addr]
}

func (d *dialCounter) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.dials {
		n += c
	}
	return n
}

// wiredClient returns the client of a service wired with
// gomicro.Registry(reg), made with opts and dialling through tr. Its
// server is never started. Cleanup closes the selector, which stops the
// cache.
func wiredClient(t *testing.T, reg registry.Registry, tr transport.Transport, opts ...client.Option) client.Client {
	t.Helper()
	svc := micro.NewService(
		micro.Server(server.NewServer(server.Name("regcache.caller"), server.Address("127.0.0.1:0"))),
		micro.Client(newClient(tr, opts...)),
		micro.Broker(broker.NewMemoryBroker()),
		micro.Logger(quiet{}),
		gomicro.Registry(reg, cache.WithLogger(quiet{})),
	)
	cl := svc.Client()
	t.Cleanup(func() { require.NoError(t, cl.Options().Selector.Close()) })
	return cl
}

// newClient returns a go-micro client dialling through tr, with no
// connection pool (go-micro's pool hangs under -race) and opts.
func newClient(tr transport.Transport, opts ...client.Option) client.Client {
	return client.NewClient(append([]client.Option{
		client.Transport(tr), client.PoolSize(0), client.WithLogger(quiet{}),
	}, opts...)...)
}

// hello makes one RPC to the Teller through cl.
func hello(cl client.Client, opts ...client.CallOption) error {
	var rsp Hello
	req := cl.NewRequest("regcache.teller", "Teller.Hello", &Hello{Name: "regcache"})
	return cl.Call(context.Background(), req, &rsp, opts...)
}

// noBackoff retries at once.
func noBackoff(context.Context, client.Request, int) (time.Duration, error) { return 0, nil }

// TestRefusedIsRetriedOnAnotherNode: of a service's two nodes, one refuses
// connections. Through the one-line wiring every call succeeds, and the
// dead node gets one attempt, the one that ejects it. Through go-micro's
// selector and retry policy, every call that picks it fails.
func TestRefusedIsRetriedOnAnotherNode(t *testing.T) {
	const calls = 40
	live := &Teller{}
	liveNode := tellerNode(t, "teller-live", live)
	dead := deadNode(t, "teller-dead", liveNode)

	t.Run("gomicro.Registry", func(t *testing.T) {
		checkNoCacheLeft(t)
		live.calls.Store(0)
		tr := newDialCounter()
		cl := wiredClient(t, tellers(t, liveNode, dead), tr)
		for i := 0; i < calls; i++ {
			require.NoError(t, hello(cl), "call %d", i)
		}
		assert.Equal(t, 1, tr.to(dead.Address), "attempts on the dead node")
		assert.EqualValues(t, calls, live.calls.Load(), "requests served")
		st := cl.Options().Selector.(cache.Selector).Stats()
		assert.EqualValues(t, 1, st.Ejections)
		require.Len(t, st.Ejected, 1)
		assert.Equal(t, dead.Address, st.Ejected[0].Address)
	})
	t.Run("go-micro's selector and retry policy", func(t *testing.T) {
		live.calls.Store(0)
		tr := newDialCounter()
		reg := tellers(t, liveNode, dead)
		sel := selector.NewSelector(selector.Registry(reg))
		t.Cleanup(func() { _ = sel.Close() })
		cl := newClient(tr, client.Selector(sel), client.Registry(reg))
		failed := 0
		for i := 0; i < calls; i++ {
			if err := hello(cl); err != nil {
				failed++
			}
		}
		// Random picks: every call that picks the dead node fails.
		assert.Equal(t, failed, tr.to(dead.Address), "failed calls, one per attempt on the dead node")
		assert.Positive(t, failed)
		assert.EqualValues(t, calls-failed, live.calls.Load())
		t.Logf("go-micro's selector and retry policy: %d of %d calls failed", failed, calls)
	})
}

// TestRefusedEverywhereFailsAfterOneRetry: when every node refuses, a call
// makes two attempts, not one per retry of the client's.
func TestRefusedEverywhereFailsAfterOneRetry(t *testing.T) {
	checkNoCacheLeft(t)
	like := tellerNode(t, "teller-like", &Teller{})
	tr := newDialCounter()
	cl := wiredClient(t, tellers(t, deadNode(t, "teller-dead-1", like), deadNode(t, "teller-dead-2", like)), tr)
	require.Equal(t, 5, cl.Options().CallOptions.Retries, "go-micro's default")
	err := hello(cl)
	var e *merrors.Error
	require.ErrorAs(t, err, &e)
	assert.Contains(t, e.Detail, "connection refused")
	assert.Equal(t, 2, tr.total(), "attempts")
}

// TestAnswerIsNeverSentTwice: an error that the service's handler returns
// came from a server that received the request; the wiring does not send
// it again, even when the handler passes on the client's error of a call
// of its own, which reads as a connection that could not be opened.
func TestAnswerIsNeverSentTwice(t *testing.T) {
	checkNoCacheLeft(t)
	for _, answer := range []error{
		merrors.InternalServerError("go.micro.client", "connection error: dial tcp 10.0.0.1:1: connect: connection refused"),
		merrors.InternalServerError("regcache.teller", "database down"),
	} {
		teller := &Teller{answer: func(context.Context) error { return answer }}
		tr := newDialCounter()
		cl := wiredClient(t, tellers(t, tellerNode(t, "teller", teller)), tr, client.Backoff(noBackoff))
		require.Error(t, hello(cl))
		assert.EqualValues(t, 1, teller.calls.Load(), "requests received: %v", answer)
		assert.Equal(t, 1, tr.total(), "attempts: %v", answer)
	}
}

// TestOtherErrorsAreTheClientsPolicys: a timeout, or a handler's error, is
// retried as the policy the client had says: go-micro's, which retries a
// timeout, or the user's own, given before the wiring, which never hears
// of the refused connection that the wiring retried.
func TestOtherErrorsAreTheClientsPolicys(t *testing.T) {
	// The attempt times out on the client after 50 ms; the handler
	// answers once the call has returned. (An answer that arrives as the
	// client closes the attempt it gave up on races in go-micro's client,
	// whose rpcCodec.Close resets the buffers that the attempt's ReadHeader
	// may be filling.)
	slowNode := func(t *testing.T) *registry.Node {
		release := make(chan struct{})
		node := tellerNode(t, "teller", &Teller{answer: func(context.Context) error {
			<-release
			return nil
		}})
		t.Cleanup(func() { close(release) }) // before the server stops
		return node
	}
	timeout := func(o *client.CallOptions) { o.ConnectionTimeout = 50 * time.Millisecond }

	t.Run("a timeout, go-micro's policy", func(t *testing.T) {
		checkNoCacheLeft(t)
		node := slowNode(t)
		tr := newDialCounter()
		cl := wiredClient(t, tellers(t, node), tr, client.Retries(1), client.Backoff(noBackoff))
		err := hello(cl, timeout)
		var e *merrors.Error
		require.ErrorAs(t, err, &e)
		assert.EqualValues(t, 408, e.Code)
		assert.Equal(t, 2, tr.to(node.Address), "attempts: go-micro's policy retries a timeout")
	})

	// record is the user's policy: it retries nothing, and records the
	// errors it is asked about.
	type asked struct {
		n   int
		err error
	}
	var mu sync.Mutex
	var heard []asked
	record := func(ctx context.Context, req client.Request, n int, err error) (bool, error) {
		mu.Lock()
		heard = append(heard, asked{n, err})
		mu.Unlock()
		return false, nil
	}
	t.Run("a timeout, the user's policy", func(t *testing.T) {
		checkNoCacheLeft(t)
		heard = nil
		node := slowNode(t)
		tr := newDialCounter()
		cl := wiredClient(t, tellers(t, node), tr, client.Retry(record), client.Backoff(noBackoff))
		require.Error(t, hello(cl, timeout))
		assert.Equal(t, 1, tr.to(node.Address), "attempts: the user's policy retries nothing")
		require.Len(t, heard, 1)
		assert.Equal(t, 0, heard[0].n)
		assert.Contains(t, heard[0].err.Error(), `"code":408`)
	})
	t.Run("a refused connection, then a handler's error, the user's policy", func(t *testing.T) {
		checkNoCacheLeft(t)
		heard = nil
		teller := &Teller{answer: func(context.Context) error { return merrors.InternalServerError("regcache.teller", "database down") }}
		node := tellerNode(t, "teller", teller)
		dead := deadNode(t, "teller-dead", node)
		tr := newDialCounter()
		cl := wiredClient(t, tellers(t, node, dead), tr, client.Retry(record), client.Backoff(noBackoff))
		// Until a call picks the dead node first: its refused
		// connection is retried, and the handler's error of the retry
		// goes to the user's policy.
		for tr.to(dead.Address) == 0 {
			require.Error(t, hello(cl))
		}
		assert.Equal(t, 1, tr.to(dead.Address))
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, heard)
		for _, h := range heard {
			assert.Contains(t, h.err.Error(), "database down", "the user's policy hears only of answers")
		}
		last := heard[len(heard)-1]
		assert.Equal(t, 1, last.n, "the answer of the retry")
		assert.EqualValues(t, len(heard), teller.calls.Load(), "requests received: each once")
	})
}

// TestANewClientGetsTheRetryPolicy: --client or MICRO_CLIENT makes a new
// client in service.Init, with go-micro's retry policy; the wiring's goes
// in with regcache's selector.
func TestANewClientGetsTheRetryPolicy(t *testing.T) {
	checkNoCacheLeft(t)
	withArgs(t)
	live := &Teller{}
	liveNode := tellerNode(t, "teller-live", live)
	dead := deadNode(t, "teller-dead", liveNode)
	tr := newDialCounter()
	cmd.DefaultClients["regcache-retry-client"] = func(opts ...client.Option) client.Client {
		return newClient(tr, opts...)
	}
	t.Cleanup(func() { delete(cmd.DefaultClients, "regcache-retry-client") })
	t.Setenv("MICRO_CLIENT", "regcache-retry-client")

	svc := micro.NewService(
		micro.Server(server.NewServer(server.Name("regcache.caller"), server.Address("127.0.0.1:0"))),
		micro.Client(newClient(transport.NewHTTPTransport())),
		micro.Broker(broker.NewMemoryBroker()),
		micro.Logger(quiet{}),
		gomicro.Registry(tellers(t, liveNode, dead), cache.WithLogger(quiet{})),
	)
	svc.Init()
	cl := svc.Client()
	t.Cleanup(func() { require.NoError(t, cl.Options().Selector.Close()) })
	require.Equal(t, "regcache", cl.Options().Selector.String())
	for i := 0; i < 40; i++ {
		require.NoError(t, hello(cl), "call %d", i)
	}
	assert.Equal(t, 1, tr.to(dead.Address), "attempts on the dead node")
}
