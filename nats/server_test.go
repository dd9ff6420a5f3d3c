package nats

// The NATS server of the tests: the real nats-server, run as a child
// process of the test from the binary that REGCACHE_NATS_SERVER names.
// `make servers` builds it (integration/servers/bin/nats-server), and
// `make nats-tests` runs this module's tests on it. Under -short (`make
// test`) the tests that need a server skip.

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serverEnv names the environment variable that gives the nats-server
// binary.
const serverEnv = "REGCACHE_NATS_SERVER"

// natsServer is a NATS server, a child process of the test, on a loopback
// port picked at run time. Stop and Start, on the same port, make an
// outage: the process is ended, and a new one started.
type natsServer struct {
	t    *testing.T
	bin  string
	port int
	mu   sync.Mutex
	p    *process // nil while stopped
}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a NATS server: not with -short (make integration runs it)")
	}
	bin := os.Getenv(serverEnv)
	if bin == "" {
		t.Fatalf("%s is not set: it names the nats-server binary the tests start. Build it with `make servers` (from the repository's root) and set it to integration/servers/bin/nats-server; `make nats-tests` does both", serverEnv)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	n := &natsServer{t: t, bin: bin, port: port}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

func (n *natsServer) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

// Start starts the server on its port, and returns once it greets a
// client.
func (n *natsServer) Start() {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil {
		return
	}
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(n.port)}
	// After Stop the port is ours again, but the kernel may take a moment
	// to release it: a server that exits at once is started again, for
	// up to 10 s.
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n.p, err = startProcess(n.bin, args, 10*time.Second, func() bool { return natsGreets(n.Addr()) }); err == nil {
			return
		}
		if !time.Now().Before(deadline) || !strings.Contains(err.Error(), "exited") {
			n.t.Fatalf("start nats-server (%s): %v", n.bin, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
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

// Stop ends the server: every connection to it is lost. It is
// idempotent.
func (n *natsServer) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p != nil {
		if err := n.p.stop(); err != nil {
			n.t.Errorf("stop nats-server: %v", err)
		}
		n.p = nil
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
