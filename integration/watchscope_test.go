package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
)

// realisticService is a service as a go-micro server registers it: one node
// with the server's metadata, and two endpoints with their request and
// response types. version changes the node's metadata, so that registering
// it again is an update in etcd.
func realisticService(name string, version int) *registry.Service {
	value := func(n string, fields ...string) *registry.Value {
		v := &registry.Value{Name: n, Type: n}
		for _, f := range fields {
			v.Values = append(v.Values, &registry.Value{Name: f, Type: "string"})
		}
		return v
	}
	return &registry.Service{
		Name:    name,
		Version: "latest",
		Nodes: []*registry.Node{{
			Id:      name + "-0d4c6a1e-8f6b-4f5e-9a63-2f1b5c7d9e01",
			Address: "10.0.12.34:41235",
			Metadata: map[string]string{
				"broker": "http", "protocol": "mucp", "registry": "etcd", "server": "mucp",
				"transport": "http", "revision": fmt.Sprint(version),
			},
		}},
		Endpoints: []*registry.Endpoint{
			{Name: "Handler.Call", Request: value("CallRequest", "name", "id"), Response: value("CallResponse", "msg"),
				Metadata: map[string]string{"endpoint": "Handler.Call"}},
			{Name: "Handler.List", Request: value("ListRequest", "page", "limit", "filter"), Response: value("ListResponse", "items", "next"),
				Metadata: map[string]string{"endpoint": "Handler.List"}},
		},
	}
}

// profileEnv names a directory: when it is set, each child of
// TestWatchScope writes a CPU profile of the churn there, one file per
// client, named after it (profileName).
const profileEnv = "REGCACHE_IT_CPUPROFILE"

// profileName is the file of the CPU profile of the client called name.
func profileName(name string) string {
	return strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(name)) + ".pprof"
}

// TestWatchScope measures what one client receives and spends when it caches
// 10 of 1 000 registered services and the other 990 churn: with one
// unfiltered watch (regcache's stream over github.com/regcache/cache/etcd,
// as users are told to run it, which skips the events of services not
// cached undecoded; the same without the cache's watch filter, and over
// go-micro's plugin, which decode them; the bare plugin watch; and etcd's
// client watch with nothing decoded, the floor of any one-stream client),
// and with one watch per cached service (the etcd
// plugin's WatchService, multiplexed by the etcd client on one gRPC
// stream). Each client is a child process behind its own metered proxy:
// bytes and etcd events are counted on the wire, events delivered by the
// watcher's Next in the child, and CPU time is the child's rusage over the
// churn, from which the CPU of an idle etcd client over the same time is
// subtracted. With REGCACHE_IT_CPUPROFILE set to a folder, each child
// writes a CPU profile of the churn there.
//
// The figures go into README.md ("Watch scope"). It takes about a minute,
// so it runs only with REGCACHE_IT_LONG=1, and without -race for the CPU.
func TestWatchScope(t *testing.T) {
	if os.Getenv("REGCACHE_IT_LONG") == "" {
		t.Skip("a measurement of about a minute: run it with REGCACHE_IT_LONG=1")
	}
	if raceEnabled {
		t.Logf("built with -race: the CPU figures are the race detector's, not the client's")
	}
	const (
		services = 1000
		cached   = 10
		churnFor = 15 * time.Second
	)
	// Changes per second to the services not cached: a steady rollout,
	// and a busy one. The cost of a stream is partly per event and
	// partly per wake-up of an idle process, so it is measured at both.
	rates := []int{50, 200}
	s := startEtcd(t)
	names := serviceNames("it.scope", services)
	writer := newEtcdRegistry(t, s, 5*time.Second)
	for _, n := range names {
		if err := writer.Register(realisticService(n, 0), registry.RegisterTTL(10*time.Minute)); err != nil {
			t.Fatalf("register %s: %v", n, err)
		}
	}
	size := len(mustJSON(t, realisticService(names[0], 0)))

	type client struct {
		name, mode string
		registry   string // childConfig.Registry
		names      []string
		proc       *child
		meter      *grpcMeter
		setup      childReport
		setupMeter meterSnapshot
	}
	clients := []*client{
		{name: "idle etcd client", mode: "idle"},
		{name: "regcache (one stream)", mode: "regcache", registry: "lossless", names: names[:cached]},
		{name: "regcache, one watch", mode: "regcache-prefix", registry: "lossless", names: names[:cached]},
		{name: "regcache, one watch, no filter", mode: "regcache-unfiltered", registry: "lossless", names: names[:cached]},
		{name: "regcache on the plugin", mode: "regcache", names: names[:cached]},
		{name: "regcache, a watch each", mode: "regcache-perservice", registry: "lossless", names: names[:cached]},
		{name: "one unfiltered watch", mode: "stream", names: names[:cached]},
		{name: "bare etcd watch", mode: "etcdwatch", names: names[:cached]},
		{name: "10 per-service watches", mode: "perservice", names: names[:cached]},
		{name: "1000 per-service watches", mode: "perservice", names: names},
	}
	for _, c := range clients {
		p, m := startMeteredProxy(t, s.Addr())
		c.meter = m
		cfg := childConfig{Mode: c.mode, Registry: c.registry, Addr: p.Addr(), Names: c.names, TTL: time.Hour, Timeout: 5 * time.Second}
		if dir := os.Getenv(profileEnv); dir != "" {
			cfg.CPUProfile = filepath.Join(dir, profileName(c.name))
		}
		c.proc = startChild(t, c.name, cfg)
		c.proc.Fill()
	}
	waitFor(t, 30*time.Second, "watches established", func() bool {
		for _, c := range clients {
			m := c.meter.Snapshot()
			if c.mode != "idle" && (m.WatchCreates == 0 || m.WatchMessages < m.WatchCreates) {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second)
	for _, c := range clients {
		c.setup, c.setupMeter = c.proc.Measure(), c.meter.Snapshot()
		t.Logf("%-26s set-up: %d gRPC Watch streams, %d watch creates; %d goroutines and %.0f KB of live heap more than before the client",
			c.name, c.setupMeter.Calls["Watch/Watch"], c.setupMeter.WatchCreates,
			c.setup.GoroutinesAfter-c.setup.GoroutinesBefore, (float64(c.setup.HeapAllocAfter)-float64(c.setup.HeapAllocBefore))/1024)
	}
	for _, c := range clients {
		if c.mode == "perservice" && len(c.names) == cached {
			if n := c.setupMeter.Calls["Watch/Watch"]; n != 1 {
				t.Errorf("%s opened %d gRPC Watch streams, want 1", c.name, n)
			}
		}
	}
	t.Logf("%d services registered (%d bytes of JSON each), %d of them cached", services, size, cached)

	for _, c := range clients {
		c.proc.Profile()
	}
	version := 0
	for _, rate := range rates {
		at := make([]childReport, len(clients))
		meterAt := make([]meterSnapshot, len(clients))
		for i, c := range clients {
			at[i], meterAt[i] = c.proc.Report(), c.meter.Snapshot()
		}
		// Churn: services not cached are registered again with new
		// metadata, rate a second, each an update event.
		start := time.Now()
		changes := churn(t, writer, names[cached:], rate, churnFor, &version)
		time.Sleep(time.Second) // the last events reach the clients
		elapsed := time.Since(start)
		perMin := float64(time.Minute) / float64(elapsed)
		t.Logf("%d changes to the other services in %v (%.0f a minute); per minute:", changes, elapsed.Round(time.Millisecond), float64(changes)*perMin)
		t.Logf("  %-26s %11s %19s %15s %10s %11s", "client", "etcd events", "delivered (cached)", "bytes from etcd", "CPU", "above idle")
		var idle time.Duration
		for i, c := range clients {
			r := c.proc.Report()
			m := c.meter.Snapshot().Sub(meterAt[i])
			cpu := r.CPU - at[i].CPU
			if c.mode == "idle" {
				idle = cpu
			}
			t.Logf("  %-26s %11.0f %10.0f (%5.0f) %15.0f %10v %11v",
				c.name, float64(m.WatchEvents)*perMin, float64(r.EventsAll-at[i].EventsAll)*perMin, float64(r.Events-at[i].Events)*perMin,
				float64(m.Down)*perMin, minutes(cpu, perMin), minutes(cpu-idle, perMin))
			if len(m.Errors) > 0 {
				t.Errorf("%s: the meter could not read some frames: %v", c.name, m.Errors)
			}
			// What the decision rests on: the unfiltered stream
			// receives every change, the per-service watches on
			// unchanged services none.
			switch {
			case (c.registry == "" && c.mode == "regcache" || c.mode == "regcache-prefix" || c.mode == "regcache-unfiltered") && m.WatchEvents < changes*9/10:
				t.Errorf("%s received %d etcd events for %d changes", c.name, m.WatchEvents, changes)
			case (c.registry == "lossless" && c.mode == "regcache" || c.mode == "perservice" || c.mode == "regcache-perservice") && len(c.names) == cached && m.WatchEvents != 0:
				t.Errorf("%s on unchanged services received %d events", c.name, m.WatchEvents)
			}
		}
	}
}

// churn registers services at random from names again with new metadata,
// rate a second for d, from 4 goroutines, and returns how many it did.
func churn(t *testing.T, r registry.Registry, names []string, rate int, d time.Duration, version *int) int {
	t.Helper()
	const writers = 4
	type change struct {
		name    string
		version int
	}
	work := make(chan change, rate)
	errs := make(chan error, writers)
	done := make(chan struct{})
	for w := 0; w < writers; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for c := range work {
				if err := r.Register(realisticService(c.name, c.version), registry.RegisterTTL(10*time.Minute)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	n := 0
	for start := time.Now(); time.Since(start) < d; n++ {
		<-tick.C
		*version++
		work <- change{names[rand.IntN(len(names))], *version}
	}
	close(work)
	for w := 0; w < writers; w++ {
		<-done
	}
	select {
	case err := <-errs:
		t.Fatalf("churn: %v", err)
	default:
	}
	return n
}

// minutes scales d, measured over a time that perMin minutes make one
// minute of, to one minute.
func minutes(d time.Duration, perMin float64) time.Duration {
	return time.Duration(float64(d) * perMin).Round(time.Millisecond)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
