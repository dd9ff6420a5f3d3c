package integration

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	consulreg "github.com/go-micro/plugins/v4/registry/consul"
	etcdreg "github.com/go-micro/plugins/v4/registry/etcd"
	natsreg "github.com/go-micro/plugins/v4/registry/nats"
	"go-micro.dev/v4/registry"

	lossless "github.com/regcache/cache/etcd"
	natsmodule "github.com/regcache/cache/nats"
)

// The registries of the conformance suite (conformance_test.go) for
// go-micro v4. Each runs on loopback: etcd and NATS as child processes
// (servers_test.go), mdns only inside a network namespace of the test's
// own.

func TestConformanceMemory(t *testing.T) {
	r := registry.NewMemoryRegistry()
	runConformance(t, &confBackend{name: "memory", writer: r, client: r})
}

// confEtcd is an etcd, written to directly and read through a
// proxy that the outage cuts. The registries have their default options
// (a Timeout of 5 s), as users run them.
func confEtcd(t *testing.T, name string, open func(addr string) registry.Registry) *confBackend {
	s := startEtcd(t)
	p := startProxy(t, s.Addr())
	return &confBackend{
		name:    name,
		writer:  open(s.Addr()),
		client:  open(p.Addr()),
		cut:     p.Cut,
		restore: p.Restore,
	}
}

func TestConformanceEtcdPlugin(t *testing.T) {
	runConformance(t, confEtcd(t, "etcd plugin", func(addr string) registry.Registry {
		return etcdreg.NewRegistry(registry.Addrs(addr), etcdreg.LogConfig(quietZap()))
	}))
}

func TestConformanceEtcdLossless(t *testing.T) {
	runConformance(t, confEtcd(t, "etcd lossless module", func(addr string) registry.Registry {
		return lossless.NewRegistry(registry.Addrs(addr), lossless.LogConfig(quietZap()))
	}))
}

// TestConformanceNATS runs the suite on nats-server (a child process) with
// go-micro's NATS plugin, with its default options (a query timeout of
// 100 ms, nats.go's reconnect policy). The servers' registry connects to
// NATS directly, the caches' through the proxy that the outage cuts.
func TestConformanceNATS(t *testing.T) {
	addr := startNATS(t).Addr()
	p := startProxy(t, addr)
	writer := natsreg.NewRegistry(registry.Addrs(addr))
	client := natsreg.NewRegistry(registry.Addrs(p.Addr()))
	runConformance(t, &confBackend{name: "nats", writer: writer, client: client, cut: p.Cut, restore: p.Restore})
}

// natsPlugin is go-micro's NATS plugin on addr, and natsModule regcache's
// nats module, with their default options and opts.
func natsPlugin(addr string, opts ...registry.Option) registry.Registry {
	return natsreg.NewRegistry(append([]registry.Option{registry.Addrs(addr)}, opts...)...)
}

func natsModule(addr string, opts ...registry.Option) registry.Registry {
	return natsmodule.NewRegistry(append([]registry.Option{registry.Addrs(addr)}, opts...)...)
}

// consulPlugin is go-micro's Consul plugin on addr (consulapi_test.go's
// agent), with its default options.
func consulPlugin(addr string) registry.Registry { return consulreg.NewRegistry(registry.Addrs(addr)) }

// The Consul plugin keeps compiling against the go-micro this module uses,
// although no Consul server can run here (see README.md).
func TestConsulPluginCompiles(t *testing.T) {
	var r registry.Registry = consulreg.NewRegistry(registry.Addrs("127.0.0.1:1"))
	if r.String() != "consul" {
		t.Fatalf("consul plugin: String() = %q", r.String())
	}
}

// netnsEnv marks the child that runs the mdns suite inside the network
// namespace its parent made.
const netnsEnv = "REGCACHE_IT_NETNS"

// netnsReady is what the child prints once it has checked its namespace.
const netnsReady = "regcache-it: network namespace holds only lo"

// TestConformanceMDNS runs the suite on mdns, go-micro's default registry,
// only inside a network namespace of the test's own: it re-executes its
// own binary under `unshare -n` with multicast on the namespace's loopback,
// and the child checks that the namespace holds no interface but lo before
// anything starts. No packet leaves the namespace. Where a namespace cannot
// be made (not root, no unshare or ip), the test skips; it never falls
// back to the host's interfaces.
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
		r := registry.NewRegistry() // mdns
		w := registry.NewRegistry()
		runConformance(t, &confBackend{name: "mdns", writer: w, client: r})
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("mdns: cannot find the test binary to run in a network namespace: %v", err)
	}
	script := `ip link set lo up && ip link set lo multicast on && ip route add 224.0.0.0/4 dev lo && exec "$0" "$@"`
	args := []string{"-n", "sh", "-c", script, exe, "-test.run", "^TestConformanceMDNS$", "-test.v", "-test.count=1", "-test.timeout=10m"}
	cmd := exec.Command("unshare", args...)
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
