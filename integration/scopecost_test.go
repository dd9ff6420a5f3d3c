package integration

import (
	"os"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
)

// TestScopedStreamCost measures the scoped stream of
// github.com/regcache/cache/etcd, which drives etcd's gRPC watch protocol
// itself, against the same stream made of etcd's client's watches (one
// clientv3.Watcher, a watch per prefix held), for a client that holds
// 1 000 services: the time from its first lookup until etcd has created
// every watch (counted on the wire), its goroutines and live heap once it
// holds them, and the events lost of an update of each. Each client is a
// child process behind a metered proxy. The figures are decision 31's
// (docs/decisions.md); with TestWatchScope's CPU on a busy etcd. It runs
// only with REGCACHE_IT_LONG=1, and without -race for the figures.
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
	rounds := 3
	t.Logf("%-24s %12s %12s %11s %13s %12s", "stream", "lookups", "all watched", "goroutines", "live heap KB", "events lost")
	for round := 0; round < rounds; round++ {
		for _, v := range []struct{ name, registry string }{
			{"raw gRPC protocol", "lossless"},
			{"clientv3 watches", "lossless-clientv3"},
		} {
			p, m := startMeteredProxy(t, s.Addr())
			c := startChild(t, v.name, childConfig{Mode: "regcache", Registry: v.registry, Addr: p.Addr(), Names: names, TTL: time.Hour, Timeout: 5 * time.Second})
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
			t.Logf("%-24s %12v %12v %11d %13.0f %12d", v.name, filled.Fill.Round(time.Millisecond), held.Round(time.Millisecond),
				r.GoroutinesAfter-r.GoroutinesBefore, (float64(r.HeapAllocAfter)-float64(r.HeapAllocBefore))/1024, lost)
			c.close()
		}
	}
}
