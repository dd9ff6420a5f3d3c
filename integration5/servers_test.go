package integration5

// The registry servers of the tests: the real etcd and nats-server, each a
// child process of the test, run from the binaries that
// REGCACHE_ETCD_SERVER and REGCACHE_NATS_SERVER name. `make servers`
// builds them from the test-only modules of integration/servers (an etcd
// per line: integration/servers/bin/etcd-3.5, etcd-3.6, etcd-3.7, and
// nats-server), and `make integration` sets the variables. Neither server
// is a requirement of this module: the library modules' users never build
// one.
//
// Every process has an owner that stops it: a test's cleanup, or the
// trial that started it. Should the test process die without them (a
// panic, go test's timeout), the kernel ends its children on Linux
// (setParentDeathSignal).
//
// The file has no go-micro import: integration5/servers_test.go is this
// file with its package changed (TestConformanceIsTheTwin checks it).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The environment variables that name the server binaries.
const (
	etcdServerEnv = "REGCACHE_ETCD_SERVER"
	natsServerEnv = "REGCACHE_NATS_SERVER"
)

// serverBinary returns the binary that env names, or an error that says
// how to get one.
func serverBinary(env, what string) (string, error) {
	bin := os.Getenv(env)
	if bin == "" {
		return "", fmt.Errorf("%s is not set: it names the %s binary that the tests start as a child process. Build the servers with `make servers` (from the repository's root) and set it to integration/servers/bin/%s; `make integration` does both", env, what, what)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s=%s: %v (`make servers` builds it)", env, bin, err)
	}
	return bin, nil
}

// etcdBinary returns the etcd binary the tests run, failing the test when
// there is none.
func etcdBinary(t *testing.T) string {
	t.Helper()
	bin, err := serverBinary(etcdServerEnv, "etcd-3.5")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var (
	usedPortsMu sync.Mutex
	usedPorts   = map[int]bool{}
)

// pickPort asks the kernel for a free loopback port. The listener is
// closed at once, so another process could take the port in between; on
// a test machine that is rare enough. A port is never handed out twice in
// one test process: the clients of an earlier test keep redialling the
// port of their stopped server, and must not reach the server of a later
// test.
func pickPort() (int, error) {
	usedPortsMu.Lock()
	defer usedPortsMu.Unlock()
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("pick a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !usedPorts[port] {
			usedPorts[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("no unused free port found")
}

// freePort is pickPort, failing the test on an error.
func freePort(t *testing.T) int {
	t.Helper()
	port, err := pickPort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func loopbackURL(port int) url.URL {
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// etcdServer is a single-member etcd server on loopback ports picked at
// run time, in a temporary data directory. Stop and Start, on the same
// data directory and ports, make an outage of the registry: the process
// is ended, and a new one started.
type etcdServer struct {
	t         *testing.T
	bin, dir  string
	clientURL url.URL
	peerURL   url.URL
	flags     []string // added to the command line
	mu        sync.Mutex
	p         *process // nil while stopped
}

// startEtcd starts a fresh etcd server in a temporary data directory. It
// is stopped when the test ends.
func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	return startEtcdWith(t)
}

// startEtcdWith is startEtcd with flags added to etcd's command line.
func startEtcdWith(t *testing.T, flags ...string) *etcdServer {
	t.Helper()
	s := &etcdServer{
		t:         t,
		bin:       etcdBinary(t),
		dir:       t.TempDir(),
		clientURL: loopbackURL(freePort(t)),
		peerURL:   loopbackURL(freePort(t)),
		flags:     flags,
	}
	t.Cleanup(s.Stop)
	s.Start()
	return s
}

// Addr is the client address, host:port, to hand to registry.Addrs.
func (s *etcdServer) Addr() string { return s.clientURL.Host }

// Start starts the server, or restarts it on the same data directory and
// ports after Stop, and returns once its /health says it serves (it has a
// leader and reads).
func (s *etcdServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		return
	}
	args := append([]string{
		"--name=regcache-it",
		"--data-dir=" + s.dir,
		"--listen-client-urls=" + s.clientURL.String(),
		"--advertise-client-urls=" + s.clientURL.String(),
		"--listen-peer-urls=" + s.peerURL.String(),
		"--initial-advertise-peer-urls=" + s.peerURL.String(),
		"--initial-cluster=regcache-it=" + s.peerURL.String(),
		"--log-level=error",
		// A test server: skipping fsync keeps a shared, noisy disk out
		// of the timings. Data still survives a Stop/Start cycle.
		"--unsafe-no-fsync",
	}, s.flags...)
	health := s.clientURL.String() + "/health"
	p, err := startRetrying(s.bin, args, 30*time.Second, func() bool { return etcdHealthy(health) })
	if err != nil {
		s.t.Fatalf("start etcd (%s): %v", s.bin, err)
	}
	s.p = p
}

// Stop ends the server: it stops listening, and every client connection
// breaks. It is idempotent.
func (s *etcdServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		if err := s.p.stop(); err != nil {
			s.t.Errorf("stop etcd: %v", err)
		}
		s.p = nil
	}
}

// etcdHealthy reports whether etcd's /health at url says it serves.
func etcdHealthy(url string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`))
}

// startGRPCProxy runs etcd's gRPC proxy (`etcd grpc-proxy start`, of the
// same etcd line) in front of the etcd at target, on a loopback port, and
// returns its address once a read goes through it. It stops when the test
// ends.
func startGRPCProxy(t *testing.T, target string) string {
	t.Helper()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, LogConfig: &zc})
	if err != nil {
		t.Fatalf("a client of the proxy: %v", err)
	}
	defer c.Close()
	reads := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := c.Get(ctx, "regcache-probe")
		return err == nil
	}
	// The proxy checks itself through a client of the address it
	// advertises, and exits when that fails to dial within 5 s: its
	// default is the default listen address, not ours.
	args := []string{"grpc-proxy", "start", "--endpoints=" + target, "--listen-addr=" + addr, "--advertise-client-url=" + addr}
	p, err := startProcess(etcdBinary(t), args, 30*time.Second, reads)
	if err != nil {
		t.Fatalf("start etcd's gRPC proxy: %v", err)
	}
	t.Cleanup(func() {
		select {
		case <-p.exited:
			t.Errorf("etcd's gRPC proxy exited before the test ended (%v): %s", p.waitErr, p.out.tail())
			return
		default:
		}
		if err := p.stop(); err != nil {
			t.Errorf("stop etcd's gRPC proxy: %v", err)
		}
	})
	return addr
}

// natsServer is a NATS server on a loopback port picked at run time.
// Stop and Start, on the same port, make an outage: the process is
// ended, and a new one started. Its methods return errors rather than
// fail a test, so that trials running in goroutines of their own use it
// too; startNATS is the test's form.
type natsServer struct {
	bin  string
	port int
	mu   sync.Mutex
	p    *process // nil while stopped
}

// newNATSServer starts a NATS server on a free port. Whoever gets it must
// Stop it.
func newNATSServer() (*natsServer, error) {
	bin, err := serverBinary(natsServerEnv, "nats-server")
	if err != nil {
		return nil, err
	}
	port, err := pickPort()
	if err != nil {
		return nil, err
	}
	n := &natsServer{bin: bin, port: port}
	return n, n.Start()
}

// startNATS starts a NATS server, stopped when the test ends.
func startNATS(t *testing.T) *natsServer {
	t.Helper()
	n, err := newNATSServer()
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stop nats-server: %v", err)
		}
	})
	return n
}

func (n *natsServer) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

// Start starts the server on its port, and returns once it greets a
// client.
func (n *natsServer) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil {
		return nil
	}
	p, err := startRetrying(n.bin, []string{"-a", "127.0.0.1", "-p", strconv.Itoa(n.port)}, 10*time.Second, func() bool { return natsGreets(n.Addr()) })
	if err != nil {
		return fmt.Errorf("start nats-server (%s) on port %d: %v", n.bin, n.port, err)
	}
	n.p = p
	return nil
}

// Stop ends the server: every connection to it is lost. It is
// idempotent.
func (n *natsServer) Stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil {
		return nil
	}
	err := n.p.stop()
	n.p = nil
	return err
}

// natsGreets reports whether the server at addr sends a client its INFO.
func natsGreets(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "INFO ")
}

// process is a server binary run as a child of the test.
type process struct {
	cmd     *exec.Cmd
	out     *tailBuffer
	exited  chan struct{} // closed once the process has exited and waitErr is set
	waitErr error
}

// startRetrying is startProcess, tried again for up to 10 s while the
// process exits at once: after a Stop the ports are ours again, but the
// kernel may take a moment to release them.
func startRetrying(bin string, args []string, timeout time.Duration, ready func() bool) (*process, error) {
	for deadline := time.Now().Add(10 * time.Second); ; {
		p, err := startProcess(bin, args, timeout, ready)
		if err == nil || !time.Now().Before(deadline) || !strings.Contains(err.Error(), "exited") {
			return p, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startProcess starts bin with args and returns once ready reports true,
// polled every 20 ms, or fails, with what the process printed, when it
// exits first or is not ready within timeout (and is then stopped).
func startProcess(bin string, args []string, timeout time.Duration, ready func() bool) (*process, error) {
	p := &process{cmd: exec.Command(bin, args...), out: &tailBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{}
	setParentDeathSignal(p.cmd.SysProcAttr)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !ready() {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("exited (%v) before it served: %s", p.waitErr, p.out.tail())
		case <-deadline.C:
			_ = p.stop()
			return nil, fmt.Errorf("not serving within %v: %s", timeout, p.out.tail())
		case <-tick.C:
		}
	}
	return p, nil
}

// stop ends the process at once, with SIGKILL, and waits for it: an
// outage as a crash makes one, every connection ended at once. On SIGTERM
// etcd would first drain its gRPC streams for up to its request timeout
// (7 s), which would stretch every outage of the tests by as much. etcd's
// data survives: it was written (though not synced, --unsafe-no-fsync) to
// files whose pages the kernel keeps, and etcd replays its WAL when it
// starts again.
func (p *process) stop() error {
	if err := p.cmd.Process.Kill(); err != nil {
		select {
		case <-p.exited:
			return nil
		default:
			return err
		}
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("not ended within 10 s of SIGKILL: %s", p.out.tail())
	}
}

// tailBuffer keeps the last 64 KB a process printed, for the message of a
// failure.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailKeep = 64 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*tailKeep {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-tailKeep:]...)
	}
	return len(p), nil
}

// tail is the last 2 KB printed.
func (b *tailBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := string(b.buf)
	if len(s) > 2048 {
		s = "…" + s[len(s)-2048:]
	}
	return strings.TrimSpace(s)
}
