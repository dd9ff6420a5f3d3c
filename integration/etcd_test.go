package integration

import (
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	etcdreg "github.com/go-micro/plugins/v4/registry/etcd"
	"go-micro.dev/v4/registry"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdServer is a single-member etcd server running inside the test process,
// on loopback ports picked at run time. It can be stopped and restarted on
// the same data directory and the same ports, which is how the tests simulate
// an outage of the registry.
type etcdServer struct {
	t         *testing.T
	dir       string
	clientURL url.URL
	peerURL   url.URL
	mu        sync.Mutex
	e         *embed.Etcd
}

var (
	usedPortsMu sync.Mutex
	usedPorts   = map[int]bool{}
)

// freePort asks the kernel for a free loopback port. The listener is closed
// at once, so another process could take the port in between; on a test
// machine that is rare enough. A port is never handed out twice in one test
// process: the etcd clients of an earlier test keep redialling the port of
// their stopped server, and must not reach the server of a later test.
func freePort(t *testing.T) int {
	t.Helper()
	usedPortsMu.Lock()
	defer usedPortsMu.Unlock()
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pick a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !usedPorts[port] {
			usedPorts[port] = true
			return port
		}
	}
	t.Fatalf("no unused free port found")
	return 0
}

func loopbackURL(port int) url.URL {
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// startEtcd starts a fresh etcd server in a temporary data directory. It is
// closed when the test ends.
func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	s := &etcdServer{
		t:         t,
		dir:       t.TempDir(),
		clientURL: loopbackURL(freePort(t)),
		peerURL:   loopbackURL(freePort(t)),
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Addr is the client address, host:port, to hand to registry.Addrs.
func (s *etcdServer) Addr() string { return s.clientURL.Host }

// Start starts the server, or restarts it on the same data directory and
// ports after Stop, and waits until it serves requests.
func (s *etcdServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		return
	}
	cfg := embed.NewConfig()
	cfg.Name = "regcache-it"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	cfg.EnableGRPCGateway = false
	// A test server: skipping fsync keeps a shared, noisy disk out of the
	// timings. Data still survives a Close/Start cycle in this process.
	cfg.UnsafeNoFsync = true

	// The port was free a moment ago, and after Stop it is ours again; a
	// restart may still need a short retry while the kernel releases it.
	var (
		e   *embed.Etcd
		err error
	)
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, err = embed.StartEtcd(cfg)
		if err == nil || time.Now().After(deadline) {
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
		s.t.Fatalf("etcd did not become ready within 30s")
	}
	s.e = e
}

// Stop closes the server: it stops listening, and every client connection
// breaks. It is idempotent.
func (s *etcdServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e == nil {
		return
	}
	s.e.Close()
	s.e = nil
}

// newEtcdRegistry returns go-micro's etcd registry plugin connected to s.
// The client's request timeout is timeout; it is also the dial timeout, and
// the plugin dials at once, so s must be up. The plugin has no Close: its
// etcd client lives until the test process ends (see freePort).
func newEtcdRegistry(t *testing.T, s *etcdServer, timeout time.Duration) registry.Registry {
	t.Helper()
	return newEtcdRegistryAt(t, s.Addr(), timeout)
}

// newEtcdRegistryAt is newEtcdRegistry for any address, such as a proxy's.
func newEtcdRegistryAt(t *testing.T, addr string, timeout time.Duration) registry.Registry {
	t.Helper()
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	// The etcd client logs every failed retry at warn level during an
	// outage; errors are enough.
	return etcdreg.NewRegistry(
		registry.Addrs(addr),
		registry.Timeout(timeout),
		etcdreg.LogConfig(&zc),
	)
}
