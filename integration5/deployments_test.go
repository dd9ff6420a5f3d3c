package integration5

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"go-micro.dev/v5/logger"
	"go-micro.dev/v5/registry"

	cache "github.com/regcache/cache/gomicro5"
	lossless "github.com/regcache/cache/gomicro5/etcd"
)

// The tests of this file run github.com/regcache/cache/etcd under a cache
// on the etcd deployments users run besides a bare etcd: etcd with auth,
// where a user may read some services and not others, and etcd behind
// its gRPC proxy. The file is written once: integration5's copy is this
// one with its imports changed (integration5/conformance_twin_test.go), so
// every helper it needs is its own, named deploy*.

// TestEtcdAuthRefusedWatchCostsItsServiceAlone: under etcd auth, a user
// whose role reads the services open-* and not secret. etcd refuses the
// watch of secret's keys; the refusal is logged at once with etcd's reason,
// and costs secret its own events only: the stream stays up (past the
// registry's Timeout, after which a watch not acknowledged would end it),
// and every event of open-a and open-b is delivered.
//
// Before the fix, etcd's refusal (WatchId -1) was read as the answer to a
// progress request: nothing was logged, and the stream failed with "not
// acknowledged" once the Timeout had passed.
func TestEtcdAuthRefusedWatchCostsItsServiceAlone(t *testing.T) {
	s := startDeployEtcd(t, true)
	root := s.client(t, "root")
	deployPut(t, root, "open-a", "a0")
	deployPut(t, root, "open-b", "b0")
	deployPut(t, root, "secret", "s0")

	log := newDeployLog(t)
	c := deployCache(t, s.Addr(), log, true)
	deployLookup(t, c, "open-a", "a0")
	deployLookup(t, c, "open-b", "b0")
	start := time.Now()
	if _, err := c.GetService("secret"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("GetService(secret): %v; want etcd's permission denied", err)
	}
	deployWaitFor(t, 2*time.Second, "the refused watch logged with etcd's reason", func() bool {
		return log.has("/micro/registry/secret/", "permission denied")
	})
	t.Logf("refusal logged %v after the lookup", time.Since(start).Round(time.Millisecond))

	ids := deployIDs("a", 1, 20)
	deployPut(t, root, "open-a", ids...)
	deployPut(t, root, "open-b", "b1")
	deployPut(t, root, "secret", "s1")
	deployWaitFor(t, 3*time.Second, "the 20 nodes of open-a's transaction", func() bool {
		return deployCached(c, "open-a") == strings.Join(append([]string{"a0"}, ids...), ",")
	})
	deployWaitFor(t, 3*time.Second, "open-b's node", func() bool { return deployCached(c, "open-b") == "b0,b1" })

	// Past the registry's Timeout, the stream is still the first, and
	// still delivers.
	time.Sleep(time.Until(start.Add(deployTimeout + 500*time.Millisecond)))
	deployPut(t, root, "open-b", "b2")
	deployWaitFor(t, 3*time.Second, "open-b's node after the Timeout", func() bool { return deployCached(c, "open-b") == "b0,b1,b2" })
	if n := c.Stats().WatchReconnects; n != 0 {
		t.Errorf("%d watch reconnects; the refusal must cost the other services nothing", n)
	}
	if _, err := c.Lookup("secret"); err == nil {
		t.Errorf("the cache serves secret, which its user may not read")
	}
}

// TestEtcdThroughGRPCProxy: the module behind etcd's gRPC proxy (`etcd
// grpc-proxy start`, of the etcd line the suite runs), which assigns watch
// ids of its own and drops progress requests. Every node of a 20-node transaction is
// delivered, and so is every node written after etcd restarts; the
// fallback is told once in the log.
//
// Before the fix, the scoped stream's first watch came back with the
// proxy's id, every Watch failed, and the cache ran on its TTL alone: not
// one event reached it.
func TestEtcdThroughGRPCProxy(t *testing.T) {
	s := startDeployEtcd(t, false)
	proxy := startDeployGRPCProxy(t, s.Addr())
	root := s.client(t, "")
	deployPut(t, root, "proxied", "p0")

	log := newDeployLog(t)
	c := deployCache(t, proxy, log, false)
	deployLookup(t, c, "proxied", "p0")
	ids := deployIDs("p", 1, 20)
	deployPut(t, root, "proxied", ids...)
	deployWaitFor(t, 5*time.Second, "the 20 nodes of the transaction", func() bool {
		return deployCached(c, "proxied") == strings.Join(append([]string{"p0"}, ids...), ",")
	})

	s.stop()
	s.start()
	after := deployIDs("r", 0, 5)
	deployPut(t, root, "proxied", after...)
	want := strings.Join(append(append([]string{"p0"}, ids...), after...), ",")
	deployWaitFor(t, 15*time.Second, "the nodes written after etcd's restart", func() bool {
		return deployCached(c, "proxied") == want
	})
	if n := log.count("client-chosen watch ids"); n != 1 {
		t.Errorf("the fallback logged %d times; want once", n)
	}
}

// TestEtcdResumeWithARefusalPending: under etcd auth, the connection
// breaks (and comes back at once) just as etcd refuses the watch of a
// service the user may not read: the stream resumes, every node of a
// 20-node transaction of a service it may read, written meanwhile, is
// delivered, and the stream stays the first past the registry's Timeout.
//
// Before the fix, the refused watch was asked again on the resumed stream,
// its refusal read as progress (moving the resume point of every watch
// created), and the stream failed once the Timeout had passed.
func TestEtcdResumeWithARefusalPending(t *testing.T) {
	s := startDeployEtcd(t, true)
	p := startDeployTCPProxy(t, s.Addr())
	root := s.client(t, "root")
	deployPut(t, root, "open-a", "a0")
	deployPut(t, root, "secret", "s0")

	log := newDeployLog(t)
	c := deployCache(t, p.addr(), log, true)
	deployLookup(t, c, "open-a", "a0")
	deployPut(t, root, "open-a", "warm")
	deployWaitFor(t, 3*time.Second, "open-a's watch delivering", func() bool { return deployCached(c, "open-a") == "a0,warm" })
	start := time.Now()
	c.GetService("secret")
	p.breakAll()
	ids := deployIDs("a", 1, 20)
	deployPut(t, root, "open-a", ids...)
	want := strings.Join(append([]string{"a0"}, append(ids, "warm")...), ",")
	deployWaitFor(t, 5*time.Second, "the 20 nodes written while the stream resumed", func() bool {
		return deployCached(c, "open-a") == want
	})
	time.Sleep(time.Until(start.Add(deployTimeout + 500*time.Millisecond)))
	deployPut(t, root, "open-a", "late")
	deployWaitFor(t, 3*time.Second, "a node after the Timeout", func() bool {
		return strings.Contains(deployCached(c, "open-a"), "late")
	})
	if n := c.Stats().WatchReconnects; n != 0 {
		t.Errorf("%d watch reconnects; the stream must resume, and the refusal cost the others nothing", n)
	}
	if p.accepted() < 2 {
		t.Errorf("the connection was not re-established (%d accepted): inconclusive", p.accepted())
	}
}

// deployTimeout is the registries' Timeout: how long a watch may go
// unacknowledged.
const deployTimeout = 3 * time.Second

// deployCache is a cache, with a TTL of an hour (so that only events bring
// changes), over the module's registry at addr, as the user "reader" when
// auth is set; both log to log. It stops when the test ends.
func deployCache(t *testing.T, addr string, log *deployLog, auth bool) cache.Cache {
	t.Helper()
	opts := []registry.Option{registry.Addrs(addr), registry.Timeout(deployTimeout),
		registry.Logger(log), lossless.LogConfig(deployZap())}
	if auth {
		opts = append(opts, lossless.Auth("reader", "reader-pw"))
	}
	c := cache.New(lossless.NewRegistry(opts...), cache.WithTTL(time.Hour), cache.WithLogger(log))
	t.Cleanup(c.Stop)
	return c
}

// deployLookup looks name up, which must give want's nodes.
func deployLookup(t *testing.T, c cache.Cache, name string, want ...string) {
	t.Helper()
	svcs, err := c.GetService(name)
	if err != nil {
		t.Fatalf("GetService(%s): %v", name, err)
	}
	if got := deployJoin(svcs); got != strings.Join(want, ",") {
		t.Fatalf("GetService(%s): %s, want %v", name, got, want)
	}
}

// deployCached is the sorted node ids the cache holds for name, or
// "<error>".
func deployCached(c cache.Cache, name string) string {
	svcs, err := c.Lookup(name)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return deployJoin(svcs)
}

func deployJoin(svcs []*registry.Service) string {
	var ids []string
	for _, s := range svcs {
		for _, n := range s.Nodes {
			ids = append(ids, n.Id)
		}
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

func deployIDs(p string, from, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%02d", p, from+i)
	}
	return ids
}

// deployPut writes a node key for each id of service name, as go-micro's
// etcd registry does, in one transaction: one revision, one watch
// response.
func deployPut(t *testing.T, c *clientv3.Client, name string, ids ...string) {
	t.Helper()
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		b, err := json.Marshal(&registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{{Id: id, Address: "127.0.0.1:1"}}})
		if err != nil {
			t.Fatal(err)
		}
		ops[i] = clientv3.OpPut(path.Join("/micro/registry", name, id), string(b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatalf("write %s %v: %v", name, ids, err)
	}
}

// deployWaitFor polls cond every 5 ms until it holds, and fails the test
// if it does not within limit.
func deployWaitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}

func deployZap() *zap.Config {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	return &zc
}

// deployEtcd is a single-member etcd (etcdServer) on loopback ports, with
// auth if asked: the user root, and the user reader whose role reads the
// key /micro/registry/ and the keys of the services open-*.
type deployEtcd struct {
	*etcdServer
	t *testing.T
}

func startDeployEtcd(t *testing.T, auth bool) *deployEtcd {
	t.Helper()
	// bcrypt's least cost: each client's authentication checks a
	// password, which at the default cost takes most of a second under
	// the race detector, and the plugin dials within the Timeout.
	s := &deployEtcd{etcdServer: startEtcdWith(t, "--bcrypt-cost=4"), t: t}
	if auth {
		s.enableAuth()
	}
	return s
}

// start starts the server, or restarts it on its data after stop.
func (s *deployEtcd) start() { s.Start() }

func (s *deployEtcd) stop() { s.Stop() }

// client is an etcd client of the test's own, as user (none if "").
func (s *deployEtcd) client(t *testing.T, user string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: []string{s.Addr()}, DialTimeout: 5 * time.Second, LogConfig: deployZap()}
	if user != "" {
		cfg.Username, cfg.Password = user, user+"-pw"
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (s *deployEtcd) enableAuth() {
	t := s.t
	t.Helper()
	c := s.client(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const registry = "/micro/registry/"
	steps := []func() error{
		func() error { _, err := c.RoleAdd(ctx, "root"); return err },
		func() error { _, err := c.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "reader"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "reader", registry, "", clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error {
			_, err := c.RoleGrantPermission(ctx, "reader", registry+"open-", clientv3.GetPrefixRangeEnd(registry+"open-"), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "reader", "reader-pw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "reader", "reader"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth set-up, step %d: %v", i, err)
		}
	}
}

// startDeployGRPCProxy serves etcd's gRPC proxy in front of the etcd at
// target, and returns its address.
func startDeployGRPCProxy(t *testing.T, target string) string {
	t.Helper()
	return startGRPCProxy(t, target)
}

// deployTCPProxy forwards loopback connections to a target; breakAll
// closes those open, and the next are forwarded again.
type deployTCPProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	count  int
	wg     sync.WaitGroup
}

func startDeployTCPProxy(t *testing.T, target string) *deployTCPProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &deployTCPProxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.breakAll()
		p.wg.Wait()
	})
	return p
}

func (p *deployTCPProxy) addr() string { return p.l.Addr().String() }

func (p *deployTCPProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.count++
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *deployTCPProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src)
	dst.Close()
	src.Close()
}

func (p *deployTCPProxy) breakAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

func (p *deployTCPProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}

// deployLog is a go-micro logger that keeps its lines, for the test to
// look for, and writes them to the test log.
type deployLog struct {
	t      *testing.T
	mu     sync.Mutex
	lines  []string
	closed bool
}

func newDeployLog(t *testing.T) *deployLog {
	l := &deployLog{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
	})
	return l
}

func (l *deployLog) Init(...logger.Option) error                 { return nil }
func (l *deployLog) Options() logger.Options                     { return logger.Options{Level: logger.InfoLevel} }
func (l *deployLog) Fields(map[string]interface{}) logger.Logger { return l }
func (l *deployLog) String() string                              { return "deploy" }
func (l *deployLog) Log(level logger.Level, v ...interface{})    { l.add(level, fmt.Sprint(v...)) }
func (l *deployLog) Logf(level logger.Level, format string, v ...interface{}) {
	l.add(level, fmt.Sprintf(format, v...))
}

func (l *deployLog) add(level logger.Level, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.lines = append(l.lines, msg)
	l.t.Logf("[%s] %s", level, msg)
}

// has reports whether a line holds every one of parts.
func (l *deployLog) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// count is the number of lines that hold part.
func (l *deployLog) count(part string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, part) {
			n++
		}
	}
	return n
}
