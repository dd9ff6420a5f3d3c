package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/transport"

	cache "github.com/regcache/cache"
)

// newSelector is the selector the go-micro client uses: it reads the cache.
// (Before cache.NewSelector existed this was go-micro's
// selector.NewSelector(selector.Registry(c)), which wraps c in a second
// cache with one watch stream per service.)
func newSelector(c cache.Cache) selector.Selector {
	return cache.NewSelector(c)
}

// HelloRequest and HelloResponse go over go-micro's own transport and codec
// (HTTP transport, application/json codec).
type HelloRequest struct {
	Name string `json:"name"`
}

type HelloResponse struct {
	Greeting string `json:"greeting"`
	Server   string `json:"server"`
}

// Greeter is the handler of a test server; it counts the calls it serves.
type Greeter struct {
	id    string
	mu    sync.Mutex
	calls int
}

func (g *Greeter) Hello(_ context.Context, req *HelloRequest, rsp *HelloResponse) error {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	rsp.Greeting = "hello " + req.Name
	rsp.Server = g.id
	return nil
}

func (g *Greeter) Calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// startServer starts a go-micro RPC server named name with its own etcd
// registry client, as a separate process would have, on a loopback port
// picked at run time. Every dependency is explicit: no go-micro default, so
// no mdns. It is stopped (and deregistered) when the test ends.
func startServer(t *testing.T, s *etcdServer, name, id string) *Greeter {
	t.Helper()
	return startGreeter(t, s, name, id).Greeter
}

// greeterServer is a running test server.
type greeterServer struct {
	*Greeter
	srv  server.Server
	reg  *timedRegistry
	once sync.Once
	t    *testing.T
}

// startGreeter is startServer, returning a handle that can stop the server
// before the test ends and tells when it registered.
func startGreeter(t *testing.T, s *etcdServer, name, id string) *greeterServer {
	t.Helper()
	g := &greeterServer{Greeter: &Greeter{id: id}, t: t, reg: &timedRegistry{Registry: newEtcdRegistry(t, s, 2*time.Second)}}
	g.srv = server.NewServer(
		server.Name(name),
		server.Id(id), // server.DefaultId is one per process
		server.Address("127.0.0.1:0"),
		server.Registry(g.reg),
		server.Broker(broker.NewMemoryBroker()),
		server.Transport(transport.NewHTTPTransport()),
		server.RegisterTTL(30*time.Second),
		server.RegisterInterval(5*time.Second),
		server.WithLogger(newTestLogger(t)),
	)
	if err := g.srv.Handle(g.srv.NewHandler(g.Greeter)); err != nil {
		t.Fatalf("server %s: handle: %v", id, err)
	}
	if err := g.srv.Start(); err != nil {
		t.Fatalf("server %s: start: %v", id, err)
	}
	t.Cleanup(g.Stop)
	return g
}

// Stop deregisters the server and stops it. It is idempotent.
func (g *greeterServer) Stop() {
	g.once.Do(func() {
		if err := g.srv.Stop(); err != nil {
			g.t.Errorf("server %s: stop: %v", g.id, err)
		}
	})
}

// timedRegistry records when the first Register call returned, and when
// the first Deregister call was made.
type timedRegistry struct {
	registry.Registry
	mu                        sync.Mutex
	registered, deregistering time.Time
}

func (r *timedRegistry) Register(s *registry.Service, opts ...registry.RegisterOption) error {
	err := r.Registry.Register(s, opts...)
	now := time.Now()
	r.mu.Lock()
	if err == nil && r.registered.IsZero() {
		r.registered = now
	}
	r.mu.Unlock()
	return err
}

func (r *timedRegistry) Deregister(s *registry.Service, opts ...registry.DeregisterOption) error {
	now := time.Now()
	r.mu.Lock()
	if r.deregistering.IsZero() {
		r.deregistering = now
	}
	r.mu.Unlock()
	return r.Registry.Deregister(s, opts...)
}

// Registered is when the server's first registration returned: its node was
// in etcd from then on.
func (g *greeterServer) Registered() time.Time {
	g.reg.mu.Lock()
	defer g.reg.mu.Unlock()
	return g.reg.registered
}

// Deregistering is when the server started to deregister.
func (g *greeterServer) Deregistering() time.Time {
	g.reg.mu.Lock()
	defer g.reg.mu.Unlock()
	return g.reg.deregistering
}

// newClient returns a go-micro RPC client that picks nodes through a
// selector reading c. It has no registry of its own: client.Registry would
// re-initialise the selector it finds, and the client needs no registry
// beyond the selector's.
//
// PoolSize(0) dials a connection per call. With go-micro v4.11.0's HTTP
// transport and the default pool, a call now and then hangs until its
// timeout under -race: the client waits in http.ReadResponse while the
// server waits in http.ReadRequest on the same pooled connection (about one
// call in a few hundred here; none in 6000 without -race). That is go-micro's,
// not the cache's, and would make this test flaky.
func newClient(t *testing.T, c cache.Cache) client.Client {
	t.Helper()
	return client.NewClient(
		client.Selector(newSelector(c)),
		client.Broker(broker.NewMemoryBroker()),
		client.Transport(transport.NewHTTPTransport()),
		client.RequestTimeout(5*time.Second),
		client.PoolSize(0),
		client.WithLogger(newTestLogger(t)),
	)
}

func hello(cl client.Client, name string) (*HelloResponse, error) {
	req := cl.NewRequest(name, "Greeter.Hello", &HelloRequest{Name: "it"})
	rsp := new(HelloResponse)
	if err := cl.Call(context.Background(), req, rsp); err != nil {
		return nil, err
	}
	return rsp, nil
}

// TestGoMicroEndToEnd: a go-micro server registers in etcd, and a go-micro
// client reaches it through a selector reading the cache: every RPC is a
// lookup in the cache, and the registry is asked once. RPCs keep succeeding
// while etcd is down for longer than the TTL. After etcd is back, a second
// server instance gets traffic within a second of its registration, well
// under the TTL, and with no registry lookup: through the watch stream.
func TestGoMicroEndToEnd(t *testing.T) {
	const (
		name = "it.greeter"
		ttl  = 3 * time.Second
		// The new instance must get traffic this soon: a third of the
		// TTL, so that only the watch stream can tell the cache.
		watchLimit = time.Second
	)
	s := startEtcd(t)
	counted := newCountingRegistry(newEtcdRegistry(t, s, 2*time.Second))
	c := newCache(t, counted, cache.WithTTL(ttl), cache.WithMinimumRetryInterval(time.Second))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("watch stream of the cache:\n%s", strings.Join(counted.Events(), "\n"))
		}
	})
	g1 := startServer(t, s, name, "s1")
	cl := newClient(t, c)

	call := func(phase string) string {
		t.Helper()
		rsp, err := hello(cl, name)
		if err != nil {
			t.Fatalf("%s: RPC failed: %v", phase, err)
		}
		if rsp.Greeting != "hello it" {
			t.Fatalf("%s: RPC answered %+v", phase, rsp)
		}
		return rsp.Server
	}

	// Each RPC looks the service up in the cache; the first lookup asks
	// the registry.
	const first = 20
	lookups := c.Stats().Lookups
	for i := 0; i < first; i++ {
		if got := call("before the outage"); got != "s1" {
			t.Fatalf("before the outage: answered by %q, want s1", got)
		}
	}
	if n := c.Stats().Lookups - lookups; n < first {
		t.Fatalf("%d RPCs made %d lookups in the cache: the client does not read the cache", first, n)
	}
	// (A second lookup is the re-validation of data fetched before the
	// watch stream was established, once the retry interval has passed.)
	if n := counted.Gets(name); n > 2 {
		t.Fatalf("%d RPCs made %d registry lookups of %s, want 1 or 2: the cache did not serve them", first, n, name)
	}

	// Outage: RPCs keep succeeding on the cached node, for longer than
	// the cache's TTL.
	waitStream(t, counted, newEtcdRegistry(t, s, 2*time.Second))
	s.Stop()
	down := time.Now()
	calls := 0
	for time.Since(down) < ttl+2*time.Second {
		call("during the outage")
		calls++
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d RPCs succeeded during %v of etcd outage (TTL %v)", calls, time.Since(down).Round(time.Millisecond), ttl)

	// etcd is back. Once the cache has refreshed the service from it and
	// its watch stream is seen delivering again, a second instance starts
	// and registers.
	s.Start()
	back := time.Now()
	waitFor(t, 30*time.Second, "the cache refreshed "+name+" after the restart", func() bool {
		call("after the restart")
		for _, row := range c.Services(name, "", 1) {
			if row.Name == name {
				return row.Fresh && row.Failures == 0
			}
		}
		return false
	})
	warmUpWatch(t, c, newEtcdRegistry(t, s, 2*time.Second), name)
	gets := counted.Gets(name)
	g2 := startGreeter(t, s, name, "s2")
	for {
		if call("after the new instance registered") == "s2" {
			break
		}
		if time.Since(g2.Registered()) > watchLimit {
			t.Fatalf("the new instance got no RPC within %v of its registration; through the watch stream: %v",
				watchLimit, streamDelivered(counted, "create "+name+" [it.greeter-s2]"))
		}
		time.Sleep(2 * time.Millisecond)
	}
	took := time.Since(g2.Registered())
	t.Logf("the instance started after the restart got its first RPC %v after it registered (%v after etcd came back)",
		took.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
	if n := counted.Gets(name) - gets; n != 0 {
		t.Fatalf("%d registry lookups of %s before the new instance got traffic: the watch stream did not tell the cache", n, name)
	}
	if !streamDelivered(counted, "create "+name+" [it.greeter-s2]") {
		t.Fatalf("the cache's watch stream did not deliver the new instance")
	}

	before1, before2 := g1.Calls(), g2.Calls()
	const n = 200
	for i := 0; i < n; i++ {
		call("after the restart")
	}
	got1, got2 := g1.Calls()-before1, g2.Calls()-before2
	t.Logf("of %d RPCs after the restart: s1 served %d, s2 served %d", n, got1, got2)
	if got1+got2 != n {
		t.Fatalf("servers saw %d calls, want %d", got1+got2, n)
	}
	// A random strategy over two nodes: each gets about half. The bounds
	// only rule out "one of them gets nothing", at odds of about 1e-18.
	if got1 < n/10 || got2 < n/10 {
		t.Fatalf("traffic not shared between both instances: s1 %d, s2 %d", got1, got2)
	}
	t.Logf("registry lookups of %s through the cache: %d; Watch calls: %d", name, counted.Gets(name), counted.Watches())
}
