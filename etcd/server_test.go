//go:build !unit

package etcd

// The embedded etcd of the tests. Under the unit tag (`make test`), which
// compiles no etcd server, server_unit_test.go stands in for this file and
// every test that needs a server skips.

import (
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// serverConfig is what a test may change before each start.
type serverConfig = embed.Config

// etcdServer is a single-member etcd in the test process, on loopback
// ports picked at run time, in a temporary directory. Stop and Start, on
// the same ports and data, make an outage.
type etcdServer struct {
	t                  *testing.T
	dir                string
	clientURL, peerURL url.URL
	configure          func(*serverConfig) // if set, changes the configuration before each start
	mu                 sync.Mutex
	e                  *embed.Etcd
}

// startEtcdWith is startEtcd with configure, if not nil, applied to the
// configuration at each start.
func startEtcdWith(t *testing.T, configure func(*serverConfig)) *etcdServer {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an embedded etcd: not with -short (make integration runs it)")
	}
	s := &etcdServer{t: t, dir: t.TempDir(), clientURL: loopback(freePort(t)), peerURL: loopback(freePort(t)), configure: configure}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// fastElection makes a restarted etcd serve within about 100 ms of its
// start, where by default the member waits an election timeout (1 s,
// randomized up to twice that) before it elects itself. It accepts
// connections at once either way.
func fastElection(cfg *serverConfig) { cfg.TickMs, cfg.ElectionMs = 10, 100 }

// Addr is the client address, host:port.
func (s *etcdServer) Addr() string { return s.clientURL.Host }

// Start starts the server, or restarts it after Stop, and returns once it
// serves.
func (s *etcdServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		return
	}
	cfg := embed.NewConfig()
	cfg.Name = "regcache-etcd"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	cfg.EnableGRPCGateway = false
	cfg.UnsafeNoFsync = true // a test server, on a shared disk
	if s.configure != nil {
		s.configure(cfg)
	}

	// After Stop the ports are ours again, but the kernel may take a
	// moment to release them.
	var (
		e   *embed.Etcd
		err error
	)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if e, err = embed.StartEtcd(cfg); err == nil || time.Now().After(deadline) {
			break
		}
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
		s.t.Fatal("etcd not ready within 30s")
	}
	s.e = e
}

// Stop closes the server: it stops listening and its connections end. It
// is idempotent.
func (s *etcdServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}
