//go:build !unit

package nats

// The embedded NATS server of the tests. Under the unit tag (`make test`),
// which compiles no NATS server, server_unit_test.go stands in for this
// file and every test that needs a server skips.

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// natsServer is a NATS server in the test process, on a loopback port
// picked at run time. Stop and Start, on the same port, make an outage.
type natsServer struct {
	t    *testing.T
	port int
	mu   sync.Mutex
	s    *natsserver.Server
}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an embedded NATS server: not with -short (make integration runs it)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	n := &natsServer{t: t, port: port}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

func (n *natsServer) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

// Start starts the server on its port, and returns once it accepts
// connections.
func (n *natsServer) Start() {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.s != nil {
		return
	}
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: n.port, NoLog: true, NoSigs: true})
	if err != nil {
		n.t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		n.t.Fatalf("nats server not ready")
	}
	n.s = s
}

// Stop shuts the server down: every connection to it is lost.
func (n *natsServer) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.s != nil {
		n.s.Shutdown()
		n.s.WaitForShutdown()
		n.s = nil
	}
}
