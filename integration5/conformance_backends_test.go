package integration5

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"go-micro.dev/v5/registry"
	"go-micro.dev/v5/registry/consul"
	"go-micro.dev/v5/registry/etcd"
	"go-micro.dev/v5/registry/nats"

	lossless "github.com/regcache/cache/gomicro5/etcd"
	natsmodule "github.com/regcache/cache/gomicro5/nats"
)

// The registries of the conformance suite (conformance_test.go, the twin
// of integration/conformance_test.go) for go-micro v5: its memory, etcd,
// NATS and mdns registries, and regcache's lossless etcd registry. Each
// runs on loopback: etcd and NATS as child processes (servers_test.go),
// mdns only inside a network namespace of the test's own.

func TestConformanceMemory(t *testing.T) {
	r := registry.NewMemoryRegistry()
	runConformance(t, &confBackend{name: "memory", writer: r, client: r})
}

// cutProxy forwards loopback TCP connections to target. Cut closes every
// forwarded connection and refuses new ones until Restore.
type cutProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &cutProxy{l: l, target: target, conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); p.forward(c) }()
		}
	}()
	t.Cleanup(func() { l.Close(); p.Cut(); wg.Wait() })
	return p
}

func (p *cutProxy) Addr() string { return p.l.Addr().String() }

func (p *cutProxy) forward(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(s, c); done <- struct{}{} }()
	go func() { io.Copy(c, s); done <- struct{}{} }()
	<-done
	c.Close()
	s.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// Cut disconnects every client and keeps new ones out.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets clients connect again.
func (p *cutProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// confEtcd is an etcd, written to directly and read through a
// proxy that the outage cuts, with the registries' default options.
func confEtcd(t *testing.T, name string, open func(addr string) registry.Registry) *confBackend {
	s := startEtcd(t)
	p := startCutProxy(t, s.Addr())
	return &confBackend{name: name, writer: open(s.Addr()), client: open(p.Addr()), cut: p.Cut, restore: p.Restore}
}

func TestConformanceEtcd(t *testing.T) {
	runConformance(t, confEtcd(t, "etcd", func(addr string) registry.Registry {
		return etcd.NewEtcdRegistry(registry.Addrs(addr), etcd.LogConfig(quietZap()))
	}))
}

func TestConformanceEtcdLossless(t *testing.T) {
	runConformance(t, confEtcd(t, "etcd lossless module", func(addr string) registry.Registry {
		return lossless.NewRegistry(registry.Addrs(addr), lossless.LogConfig(quietZap()))
	}))
}

// TestConformanceNATS runs the suite on nats-server (a child process)
// with go-micro v5's NATS registry, with its default options.
func TestConformanceNATS(t *testing.T) {
	addr := startNATS(t).Addr()
	p := startCutProxy(t, addr)
	writer := nats.NewNatsRegistry(registry.Addrs(addr))
	client := nats.NewNatsRegistry(registry.Addrs(p.Addr()))
	runConformance(t, &confBackend{name: "nats", writer: writer, client: client, cut: p.Cut, restore: p.Restore})
}

// natsPlugin is go-micro v5's NATS registry on addr, and natsModule
// regcache's gomicro5/nats, with their default options and opts.
func natsPlugin(addr string, opts ...registry.Option) registry.Registry {
	return nats.NewNatsRegistry(append([]registry.Option{registry.Addrs(addr)}, opts...)...)
}

func natsModule(addr string, opts ...registry.Option) registry.Registry {
	return natsmodule.NewRegistry(append([]registry.Option{registry.Addrs(addr)}, opts...)...)
}

// consulPlugin is go-micro v5's Consul registry on addr (consulapi_test.go's
// agent), with its default options.
func consulPlugin(addr string) registry.Registry {
	return consul.NewConsulRegistry(registry.Addrs(addr))
}

// go-micro v5's Consul registry keeps compiling, although no Consul server
// can run here (see README.md).
func TestConsulRegistryCompiles(t *testing.T) {
	var r registry.Registry = consul.NewConsulRegistry(registry.Addrs("127.0.0.1:1"))
	if r.String() != "consul" {
		t.Fatalf("consul registry: String() = %q", r.String())
	}
}

const (
	netnsEnv   = "REGCACHE_IT_NETNS"
	netnsReady = "regcache-it: network namespace holds only lo"
)

// TestConformanceMDNS runs the suite on go-micro v5's mdns registry only
// inside a network namespace of the test's own, as integration's
// TestConformanceMDNS does; it skips where none can be made.
func TestConformanceMDNS(t *testing.T) {
	if os.Getenv(netnsEnv) == "1" {
		ifs, err := net.Interfaces()
		if err != nil {
			t.Fatalf("list interfaces: %v", err)
		}
		if len(ifs) != 1 || ifs[0].Name != "lo" || ifs[0].Flags&net.FlagMulticast == 0 {
			t.Fatalf("not inside a namespace of the test's own with multicast on lo only: %v", ifs)
		}
		fmt.Println(netnsReady)
		runConformance(t, &confBackend{name: "mdns", writer: registry.NewMDNSRegistry(), client: registry.NewMDNSRegistry()})
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("mdns: cannot find the test binary to run in a network namespace: %v", err)
	}
	script := `ip link set lo up && ip link set lo multicast on && ip route add 224.0.0.0/4 dev lo && exec "$0" "$@"`
	cmd := exec.Command("unshare", "-n", "sh", "-c", script, exe, "-test.run", "^TestConformanceMDNS$", "-test.v", "-test.count=1", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := out.String()
	if !strings.Contains(text, netnsReady) {
		var ee *exec.ExitError
		if err != nil && (errors.As(err, &ee) || errors.Is(err, exec.ErrNotFound)) {
			t.Skipf("mdns: no network namespace of the test's own could be made (unshare -n with multicast on lo), so mdns is not run: %v\n%s", err, text)
		}
		t.Fatalf("mdns child: %v\n%s", err, text)
	}
	t.Log(text)
	if err != nil {
		t.Fatalf("mdns suite failed in its namespace: %v", err)
	}
}
