package etcd

// The etcd of the tests: a real etcd server, run as a child process of the
// test from the binary that REGCACHE_ETCD_SERVER names. `make servers`
// builds one binary per etcd line (integration/servers/bin/etcd-3.5,
// etcd-3.6, etcd-3.7), and `make etcd-tests` runs this module's tests on
// each. Under -short (`make test`) the tests that need a server skip.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serverEnv names the environment variable that gives the etcd binary.
const serverEnv = "REGCACHE_ETCD_SERVER"

// serverConfig is what a test may change before each start: flags added
// to etcd's command line.
type serverConfig struct{ flags []string }

// etcdServer is a single-member etcd, a child process of the test, on
// loopback ports picked at run time, in a temporary directory. Stop and
// Start, on the same ports and data, make an outage: the process is
// ended, and a new one started.
type etcdServer struct {
	t                  *testing.T
	bin, dir           string
	clientURL, peerURL url.URL
	cfg                serverConfig
	mu                 sync.Mutex
	p                  *process // nil while stopped
}

// etcdBinary returns the etcd binary the tests run, skipping under -short
// and failing, saying how to build one, when none is given.
func etcdBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an etcd server: not with -short (make integration runs it)")
	}
	bin := os.Getenv(serverEnv)
	if bin == "" {
		t.Fatalf("%s is not set: it names the etcd binary the tests start. Build them with `make servers` (from the repository's root) and set it to integration/servers/bin/etcd-3.5 (or -3.6, -3.7); `make etcd-tests` does both", serverEnv)
	}
	return bin
}

// startEtcdWith is startEtcd with configure, if not nil, applied to the
// configuration.
func startEtcdWith(t *testing.T, configure func(*serverConfig)) *etcdServer {
	t.Helper()
	s := &etcdServer{t: t, bin: etcdBinary(t), dir: t.TempDir(), clientURL: loopback(freePort(t)), peerURL: loopback(freePort(t))}
	if configure != nil {
		configure(&s.cfg)
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// fastElection makes a restarted etcd serve within about 100 ms of its
// start, where by default the member waits an election timeout (1 s,
// randomized up to twice that) before it elects itself. It accepts
// connections at once either way.
func fastElection(cfg *serverConfig) {
	cfg.flags = append(cfg.flags, "--heartbeat-interval=10", "--election-timeout=100")
}

// Addr is the client address, host:port.
func (s *etcdServer) Addr() string { return s.clientURL.Host }

// Start starts the server, or restarts it after Stop, and returns once it
// serves: once its /health answers that it has a leader and reads.
func (s *etcdServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		return
	}
	args := append([]string{
		"--name=regcache-etcd",
		"--data-dir=" + s.dir,
		"--listen-client-urls=" + s.clientURL.String(),
		"--advertise-client-urls=" + s.clientURL.String(),
		"--listen-peer-urls=" + s.peerURL.String(),
		"--initial-advertise-peer-urls=" + s.peerURL.String(),
		"--initial-cluster=regcache-etcd=" + s.peerURL.String(),
		"--log-level=error",
		"--unsafe-no-fsync", // a test server, on a shared disk
	}, s.cfg.flags...)
	health := s.clientURL.String() + "/health"
	// After Stop the ports are ours again, but the kernel may take a
	// moment to release them: a server that exits at once is started
	// again, for up to 10 s.
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s.p, err = startProcess(s.bin, args, 30*time.Second, func() bool { return etcdHealthy(health) }); err == nil {
			return
		}
		if !time.Now().Before(deadline) || !strings.Contains(err.Error(), "exited") {
			s.t.Fatalf("start etcd (%s): %v", s.bin, err)
		}
		time.Sleep(100 * time.Millisecond)
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

// Stop ends the server: it stops listening and its connections end. It
// is idempotent.
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

// process is a server binary run as a child of the test.
type process struct {
	cmd     *exec.Cmd
	out     *syncBuffer
	exited  chan struct{} // closed once the process has exited and waitErr is set
	waitErr error
}

// startProcess starts bin with args and returns once ready reports true,
// polled every 20 ms, or fails, with what the process printed, when it
// exits first or is not ready within timeout.
func startProcess(bin string, args []string, timeout time.Duration, ready func() bool) (*process, error) {
	p := &process{cmd: exec.Command(bin, args...), out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Should the test process die without its cleanups (a panic, go
	// test's timeout), the kernel ends the server too.
	p.cmd.SysProcAttr = childAttr()
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

// stop ends the process with SIGTERM, on which the servers shut down
// cleanly, or SIGKILL when it has not exited 10 s later, and waits for it.
func (p *process) stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
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
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("did not exit within 10 s of SIGTERM, killed: %s", p.out.tail())
	}
}

// syncBuffer keeps what a process prints, for the message of a failure.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// tail is the last 2 KB printed.
func (b *syncBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if len(s) > 2048 {
		s = "…" + s[len(s)-2048:]
	}
	return strings.TrimSpace(s)
}
