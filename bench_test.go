package cache_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	gocache "go-micro.dev/v4/registry/cache"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// Every benchmark here runs regcache and go-micro's registry/cache (or its
// default selector) side by side, as sub-benchmarks that differ only in their
// last element, impl=regcache or impl=gomicro, so that internal/benchtab can
// pair them up. All the metrics reported are lower-is-better.

// benchNodeCounts are the service sizes of the hit-path benchmarks.
var benchNodeCounts = []int{1, 10, 100}

// benchLogger discards log lines, so that the storms do not flood the
// benchmark output. go-micro's own logger cannot: it prints to stdout
// whatever its Out option says.
var benchLogger logger.Logger = benchQuiet{}

type benchQuiet struct{}

func (benchQuiet) Init(...logger.Option) error                   { return nil }
func (benchQuiet) Options() logger.Options                       { return logger.Options{} }
func (q benchQuiet) Fields(map[string]interface{}) logger.Logger { return q }
func (benchQuiet) Log(logger.Level, ...interface{})              {}
func (benchQuiet) Logf(logger.Level, string, ...interface{})     {}
func (benchQuiet) String() string                                { return "quiet" }

// benchImpl builds one of the two caches under comparison. retry is regcache's
// MinimumRetryInterval; go-micro's cache has no such thing.
type benchImpl struct {
	name string
	new  func(r registry.Registry, ttl, retry time.Duration) gocache.Cache
}

var benchImpls = []benchImpl{
	{"regcache", func(r registry.Registry, ttl, retry time.Duration) gocache.Cache {
		return cache.New(r, cache.WithTTL(ttl), cache.WithMinimumRetryInterval(retry), cache.WithLogger(benchLogger))
	}},
	{"gomicro", func(r registry.Registry, ttl, _ time.Duration) gocache.Cache {
		return gocache.New(r, gocache.WithTTL(ttl), gocache.WithLogger(benchLogger))
	}},
}

// benchService returns a service shaped like one a go-micro server
// registers: each node carries the five metadata keys that go-micro's server
// sets, and the service has three endpoints with request and response types.
func benchService(name string, nodes int) *registry.Service {
	s := &registry.Service{Name: name, Version: "1.0.0", Metadata: map[string]string{"team": "bench"}}
	for i := 0; i < 3; i++ {
		s.Endpoints = append(s.Endpoints, &registry.Endpoint{
			Name: fmt.Sprintf("Handler.Method%d", i),
			Request: &registry.Value{Name: "Request", Type: "Request", Values: []*registry.Value{
				{Name: "id", Type: "string"}, {Name: "count", Type: "int64"},
			}},
			Response: &registry.Value{Name: "Response", Type: "Response", Values: []*registry.Value{
				{Name: "msg", Type: "string"},
			}},
			Metadata: map[string]string{"stream": "false"},
		})
	}
	for i := 0; i < nodes; i++ {
		s.Nodes = append(s.Nodes, &registry.Node{
			Id:      fmt.Sprintf("%s-%08x", name, i),
			Address: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250+1),
			Metadata: map[string]string{
				"broker": "http", "protocol": "mucp", "registry": "etcd",
				"server": "mucp", "transport": "http",
			},
		})
	}
	return s
}

// Modes of benchReg.GetService.
const (
	benchOK   int32 = iota // answer after delay
	benchFail              // fail at once, as a registry that refuses connections
	benchHang              // block for hang, then fail, as a registry that times out
)

var errBenchRegistry = errors.New("bench registry: connection refused")

// benchReg is a fake registry.Registry. GetService answers from a fixed set of
// services after an optional delay, counts its calls, and can be switched to
// fail or to hang. Each answer is a fresh deep copy, as from a real registry
// that decodes JSON, so that nothing a cache keeps is shared with it. Watch
// streams deliver what is sent on events and end when stopped.
//
// It is kept apart from the tests' one fake registry (internal/fakereg)
// because that one would change what is measured here: it takes a mutex
// and records every call (its start, and per service its count and gaps)
// on the call path, and its streams take a lock and make a channel for
// each event, so its lock and its allocations would count in the
// benchmarks (go-micro's cache, measured in the same run, calls the
// registry far more often than regcache does) and in the one test that
// measures the CPU time of applying events as they stream in
// (faults_test.go). benchReg counts with atomics, and its streams are one
// bare channel.
type benchReg struct {
	delay time.Duration // latency of every GetService; set before use
	hang  time.Duration // how long a GetService blocks in benchHang mode
	// shared makes GetService return its own objects instead of copies,
	// like a registry that hands out memory it may change later.
	shared bool

	mode    atomic.Int32
	calls   atomic.Int64 // GetService calls
	watches atomic.Int64 // Watch calls
	events  chan *registry.Result

	mu   sync.Mutex
	svcs map[string][]*registry.Service
}

func newBenchReg(svcs ...*registry.Service) *benchReg {
	r := &benchReg{events: make(chan *registry.Result), svcs: map[string][]*registry.Service{}}
	for _, s := range svcs {
		r.put(s)
	}
	return r
}

// put adds s, or replaces the version of the same name. The registry keeps
// s itself, not a copy.
func (r *benchReg) put(s *registry.Service) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.svcs[s.Name]
	for i, old := range cur {
		if old.Version == s.Version {
			cur[i] = s
			return
		}
	}
	r.svcs[s.Name] = append(cur, s)
}

func (r *benchReg) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	r.calls.Add(1)
	var o registry.GetOptions
	for _, opt := range opts {
		opt(&o)
	}
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	switch r.mode.Load() {
	case benchFail:
		return nil, errBenchRegistry
	case benchHang:
		if !benchWait(ctx, r.hang) {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("bench registry: %w", context.DeadlineExceeded)
	}
	if r.delay > 0 && !benchWait(ctx, r.delay) {
		return nil, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.svcs[name]
	if len(cur) == 0 {
		return nil, registry.ErrNotFound
	}
	out := make([]*registry.Service, len(cur))
	for i, s := range cur {
		out[i] = s
		if !r.shared {
			out[i] = benchCopy(s)
		}
	}
	return out, nil
}

// benchWait waits for d or for ctx, and reports whether d passed.
func benchWait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *benchReg) Watch(...registry.WatchOption) (registry.Watcher, error) {
	r.watches.Add(1)
	return &benchWatcher{events: r.events, stop: make(chan struct{})}, nil
}

func (r *benchReg) Init(...registry.Option) error                                { return nil }
func (r *benchReg) Options() registry.Options                                    { return registry.Options{} }
func (r *benchReg) Register(*registry.Service, ...registry.RegisterOption) error { return nil }
func (r *benchReg) Deregister(*registry.Service, ...registry.DeregisterOption) error {
	return nil
}
func (r *benchReg) ListServices(...registry.ListOption) ([]*registry.Service, error) {
	return nil, nil
}
func (r *benchReg) String() string { return "bench" }

type benchWatcher struct {
	events <-chan *registry.Result
	stop   chan struct{}
	once   sync.Once
}

func (w *benchWatcher) Next() (*registry.Result, error) {
	select {
	case ev := <-w.events:
		return ev, nil
	case <-w.stop:
		return nil, registry.ErrWatcherStopped
	}
}

// benchBarrier returns once the cache watching r has applied every event
// sent before it: it sends an event for a service that nobody caches, which
// the watcher receives only after it has applied the previous one.
func benchBarrier(r *benchReg) {
	r.events <- &registry.Result{Action: "update", Service: &registry.Service{Name: "regcache.barrier"}}
}

func (w *benchWatcher) Stop() { w.once.Do(func() { close(w.stop) }) }

// benchCopy deep-copies a service.
func benchCopy(s *registry.Service) *registry.Service {
	c := *s
	c.Metadata = benchCopyMap(s.Metadata)
	c.Endpoints = nil
	for _, e := range s.Endpoints {
		ce := *e
		ce.Request = benchCopyValue(e.Request)
		ce.Response = benchCopyValue(e.Response)
		ce.Metadata = benchCopyMap(e.Metadata)
		c.Endpoints = append(c.Endpoints, &ce)
	}
	c.Nodes = nil
	for _, n := range s.Nodes {
		cn := *n
		cn.Metadata = benchCopyMap(n.Metadata)
		c.Nodes = append(c.Nodes, &cn)
	}
	return &c
}

func benchCopyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func benchCopyValue(v *registry.Value) *registry.Value {
	if v == nil {
		return nil
	}
	c := *v
	c.Values = nil
	for _, sub := range v.Values {
		c.Values = append(c.Values, benchCopyValue(sub))
	}
	return &c
}

// benchWarm fills c with svc, failing the benchmark if it cannot.
func benchWarm(b *testing.B, c registry.Registry, svc string) {
	b.Helper()
	if svcs, err := c.GetService(svc); err != nil || len(svcs) == 0 {
		b.Fatalf("warming %s: %v", svc, err)
	}
}

// benchEachSize runs fn for every node count and implementation, as
// name/nodes=N/impl=X.
func benchEachSize(b *testing.B, fn func(b *testing.B, nodes int, impl benchImpl)) {
	for _, n := range benchNodeCounts {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for _, impl := range benchImpls {
				b.Run("impl="+impl.name, func(b *testing.B) { fn(b, n, impl) })
			}
		})
	}
}

// BenchmarkGetService is a fresh hit through GetService, which copies.
func BenchmarkGetService(b *testing.B) {
	benchEachSize(b, func(b *testing.B, nodes int, impl benchImpl) {
		c := impl.new(newBenchReg(benchService("svc", nodes)), time.Hour, 0)
		defer c.Stop()
		benchWarm(b, c, "svc")
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if svcs, err := c.GetService("svc"); err != nil || len(svcs[0].Nodes) != nodes {
				b.Fatal(svcs, err)
			}
		}
	})
}

// BenchmarkLookup is a fresh hit through regcache's Lookup, which does not
// copy. go-micro's cache has no such call: its row is its GetService, the
// only way it can be read.
func BenchmarkLookup(b *testing.B) {
	benchEachSize(b, func(b *testing.B, nodes int, impl benchImpl) {
		c := impl.new(newBenchReg(benchService("svc", nodes)), time.Hour, 0)
		defer c.Stop()
		benchWarm(b, c, "svc")
		b.ReportAllocs()
		b.ResetTimer()
		if rc, ok := c.(cache.Cache); ok {
			for i := 0; i < b.N; i++ {
				if svcs, err := rc.Lookup("svc"); err != nil || len(svcs[0].Nodes) != nodes {
					b.Fatal(svcs, err)
				}
			}
			return
		}
		for i := 0; i < b.N; i++ {
			if svcs, err := c.GetService("svc"); err != nil || len(svcs[0].Nodes) != nodes {
				b.Fatal(svcs, err)
			}
		}
	})
}

// benchSelector builds regcache's selector over a regcache cache, or
// go-micro's default selector, which holds a go-micro cache of its own, over
// the registry. stop releases it.
func benchSelector(impl benchImpl, r registry.Registry) (sel selector.Selector, stop func()) {
	if impl.name == "gomicro" {
		s := selector.NewSelector(selector.Registry(r))
		return s, func() { _ = s.Close() }
	}
	c := impl.new(r, time.Hour, 0).(cache.Cache)
	return cache.NewSelector(c), c.Stop
}

// BenchmarkSelect is what a go-micro client does per call on a fresh hit:
// Select, then Next once.
func BenchmarkSelect(b *testing.B) {
	benchEachSize(b, func(b *testing.B, nodes int, impl benchImpl) {
		sel, stop := benchSelector(impl, newBenchReg(benchService("svc", nodes)))
		defer stop()
		if _, err := sel.Select("svc"); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			next, err := sel.Select("svc")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := next(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRPC is one whole go-micro RPC, client to server over loopback
// HTTP, with regcache's selector or go-micro's default one: the cost of
// selection set against the cost of the call it serves.
func BenchmarkRPC(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run("nodes=1/impl="+impl.name, func(b *testing.B) {
			reg := selServer(b)
			sel, stop := benchSelector(impl, reg)
			defer stop()
			cl := selClient(reg, sel)
			if _, err := selCall(cl); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := selCall(cl); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParallel is fresh hits from every P at once, at 10 nodes.
func BenchmarkParallel(b *testing.B) {
	const nodes = 10
	ops := []struct {
		name string
		run  func(b *testing.B, impl benchImpl)
	}{
		{"GetService", func(b *testing.B, impl benchImpl) {
			c := impl.new(newBenchReg(benchService("svc", nodes)), time.Hour, 0)
			defer c.Stop()
			benchWarm(b, c, "svc")
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.GetService("svc"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}},
		{"Lookup", func(b *testing.B, impl benchImpl) {
			c := impl.new(newBenchReg(benchService("svc", nodes)), time.Hour, 0)
			defer c.Stop()
			benchWarm(b, c, "svc")
			get := c.GetService
			if rc, ok := c.(cache.Cache); ok {
				get = func(name string, _ ...registry.GetOption) ([]*registry.Service, error) {
					return rc.Lookup(name)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := get("svc"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}},
		{"Select", func(b *testing.B, impl benchImpl) {
			sel, stop := benchSelector(impl, newBenchReg(benchService("svc", nodes)))
			defer stop()
			if _, err := sel.Select("svc"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					next, err := sel.Select("svc")
					if err == nil {
						_, err = next()
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		}},
	}
	for _, op := range ops {
		b.Run(fmt.Sprintf("op=%s/nodes=%d", op.name, nodes), func(b *testing.B) {
			for _, impl := range benchImpls {
				b.Run("impl="+impl.name, func(b *testing.B) { op.run(b, impl) })
			}
		})
	}
}

// benchStorm starts callers goroutines that call GetService(svc) at the same
// instant, and returns each one's latency and the number of errors.
func benchStorm(c registry.Registry, svc string, callers int) (lat []time.Duration, errs int) {
	lat = make([]time.Duration, callers)
	var failed atomic.Int64
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(callers)
	done.Add(callers)
	for i := range lat {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			t0 := time.Now()
			if _, err := c.GetService(svc); err != nil {
				failed.Add(1)
			}
			lat[i] = time.Since(t0)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return lat, int(failed.Load())
}

// benchPercentile returns the p-th percentile (0 < p ≤ 100) of lat, sorting
// it.
func benchPercentile(lat []time.Duration, p float64) time.Duration {
	slices.Sort(lat)
	i := int(float64(len(lat))*p/100+0.5) - 1
	return lat[min(max(i, 0), len(lat)-1)]
}

// reportLatency reports the 50th and 99th percentiles of lat in
// microseconds.
func reportLatency(b *testing.B, lat []time.Duration) {
	b.ReportMetric(float64(benchPercentile(lat, 50))/1e3, "p50-us")
	b.ReportMetric(float64(benchPercentile(lat, 99))/1e3, "p99-us")
}

// BenchmarkColdStorm is 1000 goroutines asking for the same uncached service
// at once, against a registry that takes 50 ms to answer. Each iteration
// uses a new, empty cache. regcalls is the registry calls per storm, errors
// the callers per storm that got an error.
func BenchmarkColdStorm(b *testing.B) {
	const callers = 1000
	for _, impl := range benchImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			r := newBenchReg(benchService("svc", 10))
			r.delay = 50 * time.Millisecond
			var lat []time.Duration
			var errs int
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c := impl.new(r, time.Minute, cache.DefaultMinimumRetryInterval)
				l, e := benchStorm(c, "svc", callers)
				lat, errs = append(lat, l...), errs+e
				c.Stop()
			}
			b.StopTimer()
			b.ReportMetric(float64(r.calls.Load())/float64(b.N), "regcalls/op")
			b.ReportMetric(float64(errs)/float64(b.N), "errors/op")
			reportLatency(b, lat)
		})
	}
}

// BenchmarkExpiryStorm is 1000 goroutines asking at once for a service whose
// cached data has expired, while the registry hangs for 200 ms and then
// fails, as one does during an outage that ends in client timeouts. The same
// cache serves every iteration, so from the second storm on regcache's
// throttle is closed as well.
func BenchmarkExpiryStorm(b *testing.B) {
	const callers = 1000
	for _, impl := range benchImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			r := newBenchReg(benchService("svc", 10))
			r.hang = 200 * time.Millisecond
			c := impl.new(r, time.Millisecond, cache.DefaultMinimumRetryInterval)
			defer c.Stop()
			benchWarm(b, c, "svc")
			time.Sleep(2 * time.Millisecond) // let the data expire
			r.mode.Store(benchHang)
			calls0 := r.calls.Load()
			var lat []time.Duration
			var errs int
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l, e := benchStorm(c, "svc", callers)
				lat, errs = append(lat, l...), errs+e
			}
			b.StopTimer()
			b.ReportMetric(float64(r.calls.Load()-calls0)/float64(b.N), "regcalls/op")
			b.ReportMetric(float64(errs)/float64(b.N), "errors/op")
			reportLatency(b, lat)
		})
	}
}

// BenchmarkOutage is callers on every P reading 10 cached services, whose
// data has expired, from a registry that fails at once. regcalls/s/svc is
// the load the cache puts on a registry that is down. regcache runs with a
// MinimumRetryInterval of 100 ms here, so that its steady rate (one call per
// interval per service, 10/s) shows within a short run; the default of 5 s
// makes it 0.2/s.
func BenchmarkOutage(b *testing.B) {
	const services = 10
	for _, impl := range benchImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			r := newBenchReg()
			names := make([]string, services)
			for i := range names {
				names[i] = fmt.Sprintf("svc%d", i)
				r.put(benchService(names[i], 10))
			}
			c := impl.new(r, time.Millisecond, 100*time.Millisecond)
			defer c.Stop()
			for _, name := range names {
				benchWarm(b, c, name)
			}
			time.Sleep(2 * time.Millisecond) // let the data expire
			r.mode.Store(benchFail)
			calls0 := r.calls.Load()
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.GetService(names[next.Add(1)%services]); err != nil {
						b.Error(err) // stale data must win over the outage
						return
					}
				}
			})
			elapsed := time.Since(start)
			b.StopTimer()
			calls := float64(r.calls.Load() - calls0)
			b.ReportMetric(calls/elapsed.Seconds()/services, "regcalls/s/svc")
			b.ReportMetric(calls/float64(b.N), "regcalls/op")
		})
	}
}

// BenchmarkMemory is the memory a cache holds per cached service of 100
// nodes: heap and goroutine stacks, measured after a GC with 100 services
// cached, and the goroutines it keeps. The registry's own copy is not
// counted.
func BenchmarkMemory(b *testing.B) {
	const services, nodes = 100, 100
	for _, impl := range benchImpls {
		b.Run(fmt.Sprintf("nodes=%d/impl=%s", nodes, impl.name), func(b *testing.B) {
			r := newBenchReg()
			names := make([]string, services)
			for i := range names {
				names[i] = fmt.Sprintf("svc%d", i)
				r.put(benchService(names[i], nodes))
			}
			var bytes, goroutines float64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				g0 := runtime.NumGoroutine()
				m0 := benchMem()
				c := impl.new(r, time.Hour, 0)
				for _, name := range names {
					benchWarm(b, c, name)
				}
				bytes += float64(benchMem() - m0)
				goroutines += float64(runtime.NumGoroutine() - g0)
				runtime.KeepAlive(c)
				c.Stop()
				b.StopTimer()
				benchSettle(g0)
				b.StartTimer()
			}
			b.ReportMetric(bytes/float64(b.N)/services, "B/svc")
			b.ReportMetric(goroutines/float64(b.N)/services, "goroutines/svc")
		})
	}
}

// benchMem is the live heap plus goroutine stacks, after a GC.
func benchMem() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}

// benchSettle waits, for at most a second, until no more than g goroutines
// are left: go-micro's cache does not wait for its goroutines in Stop, and
// they must not be counted against the next measurement.
func benchSettle(g int) {
	for i := 0; i < 1000 && runtime.NumGoroutine() > g; i++ {
		time.Sleep(time.Millisecond)
	}
}
