package etcd

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestMain keeps the environment from choosing the tests' etcd, and
// go-micro's defaults from reaching the network: its default registry is
// mdns, which multicasts, and its default broker registers through it.
func TestMain(m *testing.M) {
	for _, v := range []string{"MICRO_REGISTRY", "MICRO_REGISTRY_ADDRESS", "ETCD_USERNAME", "ETCD_PASSWORD"} {
		os.Unsetenv(v)
	}
	registry.DefaultRegistry = registry.NewMemoryRegistry()
	broker.DefaultBroker = broker.NewMemoryBroker()
	selector.DefaultSelector = selector.NewSelector(selector.Registry(registry.DefaultRegistry))
	os.Exit(m.Run())
}

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

// freePort returns a loopback port that was free a moment ago and that no
// other test of this process has had: the clients of an earlier test may
// still redial the port of its stopped server, and must not reach a later
// test's server.
func freePort(t *testing.T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pick a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsUsed[port] {
			portsUsed[port] = true
			return port
		}
	}
	t.Fatal("no unused free port")
	return 0
}

func loopback(port int) url.URL {
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// startEtcd starts an etcd that stops when the test ends.
func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	return startEtcdWith(t, nil)
}

// quietLog is the etcd clients' log configuration: errors only, since the
// client logs every retry during an outage as a warning.
func quietLog() *zap.Config {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	return &zc
}

// newTestRegistry returns this package's registry on addr, with timeout
// as registry.Timeout. The plugin's client, which the plugin never closes
// and does not export, lives until the test process ends: freePort keeps
// it from reaching a later test's etcd.
func newTestRegistry(t *testing.T, addr string, timeout time.Duration, opts ...registry.Option) *etcdRegistry {
	t.Helper()
	return NewRegistry(append([]registry.Option{
		registry.Addrs(addr), registry.Timeout(timeout), LogConfig(quietLog()),
	}, opts...)...).(*etcdRegistry)
}

// newClient returns an etcd client of the test's own on addr, to write
// keys as another process would.
func newClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, LogConfig: quietLog()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// service is a service of one node, as a go-micro server registers it.
func service(name, version, node string) *registry.Service {
	return &registry.Service{
		Name:     name,
		Version:  version,
		Metadata: map[string]string{"v": version},
		Nodes:    []*registry.Node{{Id: node, Address: "127.0.0.1:9999"}},
	}
}

// nodeKey and encode are the plugin's key and value for a node.
func nodeKey(name, node string) string {
	return path.Join(prefix, strings.ReplaceAll(name, "/", "-"), strings.ReplaceAll(node, "/", "-"))
}

func encode(s *registry.Service) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// putNode writes a node's key as the plugin does, and returns the
// revision of the write.
func putNode(t *testing.T, c *clientv3.Client, s *registry.Service) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Put(ctx, nodeKey(s.Name, s.Nodes[0].Id), encode(s))
	if err != nil {
		t.Fatalf("put %s/%s: %v", s.Name, s.Nodes[0].Id, err)
	}
	return resp.Header.Revision
}

// txn commits ops as one etcd transaction: one revision, one watch
// response.
func txn(t *testing.T, c *clientv3.Client, ops ...clientv3.Op) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatalf("transaction: %v", err)
	}
}

// watch opens a watch on r and stops it when the test ends.
func watch(t *testing.T, r registry.Registry, opts ...registry.WatchOption) registry.Watcher {
	t.Helper()
	w, err := r.Watch(opts...)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	t.Cleanup(w.Stop)
	return w
}

// next is w.Next, failing the test if it has not returned within d.
func next(t *testing.T, w registry.Watcher, d time.Duration) (*registry.Result, error) {
	t.Helper()
	type answer struct {
		res *registry.Result
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := w.Next()
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-time.After(d):
		t.Fatalf("Next has not returned within %v", d)
		return nil, nil
	}
}

// mustNext is next, which must return an event of action on node.
func mustNext(t *testing.T, w registry.Watcher, action, node string) *registry.Result {
	t.Helper()
	res, err := next(t, w, 5*time.Second)
	if err != nil {
		t.Fatalf("Next: %v; want %s of %s", err, action, node)
	}
	if res.Action != action || len(res.Service.Nodes) != 1 || res.Service.Nodes[0].Id != node {
		t.Fatalf("Next: %s of %v; want %s of %s", res.Action, nodeIDs(res.Service), action, node)
	}
	return res
}

func nodeIDs(s *registry.Service) []string {
	var ids []string
	for _, n := range s.Nodes {
		ids = append(ids, n.Id)
	}
	return ids
}

// libraryGoroutines counts the goroutines that this package's non-test
// code started and that are still running.
func libraryGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(g, "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "created by github.com/regcache/cache/etcd.") && i+1 < len(lines) &&
				!strings.Contains(lines[i+1], "_test.go:") {
				count++
			}
		}
	}
	return count
}

// checkNoWatcherLeft fails the test if, once it ends, goroutines of this
// package are left. Cleanups run last in, first out: call it before the
// test opens watchers.
func checkNoWatcherLeft(t *testing.T) {
	t.Cleanup(func() {
		// A goroutine that has called its WaitGroup's Done, which Stop
		// waits for, may not have returned yet: it is given a moment,
		// not long enough to hide one that Stop does not wait for.
		deadline := time.Now().Add(250 * time.Millisecond)
		n := libraryGoroutines()
		for n > 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			n = libraryGoroutines()
		}
		if n > 0 {
			t.Errorf("%d goroutines of the watcher left", n)
		}
	})
}

// waitGoroutines fails the test unless, within a few seconds, there are
// at most n goroutines: those of the etcd client that serve a watch end
// shortly after it is cancelled, not at once.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > n {
		t.Errorf("%d goroutines; want at most %d", got, n)
	}
}
