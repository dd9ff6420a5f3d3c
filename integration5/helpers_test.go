package integration5

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v5/broker"
	"go-micro.dev/v5/client"
	"go-micro.dev/v5/logger"
	"go-micro.dev/v5/registry"
	"go-micro.dev/v5/selector"
	"go-micro.dev/v5/server"
	"go-micro.dev/v5/transport"
)

// countingRegistry counts the calls that reach the registry.
type countingRegistry struct {
	registry.Registry
	mu                   sync.Mutex
	gets                 map[string]int
	lists, watches, fail int
}

func newCountingRegistry(r registry.Registry) *countingRegistry {
	return &countingRegistry{Registry: r, gets: map[string]int{}}
}

func (c *countingRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	svcs, err := c.Registry.GetService(name, opts...)
	c.mu.Lock()
	c.gets[name]++
	if err != nil && err != registry.ErrNotFound {
		c.fail++
	}
	c.mu.Unlock()
	return svcs, err
}

func (c *countingRegistry) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.Registry.ListServices(opts...)
}

func (c *countingRegistry) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	c.mu.Lock()
	c.watches++
	c.mu.Unlock()
	return c.Registry.Watch(opts...)
}

// Gets is the number of GetService calls for name so far.
func (c *countingRegistry) Gets(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets[name]
}

func (c *countingRegistry) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for n := range c.gets {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "GetService(%s) %d, ", n, c.gets[n])
	}
	fmt.Fprintf(&b, "failed %d, ListServices %d, Watch %d", c.fail, c.lists, c.watches)
	return b.String()
}

// recordingLogger keeps the log lines, for the test's log at its end.
type recordingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordingLogger) Init(...logger.Option) error                 { return nil }
func (l *recordingLogger) Options() logger.Options                     { return logger.Options{Level: logger.InfoLevel} }
func (l *recordingLogger) Fields(map[string]interface{}) logger.Logger { return l }
func (l *recordingLogger) String() string                              { return "recording" }
func (l *recordingLogger) Log(level logger.Level, v ...interface{}) {
	l.add(level.String() + " " + fmt.Sprint(v...))
}
func (l *recordingLogger) Logf(level logger.Level, format string, v ...interface{}) {
	l.add(level.String() + " " + fmt.Sprintf(format, v...))
}
func (l *recordingLogger) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, time.Now().Format("15:04:05.000 ")+s)
	l.mu.Unlock()
}
func (l *recordingLogger) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Greeter is a test server's handler; it tells who answered.
type Greeter struct{ id string }

type Hello struct {
	Name, Server string
}

func (g *Greeter) Hello(_ context.Context, req *Hello, rsp *Hello) error {
	rsp.Name = "hello " + req.Name
	rsp.Server = g.id
	return nil
}

// startServer starts a go-micro v5 RPC server named name, with its own
// etcd registry client as a separate process would have, on a loopback
// port. Every dependency is explicit. The returned stop deregisters and
// stops it; it also runs when the test ends.
func startServer(t *testing.T, s *etcdServer, name, id string, log logger.Logger) (stop func()) {
	t.Helper()
	srv := server.NewServer(
		server.Name(name),
		server.Id(id),
		server.Address("127.0.0.1:0"),
		server.Registry(newRegistry(s, 2*time.Second)),
		server.Broker(broker.NewMemoryBroker()),
		server.Transport(transport.NewHTTPTransport()),
		server.RegisterTTL(30*time.Second),
		server.RegisterInterval(5*time.Second),
		server.WithLogger(log),
	)
	if err := srv.Handle(srv.NewHandler(&Greeter{id: id})); err != nil {
		t.Fatalf("server %s: handle: %v", id, err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("server %s: start: %v", id, err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := srv.Stop(); err != nil {
				t.Errorf("server %s: stop: %v", id, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// newClient is a go-micro v5 RPC client that picks nodes through sel. It
// has no registry of its own (client.Registry would re-initialise sel).
// PoolSize(0) dials a connection per call, as the v4 integration tests do:
// go-micro's pooled HTTP connections can stall a call under -race.
func newClient(sel selector.Selector, log logger.Logger) client.Client {
	return client.NewClient(
		client.Selector(sel),
		client.Broker(broker.NewMemoryBroker()),
		client.Transport(transport.NewHTTPTransport()),
		client.RequestTimeout(5*time.Second),
		client.PoolSize(0),
		client.WithLogger(log),
	)
}

// hello makes one RPC and returns the id of the server that answered.
func hello(cl client.Client, name string) (string, error) {
	req := cl.NewRequest(name, "Greeter.Hello", &Hello{Name: "it5"})
	var rsp Hello
	if err := cl.Call(context.Background(), req, &rsp); err != nil {
		return "", err
	}
	if rsp.Name != "hello it5" {
		return "", fmt.Errorf("answered %+v", rsp)
	}
	return rsp.Server, nil
}

// nodeIDs lists the nodes of svcs, sorted.
func nodeIDs(svcs []*registry.Service) []string {
	var ids []string
	for _, s := range svcs {
		for _, n := range s.Nodes {
			ids = append(ids, n.Id)
		}
	}
	sort.Strings(ids)
	return ids
}

// waitFor polls cond every 5 ms until it holds, and fails t after limit.
// It returns how long it took.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// quantile returns the q-quantile of d, which it sorts.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(q*float64(len(d)-1))]
}
