package integration

import (
	"os"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
)

// TestScopedStreamCost measures the scoped stream of
// github.com/regcache/cache/etcd, which drives etcd's gRPC watch protocol
// itself, for a client that holds 1 000 services: the time from its first
// lookup until etcd has created every watch (counted on the wire), its
// goroutines and live heap once it holds them, and the events lost of an
// update of each. The client is a child process behind a metered proxy,
// run three times. The figures are D41's (docs/decisions.md),
// which compares them with the same stream made of etcd's client's
// watches, measured by this test at the commit that decision names. It
// runs only with REGCACHE_IT_LONG=1, and without -race for the figures.
func TestScopedStreamCost(t *testing.T) {
	if os.Getenv("REGCACHE_IT_LONG") == "" {
		t.Skip("a measurement: run it with REGCACHE_IT_LONG=1")
	}
	const services = 1000
	s := startEtcd(t)
	names := serviceNames("it.cost", services)
	writer := newEtcdRegistry(t, s, 5*time.Second)
	registerAll := func(version int) {
		t.Helper()
		work := make(chan string)
		done := make(chan error, 8)
		for i := 0; i < 8; i++ {
			go func() {
				var err error
				for n := range work {
					if e := writer.Register(realisticService(n, version), registry.RegisterTTL(10*time.Minute)); e != nil && err == nil {
						err = e
					}
				}
				done <- err
			}()
		}
		for _, n := range names {
			work <- n
		}
		close(work)
		for i := 0; i < 8; i++ {
			if err := <-done; err != nil {
				t.Fatalf("register: %v", err)
			}
		}
	}
	version := 0
	registerAll(version)
	t.Logf("%-6s %12s %12s %11s %13s %12s", "run", "lookups", "all watched", "goroutines", "live heap KB", "events lost")
	for run := 1; run <= 3; run++ {
		p, m := startMeteredProxy(t, s.Addr())
		c := startChild(t, "regcache", childConfig{Mode: "regcache", Registry: "lossless", Addr: p.Addr(), Names: names, TTL: time.Hour, Timeout: 5 * time.Second})
		start := time.Now()
		filled := c.Fill()
		waitFor(t, time.Minute, "every watch created", func() bool {
			ms := m.Snapshot()
			return ms.WatchCreates >= services+1 && ms.WatchMessages >= services+1
		})
		held := time.Since(start)
		r := c.Measure()
		before := c.Report()
		// A new version each time: the plugin writes nothing for a
		// node registered again as it was.
		version++
		registerAll(version)
		lost := services
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			lost = services - int(c.Report().Events-before.Events)
			if lost <= 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		goroutines := r.GoroutinesAfter - r.GoroutinesBefore
		t.Logf("%-6d %12v %12v %11d %13.0f %12d", run, filled.Fill.Round(time.Millisecond), held.Round(time.Millisecond),
			goroutines, (float64(r.HeapAllocAfter)-float64(r.HeapAllocBefore))/1024, lost)
		if lost != 0 {
			t.Errorf("lost %d events of %d", lost, services)
		}
		if goroutines > 20 {
			t.Errorf("%d goroutines for %d services held; the stream's do not grow with them", goroutines, services)
		}
		c.close()
	}
}
