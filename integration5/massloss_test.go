package integration5

// The mass loss, on a real etcd: the registry is up and answers, but it has
// lost every node while the servers behind them keep serving, as when
// etcd expires every lease under load. 20 services of 3 go-micro servers
// each run in the test process and register with leases; two go-micro
// clients call them side by side, 200 RPCs a second each, spread over the
// services: one through regcache's selector with the one-line wiring
// (gomicro.Registry), one through go-micro's default selector, which
// caches through go-micro's registry/cache. Both have go-micro's default
// retry policy and request timeout.
//
// Then every lease is revoked, and the servers cannot register again for
// the loss's length (30 s; REGCACHE_IT_LOSS sets another): their
// registry refuses Register. A third of the way into the loss one server
// is killed. After the loss the servers register again, and once every
// client has recovered one service scales to zero: its servers deregister
// and stop. The test logs a table per scenario and, with
// REGCACHE_WRITE_FIGURES, writes them (figures_test.go).
//
// What it asserts holds today: the harness made its RPCs, the loss
// happened, go-micro's default selector failed most RPCs of the loss, and
// every client answered not found after the scale to zero. What a cache
// that keeps the nodes it can still reach would show (no failed RPC in the
// loss, at most one attempt to the killed server, none after a stopped
// node's first failure) is the subtest "limbo", which runs with
// REGCACHE_EXPECT_LIMBO=1.
//
// integration5/massloss_test.go is this file for go-micro v5, with the
// imports changed and nothing else (TestConformanceIsTheTwin checks it).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go-micro.dev/v5"
	"go-micro.dev/v5/broker"
	"go-micro.dev/v5/client"
	"go-micro.dev/v5/logger"
	"go-micro.dev/v5/registry"
	"go-micro.dev/v5/selector"
	"go-micro.dev/v5/server"
	"go-micro.dev/v5/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	cache "github.com/regcache/cache/gomicro5"
	lossless "github.com/regcache/cache/gomicro5/etcd"
	"github.com/regcache/cache/gomicro5/gomicro"
)

// The scenario's sizes and times.
const (
	massServices   = 20
	massPerService = 3
	massRate       = 200 // RPCs a second through each client
	// massBefore is the load before the loss; massAfter, the load after
	// the scale to zero.
	massBefore = 2 * time.Second
	massAfter  = 4 * time.Second
	// massQuiet is how long every client must have had no failed RPC
	// after the loss before the scale to zero; massRecover bounds the
	// wait.
	massQuiet   = time.Second
	massRecover = 20 * time.Second
	// The servers' lease, and how often they renew it, which is how soon
	// they register again once the loss ends.
	massTTL      = time.Minute
	massInterval = time.Second
	// massKilledSvc is the service whose third server is killed during
	// the loss; massZeroSvc the one that scales to zero after it.
	massKilledSvc = 0
	massZeroSvc   = 1
	// massLimboEnv turns on the subtest that holds regcache to what a
	// limbo for lost nodes promises.
	massLimboEnv = "REGCACHE_EXPECT_LIMBO"
)

// massLossLength is the loss's length: 30 s, or REGCACHE_IT_LOSS.
func massLossLength(t *testing.T) time.Duration {
	s := os.Getenv("REGCACHE_IT_LOSS")
	if s == "" {
		return 30 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 3*time.Second {
		t.Fatalf("REGCACHE_IT_LOSS=%s: want a duration of 3s or more", s)
	}
	return d
}

func massName(svc int) string { return fmt.Sprintf("it.massloss.%02d", svc) }

// massNode is the node Id of server i of service svc: go-micro names a
// node service-id.
func massNode(svc, i int) string { return massName(svc) + "-" + string(rune('a'+i)) }

// MassGreeter is a server's handler: it counts the requests it serves of
// each client.
type MassGreeter struct {
	node   string
	served []atomic.Int64 // by client
}

// MassHello is its request and response: the client's index, the node.
type MassHello struct {
	Client int
	Node   string
}

func (g *MassGreeter) Hello(_ context.Context, req *MassHello, rsp *MassHello) error {
	if req.Client >= 0 && req.Client < len(g.served) {
		g.served[req.Client].Add(1)
	}
	rsp.Client, rsp.Node = req.Client, g.node
	return nil
}

// errMassRefused is what the servers' registry answers during the loss.
var errMassRefused = errors.New("massloss: the registry refuses registrations during the loss")

// massGate is the servers' registry: it refuses Register while closed,
// and writes nothing for a node whose server has died (a dead process
// registers nothing; its go-micro server still ticks until its Stop at
// the test's end). Closing, and a death, wait for the Register calls
// under way, so that once they return no server can write the node.
type massGate struct {
	registry.Registry
	mu      sync.RWMutex
	closed  bool
	dead    map[string]bool
	refused atomic.Int64
}

func (g *massGate) Register(s *registry.Service, opts ...registry.RegisterOption) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if len(s.Nodes) == 1 && g.dead[s.Nodes[0].Id] {
		return nil
	}
	if g.closed {
		g.refused.Add(1)
		return errMassRefused
	}
	return g.Registry.Register(s, opts...)
}

func (g *massGate) setClosed(closed bool) {
	g.mu.Lock()
	g.closed = closed
	g.mu.Unlock()
}

func (g *massGate) die(node string) {
	g.mu.Lock()
	if g.dead == nil {
		g.dead = map[string]bool{}
	}
	g.dead[node] = true
	g.mu.Unlock()
}

// massTransport is a server's transport whose listeners the test can
// close, as the death of its process does: a connection to it is then
// refused. The test does not stop a server under load with its Stop:
// go-micro's server hands Stop's signal to whichever of its connections
// ends with an error while Stop waits for the registration loop (every
// connection ends so with a connection per attempt), and Stop then waits
// for ever.
type massTransport struct {
	transport.Transport
	mu sync.Mutex
	ls []transport.Listener
}

func (m *massTransport) Listen(addr string, opts ...transport.ListenOption) (transport.Listener, error) {
	l, err := m.Transport.Listen(addr, opts...)
	if err == nil {
		m.mu.Lock()
		m.ls = append(m.ls, l)
		m.mu.Unlock()
	}
	return l, err
}

// close closes the listeners: new connections are refused, the requests
// under way end.
func (m *massTransport) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.ls {
		_ = l.Close()
	}
}

// massServer is one server of the scenario.
type massServer struct {
	svc  int
	node string
	srv  server.Server
	h    *MassGreeter
	gate *massGate
	tr   *massTransport
}

// startMassServer starts server i of service svc on gate. It registers at
// Start with a lease of massTTL and renews it every massInterval. The
// caller stops it (stopMassServers).
func startMassServer(t *testing.T, gate *massGate, svc, i, clients int, quiet logger.Logger) *massServer {
	t.Helper()
	s := &massServer{svc: svc, node: massNode(svc, i), gate: gate, tr: &massTransport{Transport: transport.NewHTTPTransport()}}
	s.h = &MassGreeter{node: s.node, served: make([]atomic.Int64, clients)}
	s.srv = server.NewServer(
		server.Name(massName(svc)),
		server.Id(string(rune('a'+i))),
		server.Version("1.0.0"),
		server.Address("127.0.0.1:0"),
		server.Registry(gate),
		server.Broker(broker.NewMemoryBroker()),
		server.Transport(s.tr),
		server.RegisterTTL(massTTL),
		server.RegisterInterval(massInterval),
		server.WithLogger(quiet),
	)
	if err := s.srv.Handle(s.srv.NewHandler(s.h)); err != nil {
		t.Fatalf("server %s: handle: %v", s.node, err)
	}
	if err := s.srv.Start(); err != nil {
		t.Fatalf("server %s: start: %v", s.node, err)
	}
	return s
}

// kill is the server's process dying: it registers nothing any more, and
// its listener closes.
func (s *massServer) kill() {
	s.gate.die(s.node)
	s.tr.close()
}

// scaleDown is the server stopping gracefully: it registers nothing any
// more, deregisters its node, then closes its listener, as go-micro's
// Stop does.
func (s *massServer) scaleDown(t *testing.T) {
	s.gate.die(s.node)
	svc := &registry.Service{Name: massName(s.svc), Version: "1.0.0", Nodes: []*registry.Node{{Id: s.node}}}
	if err := s.gate.Registry.Deregister(svc); err != nil {
		t.Errorf("deregister %s: %v", s.node, err)
	}
	s.tr.close()
}

// stopMassServers stops every server, at once, once the load is over.
func stopMassServers(servers [][]*massServer) {
	var wg sync.WaitGroup
	for _, ss := range servers {
		for _, s := range ss {
			wg.Add(1)
			go func() { defer wg.Done(); _ = s.srv.Stop() }()
		}
	}
	wg.Wait()
}

// served is how many requests of client c the server has served.
func (s *massServer) served(c int) int64 { return s.h.served[c].Load() }

// massRPC is one RPC of a client: its service, when it started and
// returned, and its error.
type massRPC struct {
	svc        int
	start, end time.Time
	err        error
}

// massAttempt is one attempt of an RPC at a node, as go-micro's call
// wrapper sees it.
type massAttempt struct {
	node   string
	start  time.Time
	failed bool
}

// massClient is one of the clients compared.
type massClient struct {
	idx          int
	name, wiring string
	cl           client.Client
	sel          selector.Selector

	mu       sync.Mutex
	rpcs     []massRPC
	attempts []massAttempt
	calls    sync.WaitGroup
}

// newMassClient is a go-micro client with every dependency explicit and
// go-micro's defaults otherwise (retries, retry policy, request timeout),
// but for a connection per attempt (PoolSize 0, see newClient): a killed
// server then refuses the next attempt, as a dead process does. wire
// gives it its selector.
func newMassClient(t *testing.T, idx int, name, wiring string, quiet logger.Logger, wire func(client.Client) selector.Selector) *massClient {
	t.Helper()
	c := &massClient{idx: idx, name: name, wiring: wiring}
	c.cl = client.NewClient(
		client.Broker(broker.NewMemoryBroker()),
		client.Transport(transport.NewHTTPTransport()),
		client.PoolSize(0),
		client.WrapCall(c.wrap),
		client.WithLogger(quiet),
	)
	c.sel = wire(c.cl)
	t.Cleanup(func() { _ = c.sel.Close() })
	return c
}

// wrap records every attempt, with its node and whether it failed.
func (c *massClient) wrap(next client.CallFunc) client.CallFunc {
	return func(ctx context.Context, node *registry.Node, req client.Request, rsp interface{}, opts client.CallOptions) error {
		start := time.Now()
		err := next(ctx, node, req, rsp, opts)
		id := ""
		if node != nil {
			id = node.Id
		}
		c.mu.Lock()
		c.attempts = append(c.attempts, massAttempt{node: id, start: start, failed: err != nil})
		c.mu.Unlock()
		return err
	}
}

func (c *massClient) call(svc int) (string, error) {
	req := c.cl.NewRequest(massName(svc), "MassGreeter.Hello", &MassHello{Client: c.idx})
	rsp := new(MassHello)
	if err := c.cl.Call(context.Background(), req, rsp); err != nil {
		return "", err
	}
	return rsp.Node, nil
}

// warm calls every service until each of its nodes has answered, then
// forgets what it recorded.
func (c *massClient) warm(t *testing.T) {
	t.Helper()
	for svc := 0; svc < massServices; svc++ {
		seen := map[string]bool{}
		waitFor(t, 15*time.Second, fmt.Sprintf("%s: every node of %s answered", c.name, massName(svc)), func() bool {
			if node, err := c.call(svc); err == nil {
				seen[node] = true
			}
			return len(seen) == massPerService
		})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.attempts {
		if svc, i, ok := massNodeOf(a.node); !ok || svc >= massServices || i >= massPerService {
			t.Fatalf("%s: an attempt went to node %q, which is none of the scenario's", c.name, a.node)
		}
	}
	c.rpcs, c.attempts = nil, nil
}

// massNodeOf parses a node Id of the scenario.
func massNodeOf(node string) (svc, i int, ok bool) {
	var letter rune
	if n, err := fmt.Sscanf(node, "it.massloss.%02d-%c", &svc, &letter); n != 2 || err != nil {
		return 0, 0, false
	}
	return svc, int(letter - 'a'), letter >= 'a'
}

// drive calls the services through every client at massRate RPCs a
// second each, service after service, each RPC on a goroutine of its own,
// until stop is closed. done is closed once every RPC has returned.
func massDrive(clients []*massClient, stop <-chan struct{}) (done <-chan struct{}) {
	out := make(chan struct{})
	var arrivals sync.WaitGroup
	for _, c := range clients {
		arrivals.Add(1)
		go func() {
			defer arrivals.Done()
			tick := time.NewTicker(time.Second / massRate)
			defer tick.Stop()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				svc := k % massServices
				c.calls.Add(1)
				go func() {
					defer c.calls.Done()
					start := time.Now()
					_, err := c.call(svc)
					end := time.Now()
					c.mu.Lock()
					c.rpcs = append(c.rpcs, massRPC{svc: svc, start: start, end: end, err: err})
					c.mu.Unlock()
				}()
			}
		}()
	}
	go func() {
		arrivals.Wait()
		for _, c := range clients {
			c.calls.Wait()
		}
		close(out)
	}()
	return out
}

// quietSince reports whether the client has RPCs that returned after
// since, and none of them failed.
func (c *massClient) quietSince(since time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	some := false
	for _, r := range c.rpcs {
		if r.end.After(since) {
			if r.err != nil {
				return false
			}
			some = true
		}
	}
	return some
}

// isNotFound reports whether an RPC failed because its client's selector
// found no node: go-micro's client says "service X: not found", or
// "error selecting X node: not found: ..." for an error that wraps
// selector.ErrNotFound.
func isNotFound(err error) bool { return err != nil && strings.Contains(err.Error(), "not found") }

// massTimes are the moments of the run.
type massTimes struct {
	lossStart, lossEnd time.Time
	kill               time.Time // the server's kill
	scale              time.Time // the scale to zero: the servers' Stop called
}

// massRow is what one client saw.
type massRow struct {
	name           string
	rpcs, failed   int
	beforeFailed   int // RPCs that failed before the loss
	lossRPCs       int
	lossFailed     int
	firstFailure   time.Duration // from the loss's start; -1: none
	reached        int64         // requests served, from the client, by the lost servers during the loss
	recovered      time.Duration // from the loss's end to the return of the last failed RPC; 0: none failed
	killedAttempts int           // failed attempts at the killed server, from its kill on
	killedFailed   int           // RPCs of its service started from the kill to the loss's end that failed
	zeroAttempts   int           // attempts at a scaled-down node after its first failed attempt
	zeroFailed     int           // RPCs of the scaled-down service that failed, not with not found
	notFound       time.Duration // from the scale to zero to the first not found; -1: none
	lastErr        error         // the last error of the loss
}

// row computes the client's figures. Every RPC must have returned.
func (c *massClient) row(at massTimes, reached int64) massRow {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := massRow{name: c.name, rpcs: len(c.rpcs), firstFailure: -1, notFound: -1, reached: reached}
	var notFoundAt time.Time
	for _, rpc := range c.rpcs {
		failed := rpc.err != nil
		if failed {
			r.failed++
		}
		switch {
		case failed && rpc.end.Before(at.lossStart):
			r.beforeFailed++
		case failed && (r.firstFailure < 0 || rpc.end.Sub(at.lossStart) < r.firstFailure):
			r.firstFailure = rpc.end.Sub(at.lossStart)
		}
		if !rpc.start.Before(at.lossStart) && rpc.start.Before(at.lossEnd) {
			r.lossRPCs++
			if failed {
				r.lossFailed++
				r.lastErr = rpc.err
			}
		}
		if failed && !rpc.start.Before(at.lossEnd) && rpc.start.Before(at.scale) {
			r.recovered = max(r.recovered, rpc.end.Sub(at.lossEnd))
		}
		if rpc.svc == massKilledSvc && failed && !rpc.start.Before(at.kill) && rpc.start.Before(at.lossEnd) {
			r.killedFailed++
		}
		if rpc.svc == massZeroSvc && !rpc.start.Before(at.scale) && failed {
			if isNotFound(rpc.err) {
				if notFoundAt.IsZero() || rpc.end.Before(notFoundAt) {
					notFoundAt = rpc.end
				}
			} else {
				r.zeroFailed++
			}
		}
	}
	if !notFoundAt.IsZero() {
		r.notFound = notFoundAt.Sub(at.scale)
	}
	killed := massNode(massKilledSvc, massPerService-1)
	attempts := append([]massAttempt(nil), c.attempts...)
	sort.Slice(attempts, func(i, j int) bool { return attempts[i].start.Before(attempts[j].start) })
	failedAt := map[string]bool{}
	for _, a := range attempts {
		if a.node == killed && a.failed && !a.start.Before(at.kill) {
			r.killedAttempts++
		}
		if svc, _, ok := massNodeOf(a.node); ok && svc == massZeroSvc && !a.start.Before(at.scale) {
			if failedAt[a.node] {
				r.zeroAttempts++
			}
			if a.failed {
				failedAt[a.node] = true
			}
		}
	}
	return r
}

// massEtcd is an etcd client of the test's own: it revokes the leases and
// counts the nodes.
func massEtcd(t *testing.T, s *etcdServer) *clientv3.Client {
	t.Helper()
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Addr()}, DialTimeout: 5 * time.Second, LogConfig: &zc})
	if err != nil {
		t.Fatalf("an etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// massNodes is how many nodes etcd holds under go-micro's prefix.
func massNodes(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/micro/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count the nodes in etcd: %v", err)
	}
	return resp.Count
}

// revokeAll revokes every lease etcd holds, all at once, and returns how
// many.
func revokeAll(t *testing.T, cli *clientv3.Client) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatalf("list the leases: %v", err)
	}
	errs := make([]error, len(leases.Leases))
	var wg sync.WaitGroup
	for i, l := range leases.Leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = cli.Revoke(ctx, l.ID)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("revoke the leases: %v", err)
	}
	return len(leases.Leases)
}

// massRegistry is a registry client of etcd's, go-micro's etcd registry
// with regcache's etcd module's Watch, which delivers every event. Every
// party gets its own, as separate processes have.
func massRegistry(s *etcdServer) registry.Registry {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	return lossless.NewRegistry(registry.Addrs(s.Addr()), registry.Timeout(2*time.Second), lossless.LogConfig(&zc))
}

// TestMassLoss is the scenario of the file's comment.
func TestMassLoss(t *testing.T) {
	begin := time.Now()
	loss := massLossLength(t)
	quiet := logger.NewLogger(logger.WithLevel(logger.FatalLevel))
	s := startEtcd(t)
	etcd := massEtcd(t, s)

	regcacheName := "regcache, one-line wiring"
	goMicroName := strings.TrimSuffix(goMicroCache, " cache") + " default selector"
	clients := []*massClient{
		newMassClient(t, 0, regcacheName, "gomicro.Registry(reg): cache.NewSelector over a cache of reg, at their defaults",
			quiet, func(cl client.Client) selector.Selector {
				o := micro.Options{Client: cl, Broker: broker.NewMemoryBroker(), Server: server.NewServer(
					server.Broker(broker.NewMemoryBroker()), server.Transport(transport.NewHTTPTransport()), server.WithLogger(quiet))}
				gomicro.Registry(massRegistry(s))(&o) // the service is never started: the option wires its client
				return cl.Options().Selector
			}),
		newMassClient(t, 1, goMicroName, "selector.NewSelector(selector.Registry(reg)), with go-micro's registry/cache inside",
			quiet, func(cl client.Client) selector.Selector {
				sel := selector.NewSelector(selector.Registry(massRegistry(s)))
				_ = cl.Init(client.Selector(sel))
				return sel
			}),
	}
	if _, ok := clients[0].sel.(cache.Selector); !ok {
		t.Fatalf("the one-line wiring's selector is a %T, not a cache.Selector", clients[0].sel)
	}

	gate := &massGate{Registry: massRegistry(s)}
	servers := make([][]*massServer, massServices)
	t.Cleanup(func() { stopMassServers(servers) })
	for svc := range servers {
		for i := 0; i < massPerService; i++ {
			servers[svc] = append(servers[svc], startMassServer(t, gate, svc, i, len(clients), quiet))
		}
	}
	all := massServices * massPerService
	if n := massNodes(t, etcd); n != int64(all) {
		t.Fatalf("etcd holds %d nodes, want %d", n, all)
	}
	for _, c := range clients {
		c.warm(t)
	}

	stop := make(chan struct{})
	done := massDrive(clients, stop)
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			close(stop)
			<-done
		}
	}
	t.Cleanup(stopLoad)
	time.Sleep(massBefore)

	// The loss: the servers' registry refuses them, every lease is revoked.
	var at massTimes
	reachedBefore := massReached(servers, len(clients))
	at.lossStart = time.Now()
	gate.setClosed(true)
	leases := revokeAll(t, etcd)
	revoked := time.Since(at.lossStart)
	if n := massNodes(t, etcd); n != 0 {
		t.Fatalf("etcd holds %d nodes after every lease was revoked", n)
	}
	t.Logf("loss: %d leases revoked in %v; etcd holds no node", leases, revoked.Round(time.Millisecond))

	// A third of the way in, a server is killed.
	killed := servers[massKilledSvc][massPerService-1]
	time.Sleep(time.Until(at.lossStart.Add(loss / 3)))
	at.kill = time.Now()
	killed.kill()
	time.Sleep(time.Until(at.lossStart.Add(loss)))
	reachedDuring := massReached(servers, len(clients))
	if n := massNodes(t, etcd); n != 0 {
		t.Fatalf("etcd holds %d nodes at the end of the loss: a server registered during it", n)
	}
	refused := gate.refused.Load()
	gate.setClosed(false)
	at.lossEnd = time.Now()
	t.Logf("%s killed %v into the loss; the servers' %d Register calls refused during the loss",
		killed.node, at.kill.Sub(at.lossStart).Round(time.Millisecond), refused)

	back := waitFor(t, 15*time.Second, "every server registered again", func() bool { return massNodes(t, etcd) == int64(all-1) })
	t.Logf("after the loss, etcd held every live server's node again within %v", back.Round(time.Millisecond))
	var notQuiet []string
	recovered := waitForOr(massRecover, func() bool {
		since := time.Now().Add(-massQuiet)
		for _, c := range clients {
			if since.Before(at.lossEnd) || !c.quietSince(since) {
				return false
			}
		}
		return true
	})
	if !recovered {
		for _, c := range clients {
			if !c.quietSince(time.Now().Add(-massQuiet)) {
				notQuiet = append(notQuiet, c.name)
			}
		}
		t.Errorf("%s still failed RPCs %v after the loss", strings.Join(notQuiet, ", "), massRecover)
	}

	// A real scale to zero: one service's servers deregister and stop.
	at.scale = time.Now()
	var wg sync.WaitGroup
	for _, srv := range servers[massZeroSvc] {
		wg.Add(1)
		go func() { defer wg.Done(); srv.scaleDown(t) }()
	}
	wg.Wait()
	t.Logf("%s scaled to zero: its %d servers deregistered and stopped in %v", massName(massZeroSvc), massPerService, time.Since(at.scale).Round(time.Millisecond))
	time.Sleep(time.Until(at.scale.Add(massAfter)))
	stopLoad()

	rows := make([]massRow, len(clients))
	for i, c := range clients {
		rows[i] = c.row(at, reachedDuring[i]-reachedBefore[i])
	}
	massLog(t, loss, clients, rows)
	for _, c := range clients {
		if cs, ok := c.sel.(cache.Selector); ok {
			st := cs.Stats()
			t.Logf("%s: selector stats: %d failures, %d ejections%s", c.name, st.Failures, st.Ejections, limboFields(st))
		}
	}

	// The harness's own checks: the RPCs were made, before the loss they
	// all succeeded, the loss hit go-micro's default selector as it must,
	// and the scale to zero ended in not found.
	t.Run("harness", func(t *testing.T) {
		want := int(float64(massRate) * loss.Seconds() * 0.8)
		for _, r := range rows {
			if r.lossRPCs < want {
				t.Errorf("%s: %d RPCs started in the loss, want at least %d", r.name, r.lossRPCs, want)
			}
			if r.beforeFailed > 0 {
				t.Errorf("%s: %d RPCs failed before the loss", r.name, r.beforeFailed)
			}
			if r.notFound < 0 {
				t.Errorf("%s: never answered not found within %v of the scale to zero", r.name, massAfter)
			}
		}
		if gm := rows[1]; gm.lossFailed*2 < gm.lossRPCs {
			t.Errorf("%s: %d of %d RPCs failed in the loss, want most: the loss did not reach it", gm.name, gm.lossFailed, gm.lossRPCs)
		}
		if n := killed.served(0) + killed.served(1); n == 0 {
			t.Errorf("the killed server never served")
		}
		if refused == 0 {
			t.Errorf("no server tried to register during the loss")
		}
	})

	t.Run("limbo", func(t *testing.T) {
		r := rows[0]
		if r.lossFailed > 0 {
			t.Errorf("%s: %d of %d RPCs failed in the loss (last: %v)", r.name, r.lossFailed, r.lossRPCs, r.lastErr)
		}
		if r.killedAttempts > 1 {
			t.Errorf("%s: %d failed attempts at the killed server, want at most 1", r.name, r.killedAttempts)
		}
		if r.killedFailed > 0 {
			t.Errorf("%s: %d RPCs of the killed server's service failed after the kill", r.name, r.killedFailed)
		}
		if r.notFound < 0 {
			t.Errorf("%s: never answered not found after the scale to zero", r.name)
		}
	})
	// Not met yet: attempts in flight when a stopped node first fails
	// still reach it (see "A mass loss" in README.md).
	t.Run("scale to zero", func(t *testing.T) {
		if os.Getenv(massLimboEnv) != "1" {
			t.Skipf("%s=1 holds regcache to no attempt at a scaled-down node after its first failure; it is not set", massLimboEnv)
		}
		if r := rows[0]; r.zeroAttempts > 0 {
			t.Errorf("%s: %d attempts at the scaled-down nodes after their first failure", r.name, r.zeroAttempts)
		}
	})

	run := figureRun{ID: "mass-loss", Loss: figureDuration(loss), Rate: massRate, Services: massServices, Nodes: all,
		Back: figureDuration(back.Round(time.Millisecond)), Server: serverName(etcdServerEnv)}
	for _, r := range rows {
		run.Clients = append(run.Clients, figureClient{Name: r.name, MassLoss: r.figure()})
	}
	writeFigures(t, run, begin)
}

// waitForOr polls cond every 20 ms until it holds, for up to limit, and
// reports whether it did.
func waitForOr(limit time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// massReached is how many requests of each client every server has served.
func massReached(servers [][]*massServer, clients int) []int64 {
	out := make([]int64, clients)
	for _, ss := range servers {
		for _, s := range ss {
			for c := range out {
				out[c] += s.served(c)
			}
		}
	}
	return out
}

// limboFields lists the selector stats' fields whose names speak of a
// limbo, with their values: ", LimboNodes 3"; empty where there is none.
func limboFields(st cache.SelectorStats) string {
	var out strings.Builder
	v := reflect.ValueOf(st)
	for i := 0; i < v.NumField(); i++ {
		if f := v.Type().Field(i); strings.Contains(strings.ToLower(f.Name), "limbo") {
			fmt.Fprintf(&out, ", %s %v", f.Name, v.Field(i).Interface())
		}
	}
	return out.String()
}

// massMs prints a time of the table; "-" for none.
func massMs(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// massLog logs a table per scenario.
func massLog(t *testing.T, loss time.Duration, clients []*massClient, rows []massRow) {
	t.Helper()
	for _, c := range clients {
		t.Logf("%s: %s", c.name, c.wiring)
	}
	t.Logf("every lease revoked for %v, %d RPCs a second through each client, over %d services of %d nodes:", loss, massRate, massServices, massPerService)
	t.Logf("| client | RPCs in the loss | failed | first failure after | requests that reached the lost servers | recovered after the loss | failed in all, of |")
	for _, r := range rows {
		t.Logf("| %s | %d | %d | %s | %d | %s | %d of %d |", r.name, r.lossRPCs, r.lossFailed, massMs(r.firstFailure), r.reached, massMs(r.recovered), r.failed, r.rpcs)
	}
	t.Logf("one server killed a third of the way into the loss:")
	t.Logf("| client | failed attempts at it after the kill | failed RPCs of its service from the kill to the loss's end |")
	for _, r := range rows {
		t.Logf("| %s | %d | %d |", r.name, r.killedAttempts, r.killedFailed)
	}
	t.Logf("one service scaled to zero after the loss (its servers deregistered and stopped):")
	t.Logf("| client | attempts at its nodes after each one's first failure | RPCs failed otherwise than not found | not found after |")
	for _, r := range rows {
		t.Logf("| %s | %d | %d | %s |", r.name, r.zeroAttempts, r.zeroFailed, massMs(r.notFound))
	}
	for _, r := range rows {
		if r.lastErr != nil {
			t.Logf("%s: last error of the loss: %v", r.name, r.lastErr)
		}
	}
}

// figure is the row as the figures file holds it.
func (r massRow) figure() *figureLoss {
	opt := func(d time.Duration) *figureDuration {
		if d < 0 {
			return nil
		}
		v := figureDuration(d.Round(time.Microsecond))
		return &v
	}
	return &figureLoss{
		RPCs: r.rpcs, Failed: r.failed, LossRPCs: r.lossRPCs, LossFailed: r.lossFailed,
		FirstFailure: opt(r.firstFailure), Reached: r.reached, Recovered: figureDuration(r.recovered.Round(time.Microsecond)),
		KilledAttempts: r.killedAttempts, KilledFailed: r.killedFailed,
		ZeroAttempts: r.zeroAttempts, ZeroFailed: r.zeroFailed, NotFound: opt(r.notFound),
	}
}
