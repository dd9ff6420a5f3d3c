package integration5

import (
	"fmt"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go-micro.dev/v5/registry"
	gmcache "go-micro.dev/v5/registry/cache"
	"go-micro.dev/v5/registry/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	cache "github.com/regcache/cache/gomicro5"
	lossless "github.com/regcache/cache/gomicro5/etcd"
)

// A restartClient is one of the four clients of TestRestartV5, each with
// its own registry instance and etcd client, every option at its default.
type restartClient struct {
	name       string
	lookup     func(service string) ([]*registry.Service, error)
	stop       func()
	reconnects func() uint64 // regcache's WatchReconnects; nil for go-micro's cache
}

func quietZap() *zap.Config {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	return &zc
}

// newRestartClients builds, on s: regcache's v5 flavour over gomicro5/etcd
// and over go-micro v5's registry/etcd, and go-micro v5's registry/cache
// over each. Registries have their default Timeout (5 s).
func newRestartClients(s *etcdServer, log *recordingLogger) []restartClient {
	inTree := func() registry.Registry {
		return etcd.NewEtcdRegistry(registry.Addrs(s.Addr()), etcd.LogConfig(quietZap()))
	}
	module := func() registry.Registry {
		return lossless.NewRegistry(registry.Addrs(s.Addr()), lossless.LogConfig(quietZap()))
	}
	regcache := func(name string, r registry.Registry) restartClient {
		c := cache.New(r, cache.WithLogger(log))
		return restartClient{name: name, lookup: func(s string) ([]*registry.Service, error) { return c.Lookup(s) }, stop: func() { c.Stop(); closeEtcdClient(r) },
			reconnects: func() uint64 { return c.Stats().WatchReconnects }}
	}
	gomicro := func(name string, r registry.Registry) restartClient {
		c := gmcache.New(r)
		return restartClient{name: name, lookup: func(service string) ([]*registry.Service, error) {
			return c.GetService(service)
		}, stop: func() { c.Stop(); closeEtcdClient(r) }}
	}
	return []restartClient{
		regcache("regcache, gomicro5/etcd", module()),
		regcache("regcache, v5 registry/etcd", inTree()),
		gomicro("v5 cache, v5 registry/etcd", inTree()),
		gomicro("v5 cache, gomicro5/etcd", module()),
	}
}

var etcdClientType = reflect.TypeOf((*clientv3.Client)(nil))

// etcdClientOf returns the etcd client of go-micro v5's etcd registry, or
// of the one inside gomicro5/etcd's, read from its unexported field: the
// registry has no Close.
func etcdClientOf(r registry.Registry) *clientv3.Client {
	v := reflect.ValueOf(r)
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || !v.CanAddr() {
		return nil
	}
	if f := v.FieldByName("client"); f.IsValid() && f.Type() == etcdClientType {
		return *(**clientv3.Client)(unsafe.Pointer(f.UnsafeAddr()))
	}
	if f := v.FieldByName("plugin"); f.IsValid() && f.Kind() == reflect.Interface {
		if inner, _ := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(registry.Registry); inner != nil {
			return etcdClientOf(inner)
		}
	}
	return nil
}

// closeEtcdClient closes r's etcd client, so that it does not reconnect
// through the later trials' restarts.
func closeEtcdClient(r registry.Registry) {
	if c := etcdClientOf(r); c != nil {
		c.Close()
	}
}

func hasNode(svcs []*registry.Service, id string) bool {
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if n.Id == id {
				return true
			}
		}
	}
	return false
}

// timeToServe polls every client every 5 ms until want holds for what it
// serves, for at most limit from start; each client's time from start, or
// -1 if it did not get there.
func timeToServe(clients []restartClient, service string, start time.Time, limit time.Duration, want func([]*registry.Service) bool) []time.Duration {
	took := make([]time.Duration, len(clients))
	left := len(clients)
	for i := range took {
		took[i] = -1
	}
	for {
		for i, c := range clients {
			if took[i] < 0 {
				if svcs, err := c.lookup(service); err == nil && want(svcs) {
					took[i] = time.Since(start)
					left--
				}
			}
		}
		if left == 0 || time.Since(start) > limit {
			return took
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustServe(t *testing.T, clients []restartClient, service, what string, want func([]*registry.Service) bool) {
	t.Helper()
	for i, d := range timeToServe(clients, service, time.Now(), 10*time.Second, want) {
		if d < 0 {
			svcs, err := clients[i].lookup(service)
			t.Fatalf("%s: %s: not within 10s (serves %v, %v)", clients[i].name, what, nodeIDs(svcs), err)
		}
	}
}

func node(name, id string) *registry.Service {
	return &registry.Service{Name: name, Version: "1.0.0", Nodes: []*registry.Node{{Id: id, Address: "127.0.0.1:1"}}}
}

func register(t *testing.T, r registry.Registry, s *registry.Service) {
	t.Helper()
	if err := r.Register(s, registry.RegisterTTL(time.Minute)); err != nil {
		t.Fatalf("register %s/%s: %v", s.Name, s.Nodes[0].Id, err)
	}
}

// warmUp registers probe nodes through writer until every client has
// served one, through its watch (no cache refreshes within its TTL), and
// removes them: each cache opens its watch in the background with the
// first lookup, so that an event right after it could come before.
func warmUp(t *testing.T, clients []restartClient, writer registry.Registry, service string) {
	t.Helper()
	warm := make([]bool, len(clients))
	var probes []*registry.Service
	for i := 0; !allTrue(warm); i++ {
		if i == 20 {
			t.Fatalf("20 probes, and not every client served one through its watch: %v", warm)
		}
		p := node(service, fmt.Sprintf("probe-%d", i))
		register(t, writer, p)
		probes = append(probes, p)
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && !allTrue(warm); time.Sleep(5 * time.Millisecond) {
			for j, c := range clients {
				if !warm[j] {
					svcs, _ := c.lookup(service)
					warm[j] = hasNode(svcs, p.Nodes[0].Id)
				}
			}
		}
	}
	for _, p := range probes {
		if err := writer.Deregister(p); err != nil {
			t.Fatalf("deregister %s: %v", p.Nodes[0].Id, err)
		}
	}
	mustServe(t, clients, service, "the probes' removal", func(s []*registry.Service) bool {
		for _, p := range probes {
			if hasNode(s, p.Nodes[0].Id) {
				return false
			}
		}
		return true
	})
}

func allTrue(b []bool) bool {
	for _, v := range b {
		if !v {
			return false
		}
	}
	return true
}

// regcacheGoroutines counts the goroutines that regcache's packages, not
// these tests, started and that still run.
func regcacheGoroutines() (int, string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var stacks []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, l := range strings.Split(g, "\n") {
			if strings.HasPrefix(l, "created by github.com/regcache/cache") && !strings.HasPrefix(l, "created by github.com/regcache/cache/integration5") {
				stacks = append(stacks, g)
				break
			}
		}
	}
	return len(stacks), strings.Join(stacks, "\n\n")
}

// TestRestartV5: the restart scenario of the v4 integration tests
// (integration/lossless_test.go) in go-micro v5. A service has one
// instance, A, cached by every client, its data fresh; etcd stops for 2 s
// and starts again; 0.5 s after it serves, a second instance, B,
// registers, from a registry made then (a process that starts after the
// restart), through Register with a TTL, as a go-micro server does. The
// time is from B's Register returning to each client serving B. Each
// trial has its own service and four new clients, stopped at its end.
//
// 2 s takes regcache through the outage's whole path (its stream lost at
// once, its redial overdue after 1 s, the registry held down, a redial
// that waits through etcd's return, then the stream and a resync back);
// a longer outage adds probes. 5 trials keep CI short; the v4 test runs 20.
func TestRestartV5(t *testing.T) {
	const (
		trials = 5
		outage = 2 * time.Second
		delay  = 500 * time.Millisecond
		limit  = 5 * time.Second
		bound  = 1500 * time.Millisecond
	)
	before := runtime.NumGoroutine()
	s := startEtcd(t)
	log := &recordingLogger{}
	defer func() {
		if t.Failed() {
			t.Logf("regcache's log:\n%s", log.text())
		}
	}()

	var names []string
	took := make([][]time.Duration, trials)
	for trial := 0; trial < trials; trial++ {
		name := fmt.Sprintf("it5.restart-%d", trial)
		writer := etcd.NewEtcdRegistry(registry.Addrs(s.Addr()), etcd.LogConfig(quietZap()))
		clients := newRestartClients(s, log)
		if names == nil {
			for _, c := range clients {
				names = append(names, c.name)
			}
		}
		register(t, writer, node(name, "A"))
		mustServe(t, clients, name, "instance A", func(s []*registry.Service) bool { return hasNode(s, "A") })
		warmUp(t, clients, writer, name)
		closeEtcdClient(writer)

		s.Stop()
		time.Sleep(outage)
		s.Start()
		time.Sleep(delay)

		b := etcd.NewEtcdRegistry(registry.Addrs(s.Addr()), etcd.LogConfig(quietZap()))
		start := time.Now()
		register(t, b, node(name, "B"))
		registered := time.Now()
		took[trial] = timeToServe(clients, name, registered, limit, func(s []*registry.Service) bool { return hasNode(s, "B") })

		var line strings.Builder
		for i, d := range took[trial] {
			fmt.Fprintf(&line, "  %s %s", names[i], show(d, limit))
			if r := clients[i].reconnects; r != nil {
				fmt.Fprintf(&line, " (%d reconnects)", r())
			}
			line.WriteString(";")
		}
		t.Logf("trial %d: B's Register %v; B served:%s", trial+1, registered.Sub(start).Round(100*time.Microsecond), line.String())
		if d := took[trial][0]; d < 0 || d > bound {
			t.Errorf("trial %d: %s served B %s after its Register; want within %v", trial+1, names[0], show(d, limit), bound)
		}
		if clients[0].reconnects() == 0 {
			t.Errorf("trial %d: %s: no watch stream established again after the outage", trial+1, names[0])
		}
		for _, c := range clients {
			c.stop()
		}
		closeEtcdClient(b)
	}

	t.Logf("outage %v, B registered %v after etcd served again; from B's Register to B served, %d trials (cap %v):", outage, delay, trials, limit)
	t.Logf("%-28s %9s %9s %9s  %s", "client", "min", "median", "max", "within "+bound.String())
	for i, n := range names {
		var ds []time.Duration
		within := 0
		for _, row := range took {
			d := row[i]
			if d >= 0 && d <= bound {
				within++
			}
			if d < 0 {
				d = 1<<63 - 1
			}
			ds = append(ds, d)
		}
		sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
		t.Logf("%-28s %9s %9s %9s  %d of %d", n, show(ds[0], limit), show(ds[len(ds)/2], limit), show(ds[len(ds)-1], limit), within, trials)
	}

	s.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, stacks := regcacheGoroutines()
		total := runtime.NumGoroutine()
		if n == 0 && total <= before {
			break
		}
		if time.Now().After(deadline) {
			if n > 0 {
				t.Errorf("%d goroutines of regcache left:\n%s", n, stacks)
			}
			if total > before {
				t.Errorf("%d goroutines after the test, %d before", total, before)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// show formats a time to serve; -1 or the sort's sentinel is "> limit".
func show(d, limit time.Duration) string {
	switch {
	case d < 0 || d == 1<<63-1:
		return "> " + limit.String()
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}
