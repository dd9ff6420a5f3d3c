package integration5

import (
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v5/registry"
	"go-micro.dev/v5/registry/etcd"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdServer is a single-member etcd server in the test process, on
// loopback ports picked at run time. Stop and Start, on the same ports and
// data directory, make an outage of the registry.
type etcdServer struct {
	t                  *testing.T
	dir                string
	clientURL, peerURL url.URL
	mu                 sync.Mutex
	e                  *embed.Etcd
}

// freePort asks the kernel for a free loopback port. The listener is
// closed at once; another process could take the port before etcd does,
// which on a test machine is rare enough.
func freePort(t *testing.T) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// startEtcd starts etcd in a temporary directory; it stops when the test
// ends.
func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	s := &etcdServer{t: t, dir: t.TempDir(), clientURL: freePort(t), peerURL: freePort(t)}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Addr is the client address, host:port.
func (s *etcdServer) Addr() string { return s.clientURL.Host }

// Start starts the server, or restarts it after Stop, and waits until it
// serves.
func (s *etcdServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		return
	}
	cfg := embed.NewConfig()
	cfg.Name = "regcache-it5"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	cfg.EnableGRPCGateway = false
	cfg.UnsafeNoFsync = true // a test server on a shared disk

	// After Stop the ports are ours again, but the kernel may need a
	// moment to release them.
	var (
		e   *embed.Etcd
		err error
	)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if e, err = embed.StartEtcd(cfg); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("start etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		s.t.Fatalf("etcd failed while starting: %v", err)
	case <-time.After(30 * time.Second):
		e.Close()
		s.t.Fatalf("etcd not ready within 30s")
	}
	s.e = e
}

// Stop closes the server: it stops listening and every client connection
// breaks. It is idempotent.
func (s *etcdServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// newRegistry returns go-micro v5's etcd registry on s, with its own etcd
// client, as another process would have. timeout is the client's dial and
// request timeout. The registry has no Close: its client lives until the
// test process ends.
func newRegistry(s *etcdServer, timeout time.Duration) registry.Registry {
	zc := zap.NewProductionConfig()
	// The etcd client logs each failed retry during the outage at warn.
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	return etcd.NewEtcdRegistry(registry.Addrs(s.Addr()), registry.Timeout(timeout), etcd.LogConfig(&zc))
}
