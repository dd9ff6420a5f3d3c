package cache_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
	gocache "go-micro.dev/v4/registry/cache"

	cache "github.com/regcache/cache"
)

// Scale benchmarks: the stale path during an outage, a cold fill of many
// services, and the memory and goroutines a large cache holds. Like the
// rest, each pairs impl=regcache with impl=gomicro, and every metric is
// lower-is-better.

// benchRead is how a benchmark reads a cache: regcache's Lookup, or
// go-micro's GetService, the only way its cache can be read.
func benchRead(c gocache.Cache) func(string) ([]*registry.Service, error) {
	if rc, ok := c.(cache.Cache); ok {
		return func(name string) ([]*registry.Service, error) { return rc.Lookup(name) }
	}
	return func(name string) ([]*registry.Service, error) { return c.GetService(name) }
}

// staleCache returns a cache holding two services of 10 nodes, svc and
// svc2, whose data has expired, in front of a registry that now fails at
// once. regcache has tried to refresh both, holds the registry to be down
// and waits for its retry windows; go-micro's cache calls the registry on
// every read of expired data and serves it on the error, which is what it
// does in an outage. With fresh set, the data is fresh instead and the
// registry up.
//
// regcache runs with a MinimumRetryInterval of 100 ms, as in
// BenchmarkOutage, so that the windows opened by the first lookups close
// within the setup: with the default of 5 s the first refreshes could only
// fail 5 s after them. While it is down, each service's window opens every
// 100 ms, and the read that finds it open queues the service for the next
// probe, one a second: a handful of reads a second leave the lock-free
// path.
func staleCache(b *testing.B, impl benchImpl, nodes int, fresh bool) gocache.Cache {
	b.Helper()
	r := newBenchReg(benchService("svc", nodes), benchService("svc2", nodes))
	ttl := time.Millisecond
	if fresh {
		ttl = time.Hour
	}
	const retry = 100 * time.Millisecond
	c := impl.new(r, ttl, retry)
	benchWarm(b, c, "svc")
	benchWarm(b, c, "svc2")
	if fresh {
		return c
	}
	r.mode.Store(benchFail)
	time.Sleep(max(2*ttl, retry)) // let the data expire, and the windows close
	rc, ok := c.(cache.Cache)
	if !ok {
		return c
	}
	// Read both until both refreshes have failed and the registry is held
	// to be down: from then on reads find the retry window closed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, name := range []string{"svc", "svc2"} {
			if svcs, err := rc.Lookup(name); err != nil || len(svcs[0].Nodes) != nodes {
				b.Fatal(svcs, err)
			}
		}
		st := rc.Stats()
		rows := rc.Services("", "", 0)
		settled := st.RegistryDown && len(rows) == 2
		for _, s := range rows {
			settled = settled && s.Failures > 0 && !s.Fresh
		}
		if settled {
			return c
		}
		if time.Now().After(deadline) {
			b.Fatalf("regcache did not settle on stale data: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkStale is a read of stale data while the registry is down:
// Lookup (go-micro's row is its GetService) from one goroutine and from
// every P at once, and GetService, which copies, at 10 nodes and at 100.
// op=Lookup/fresh is the same Lookup on fresh data, which the stale one is
// held against.
//
// The parallel row's ns/op is, as always with RunParallel, the wall time
// over all the reads; per-goroutine-ns/op multiplies it by the goroutines,
// which is what each read took as its caller saw it.
func BenchmarkStale(b *testing.B) {
	serial := func(get func(c gocache.Cache) func(string) ([]*registry.Service, error), nodes int, fresh bool) func(*testing.B, benchImpl) {
		return func(b *testing.B, impl benchImpl) {
			c := staleCache(b, impl, nodes, fresh)
			defer c.Stop()
			read := get(c)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if svcs, err := read("svc"); err != nil || len(svcs[0].Nodes) != nodes {
					b.Fatal(svcs, err)
				}
			}
		}
	}
	getService := func(c gocache.Cache) func(string) ([]*registry.Service, error) {
		return func(name string) ([]*registry.Service, error) { return c.GetService(name) }
	}
	ops := []struct {
		name  string
		nodes int
		run   func(*testing.B, benchImpl)
	}{
		{"Lookup", 10, serial(benchRead, 10, false)},
		{"Lookup/parallel", 10, func(b *testing.B, impl benchImpl) {
			c := staleCache(b, impl, 10, false)
			defer c.Stop()
			read := benchRead(c)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if svcs, err := read("svc"); err != nil || len(svcs[0].Nodes) != 10 {
						b.Error(svcs, err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed())*float64(runtime.GOMAXPROCS(0))/float64(b.N), "per-goroutine-ns/op")
		}},
		{"GetService", 10, serial(getService, 10, false)},
		{"GetService", 100, serial(getService, 100, false)},
		{"Lookup/fresh", 10, serial(benchRead, 10, true)},
	}
	for _, op := range ops {
		b.Run(fmt.Sprintf("op=%s/nodes=%d", op.name, op.nodes), func(b *testing.B) {
			for _, impl := range benchImpls {
				b.Run("impl="+impl.name, func(b *testing.B) { op.run(b, impl) })
			}
		})
	}
}

// BenchmarkFill is a cold start at scale: a new cache, and every one of n
// services of 3 nodes looked up once, by GOMAXPROCS×4 goroutines, from a
// registry with no latency. An op is one whole fill: ns/op runs from New
// until the registry has had no call for 20 ms (to the start of that
// quiet), so that background calls the fill sets off are counted;
// served-ns/op ends with the last lookup answered. regcalls/op counts
// GetService calls. cpu-ms/op is the process's CPU time until the cache has
// nothing left to do; for go-micro's cache that is once it has opened its
// watch per service, each after a random wait of up to 100 ms.
//
// regcache also re-validates the services it fetched before its watch
// stream was up (a few dozen of 10 000), but not within their retry
// windows: those calls come MinimumRetryInterval (5 s) later, outside the
// op. The 100 000 row is left out with -short.
func BenchmarkFill(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			if n > 10000 && testing.Short() {
				b.Skip("100 000 services: not with -short")
			}
			base, names := scaleServices(n, 3)
			for _, impl := range benchImpls {
				b.Run("impl="+impl.name, func(b *testing.B) { benchFill(b, impl, base, names) })
			}
		})
	}
}

func benchFill(b *testing.B, impl benchImpl, base *benchReg, names []string) {
	var wall, served, cpu time.Duration
	var calls int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r := newScaleReg(base)
		g0 := runtime.NumGoroutine()
		runtime.GC()
		calls0 := r.calls.Load()
		b.StartTimer()

		cpu0, start := processCPU(), time.Now()
		c := impl.new(r, time.Hour, cache.DefaultMinimumRetryInterval)
		if failed := scaleFill(c, names); failed > 0 {
			b.Fatalf("%d lookups failed", failed)
		}
		served += time.Since(start)
		wall += r.quiet().Sub(start)
		b.StopTimer()
		if impl.name == "gomicro" {
			r.waitWatches(b, int64(len(names)))
		}
		cpu += processCPU() - cpu0
		calls += r.calls.Load() - calls0

		c.Stop()
		scaleSettle(b, g0)
	}
	n := float64(b.N)
	b.ReportMetric(float64(wall)/n, "ns/op")
	b.ReportMetric(float64(served)/n, "served-ns/op")
	b.ReportMetric(float64(calls)/n, "regcalls/op")
	if cpuMeasured {
		b.ReportMetric(float64(cpu)/n/1e6, "cpu-ms/op")
	}
}

// BenchmarkMemoryScale is the memory and goroutines a cache holds with n
// services of 3 nodes cached, after a GC, once it has nothing left to do
// (for go-micro's cache, once its watch per service is open). heap-B/svc is
// the live heap per service, heapinuse-B/svc the heap spans in use per
// service (what the heap holds from the OS, fragmentation included),
// stack-B/svc the goroutine stacks per service, goroutines/op the cache's
// goroutines in all. The registry's own copy is not counted, nor are the
// channels the fake registry feeds go-micro's watches through; ns/op is
// the fill. The 100 000 row is left out with -short.
func BenchmarkMemoryScale(b *testing.B) {
	const nodes = 3
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("nodes=%d/services=%d", nodes, n), func(b *testing.B) {
			if n > 10000 && testing.Short() {
				b.Skip("100 000 services: not with -short")
			}
			base, names := scaleServices(n, nodes)
			for _, impl := range benchImpls {
				b.Run("impl="+impl.name, func(b *testing.B) { benchMemoryScale(b, impl, base, names) })
			}
		})
	}
}

func benchMemoryScale(b *testing.B, impl benchImpl, base *benchReg, names []string) {
	var heap, inuse, stack, goroutines float64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r := newScaleReg(base)
		if impl.name == "gomicro" {
			r.prepareWatches(names)
		}
		g0 := runtime.NumGoroutine()
		m0 := memStats()
		b.StartTimer()

		c := impl.new(r, time.Hour, cache.DefaultMinimumRetryInterval)
		if failed := scaleFill(c, names); failed > 0 {
			b.Fatalf("%d lookups failed", failed)
		}
		r.quiet()
		b.StopTimer()
		if impl.name == "gomicro" {
			r.waitWatches(b, int64(len(names)))
			goroutineSteady()
		}
		m1 := memStats()
		heap += float64(m1.HeapAlloc) - float64(m0.HeapAlloc)
		inuse += float64(m1.HeapInuse) - float64(m0.HeapInuse)
		stack += max(0, float64(m1.StackInuse)-float64(m0.StackInuse)) // stacks freed by the GC can make it negative
		goroutines += float64(runtime.NumGoroutine() - g0)
		runtime.KeepAlive(c)

		c.Stop()
		scaleSettle(b, g0)
	}
	per := float64(b.N) * float64(len(names))
	b.ReportMetric(heap/per, "heap-B/svc")
	b.ReportMetric(inuse/per, "heapinuse-B/svc")
	b.ReportMetric(stack/per, "stack-B/svc")
	b.ReportMetric(goroutines/float64(b.N), "goroutines/op")
}

// memStats returns the memory statistics after a GC.
func memStats() runtime.MemStats {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// goroutineSteady waits until the goroutine count has not changed for
// 20 ms: go-micro's cache starts a second goroutine per service once its
// watch is open.
func goroutineSteady() {
	last, since := -1, time.Now()
	for time.Since(since) < 20*time.Millisecond {
		if g := runtime.NumGoroutine(); g != last {
			last, since = g, time.Now()
		}
		time.Sleep(time.Millisecond)
	}
}
