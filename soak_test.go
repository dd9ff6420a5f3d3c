//go:build soak

package cache_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// The soak test runs a cache in real time, in process, with no network:
// 64 goroutines look up 200 services in go-micro's memory registry (whose
// own events already arrive out of order and are dropped when the watcher
// is slow) behind the fake registry's faults (fakereg.Wrap), while a chaos
// goroutine injects random faults and watch breaks and a churn goroutine
// adds and removes nodes. It checks the invariants continuously, and
// reports at the end.
//
//	make soak DURATION=10m
//	go test -tags soak -race -run '^TestSoak$' -timeout 0 -count=1 -v . -soak.duration=10m
//
// A run takes as long as it is given, so its figures are not in the
// documents, which show figures of runs that are made again when they
// change (CONTRIBUTING.md); docs/reliability.md says what the run checks
// and points here. The last 10-minute run recorded, on commit 007090f
// (2 cores, race detector on), before the core of internal/core, summed
// up from its report:
//
//	lookups          117 305 231 (195 000 a second); 0 errors for services with data
//	registry calls   2 936 (5 a second); at most 15 for one service, against a bound of
//	                 2 403 (1 + elapsed / retry interval); shortest gap 260.5 ms for a 250 ms interval
//	watch            61 Watch calls, 37 streams (36 reconnects), never two open at once
//	faults injected  1 585 per-service GetService faults, 104 registry-wide outages,
//	                 121 event faults, 30 watch faults
//	convergence      every service current 542 ms after the faults ended
//	goroutines       at most 13 owned by the cache (bound 203); 0 running cache code after Stop
//	heap             4.8 MB live after the warm-up, at most 6.5 MB
//	violations       none
//
// An earlier run of the same command, before the registry-wide state, made
// 98 815 registry calls; with it, the registry saw about 5 a second under
// the same chaos. Record a new run here, with its commit, in place of this
// one.

var soakDuration = flag.Duration("soak.duration", time.Minute, "how long TestSoak runs")

const (
	soakServices = 200
	soakReaders  = 64
	soakTTL      = 2 * time.Second
	soakInterval = 250 * time.Millisecond
	// soakAnchors are the nodes every service keeps throughout: no fault
	// ever makes a service truly absent, so once a lookup of it has
	// succeeded, every later one must.
	soakAnchors = 2
	// soakHeapSlack is how far the live heap may grow over its level
	// after the warm-up.
	soakHeapSlack = 64 << 20
)

var errSoakDown = errors.New("soak: registry unavailable")

// soakLogger counts the cache's log lines.
type soakLogger struct {
	benchQuiet
	lines *atomic.Int64
}

func (l soakLogger) Logf(logger.Level, string, ...interface{}) { l.lines.Add(1) }
func (l soakLogger) Log(logger.Level, ...interface{})          { l.lines.Add(1) }

// soakViolations records invariant violations as they happen.
type soakViolations struct {
	t     *testing.T
	mu    sync.Mutex
	count map[string]int
}

func (v *soakViolations) add(kind, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.count[kind]++
	if v.count[kind] <= 3 {
		v.t.Errorf("invariant %q violated: "+format, append([]any{kind}, args...)...)
	}
}

func (v *soakViolations) String() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.count) == 0 {
		return "none"
	}
	var parts []string
	for k, n := range v.count {
		parts = append(parts, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func soakName(i int) string { return fmt.Sprintf("soak-%03d", i) }

func soakNode(name, id string) *registry.Service {
	return &registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{
		{Id: id, Address: id + ".local:8080", Metadata: map[string]string{"protocol": "mucp"}},
	}}
}

// soakGetFault returns a random GetService fault, or none.
func soakGetFault() (fakereg.Fault, string) {
	switch rand.IntN(9) {
	case 0:
		return fakereg.Fault{Latency: time.Duration(rand.Int64N(int64(2 * soakInterval)))}, "latency"
	case 1:
		return fakereg.Fault{Latency: soakTTL + time.Duration(rand.Int64N(int64(soakTTL)))}, "latency beyond the TTL"
	case 2:
		return fakereg.Fault{Err: errSoakDown}, "error"
	case 3:
		return fakereg.Fault{Panic: "soak: registry panic"}, "panic"
	case 4:
		return fakereg.Fault{Hang: true}, "hang"
	case 5:
		return fakereg.Fault{Hang: true, IgnoreCtx: true}, "hang ignoring the context"
	case 6:
		return fakereg.Fault{NilEntries: true}, "nil entries"
	}
	return fakereg.Fault{}, ""
}

// soakStreamFault returns a random fault of Watch or of the stream: each
// one ends the stream, or leaves it silently dead (Next hang).
func soakStreamFault() (fakereg.WatchFault, string) {
	switch rand.IntN(9) {
	case 0:
		return fakereg.WatchFault{BreakErr: errSoakDown}, "stream break"
	case 1:
		return fakereg.WatchFault{BreakErr: errSoakDown, BreakAfter: 1 + rand.IntN(20)}, "stream break after events"
	case 2:
		return fakereg.WatchFault{NextPanic: "soak: Next panic"}, "Next panic"
	case 3:
		return fakereg.WatchFault{NextHang: true}, "Next hang"
	case 4:
		return fakereg.WatchFault{WatchErr: errSoakDown, BreakErr: errSoakDown}, "Watch error"
	case 5:
		return fakereg.WatchFault{WatchPanic: "soak: Watch panic", BreakErr: errSoakDown}, "Watch panic"
	case 6:
		return fakereg.WatchFault{WatchNil: true, BreakErr: errSoakDown}, "Watch nil"
	case 7:
		return fakereg.WatchFault{WatchHang: true, BreakErr: errSoakDown}, "Watch hang"
	}
	return fakereg.WatchFault{BreakErr: errSoakDown, BreakAfter: 1, StopPanic: "soak: Stop panic"}, "Stop panic"
}

// soakEventFault returns a random event fault; the stream stays up.
func soakEventFault() (fakereg.WatchFault, string) {
	switch rand.IntN(4) {
	case 0:
		return fakereg.WatchFault{Duplicate: 1 + rand.IntN(3)}, "duplicate events"
	case 1:
		return fakereg.WatchFault{Reorder: 2 + rand.IntN(3)}, "out-of-order events"
	case 2:
		return fakereg.WatchFault{Stale: 1 + rand.IntN(5)}, "stale events"
	}
	return fakereg.WatchFault{NilEvents: true}, "nil events"
}

func TestSoak(t *testing.T) {
	duration := *soakDuration
	start := time.Now()
	v := &soakViolations{t: t, count: map[string]int{}}
	baseGoroutines := runtime.NumGoroutine()

	mem := registry.NewMemoryRegistry()
	names := make([]string, soakServices)
	for i := range names {
		names[i] = soakName(i)
		for a := 0; a < soakAnchors; a++ {
			if err := mem.Register(soakNode(names[i], fmt.Sprintf("%s-anchor-%d", names[i], a))); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := fakereg.Wrap(mem)
	f.SetBound(soakInterval)
	var logLines, observed atomic.Int64
	c := cache.New(f,
		cache.WithTTL(soakTTL),
		cache.WithMinimumRetryInterval(soakInterval),
		cache.WithMaximumRetryInterval(4*soakInterval),
		cache.WithTTLJitter(0.2),
		cache.WithRefreshAhead(0.2),
		cache.WithLogger(soakLogger{lines: &logLines}),
		cache.WithObserver(func(cache.Event) { observed.Add(1) }),
	)
	sel := cache.NewSelector(c)

	var (
		done       = make(chan struct{})
		wg         sync.WaitGroup
		hasData    [soakServices]atomic.Bool
		lookups    atomic.Int64
		coldErrs   atomic.Int64
		injected   sync.Map // fault name -> *atomic.Int64
		maxOwned   atomic.Int64
		maxTotal   atomic.Int64
		heapBase   atomic.Uint64
		heapMax    atomic.Uint64
		churnCount atomic.Int64
		ghosts     atomic.Int64
	)
	count := func(kind string) {
		n, _ := injected.LoadOrStore(kind, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	every := func(period time.Duration, fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					fn()
				}
			}
		}()
	}

	// Readers: Lookup, GetService and Select, on random services.
	for r := 0; r < soakReaders; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				i := rand.IntN(soakServices)
				name := names[i]
				had := hasData[i].Load()
				var svcs []*registry.Service
				var err error
				switch op := rand.IntN(10); {
				case op < 6:
					svcs, err = c.Lookup(name)
				case op < 9:
					svcs, err = c.GetService(name)
				default:
					var next selector.Next
					if next, err = sel.Select(name); err == nil {
						var node *registry.Node
						if node, err = next(); err == nil && node == nil {
							v.add("selected node", "Select(%q) gave a nil node", name)
						}
					}
				}
				lookups.Add(1)
				switch {
				case err != nil && had:
					v.add("no error with data", "lookup of %q, which had data, failed after %v: %v",
						name, time.Since(start).Round(time.Millisecond), err)
				case err != nil:
					coldErrs.Add(1)
				default:
					hasData[i].Store(true)
					if svcs != nil {
						ids := nodeSetOf(svcs)
						for a := 0; a < soakAnchors; a++ {
							if _, ok := slices.BinarySearch(ids, fmt.Sprintf("%s-anchor-%d", name, a)); !ok {
								v.add("anchors kept", "lookup of %q lost anchor %d: %v", name, a, ids)
							}
						}
					}
				}
			}
		}()
	}

	// A gateway passes on lookups of names that were never registered,
	// each one new, up to 500 a second: a scan, or typos. None may
	// succeed, and they must not grow the cache: an entry without data is
	// kept only while its throttle window is open.
	every(2*time.Millisecond, func() {
		name := fmt.Sprintf("ghost-%d", ghosts.Add(1))
		if _, err := c.Lookup(name); err == nil {
			v.add("ghosts", "lookup of %q, which was never registered, succeeded", name)
		}
	})

	// Churn: nodes come and go, so that the stream carries events.
	every(5*time.Millisecond, func() {
		name := names[rand.IntN(soakServices)]
		node := soakNode(name, fmt.Sprintf("%s-churn-%d", name, rand.IntN(4)))
		if rand.IntN(2) == 0 {
			_ = mem.Register(node)
		} else {
			_ = mem.Deregister(node)
		}
		churnCount.Add(1)
	})

	// Chaos: per-service faults, registry-wide outages, event faults, and
	// now and then a watch stream fault. Those are rarer: the cache backs
	// off up to 30 s after each, so that frequent ones would keep the
	// stream, and so the events, away most of the time.
	var (
		outageUntil, streamUntil, eventsUntil time.Time
		stream, events                        fakereg.WatchFault
	)
	every(100*time.Millisecond, func() {
		now := time.Now()
		switch r := rand.IntN(1000); {
		case r < 400:
			name := names[rand.IntN(soakServices)]
			g, kind := soakGetFault()
			f.SetFaultFor(name, g)
			if kind != "" {
				count("GetService " + kind)
			}
		case r < 420:
			g, kind := soakGetFault()
			if kind == "" || kind == "nil entries" {
				g, kind = fakereg.Fault{Err: errSoakDown}, "error"
			}
			f.SetFault(g)
			outageUntil = now.Add(time.Duration(1+rand.IntN(5)) * time.Second)
			count("outage: " + kind)
		case r < 425:
			var kind string
			stream, kind = soakStreamFault()
			streamUntil = now.Add(500*time.Millisecond + time.Duration(rand.Int64N(int64(3*time.Second))))
			count("watch: " + kind)
		case r < 455:
			var kind string
			events, kind = soakEventFault()
			eventsUntil = now.Add(500*time.Millisecond + time.Duration(rand.Int64N(int64(5*time.Second))))
			count("events: " + kind)
		case r < 505:
			f.ReleaseHangs()
		}
		if now.After(outageUntil) {
			f.SetFault(fakereg.Fault{})
		}
		if now.After(streamUntil) {
			stream = fakereg.WatchFault{}
		}
		if now.After(eventsUntil) {
			events = fakereg.WatchFault{}
		}
		// The two never set the same field.
		w := stream
		w.Duplicate, w.Reorder, w.Stale, w.NilEvents = events.Duplicate, events.Reorder, events.Stale, events.NilEvents
		f.SetWatchFault(w)
	})

	// Monitor: registry calls, goroutines and the heap.
	every(time.Second, func() {
		if r := f.Report(); r.Violations > 0 {
			v.add("registry calls", "%d violations; the first: %q", r.Violations, r.First)
		}
		owned := cacheOwnedGoroutines()
		maxOwned.Store(max(maxOwned.Load(), int64(owned)))
		if owned > 3+soakServices {
			v.add("cache goroutines", "%d goroutines owned by the cache, over 3 + %d services", owned, soakServices)
		}
		total := runtime.NumGoroutine()
		maxTotal.Store(max(maxTotal.Load(), int64(total)))
		if limit := baseGoroutines + soakReaders + 3 + 3 + soakServices + 200; total > limit {
			v.add("goroutines", "%d goroutines, over %d", total, limit)
		}
		// 500 ghosts a second, each kept for its window: at most the
		// longest adaptive one, 4 intervals.
		if n, limit := c.Stats().Entries, soakServices+2*500; n > limit {
			v.add("entries", "%d entries, over %d services and the ghosts of the last 2 s", n, limit)
		}
	})
	every(5*time.Second, func() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapMax.Store(max(heapMax.Load(), ms.HeapAlloc))
		if time.Since(start) < 30*time.Second || time.Since(start) < duration/10 {
			heapBase.Store(max(heapBase.Load(), ms.HeapAlloc))
			return
		}
		if base := heapBase.Load(); ms.HeapAlloc > 2*base+soakHeapSlack {
			v.add("heap", "live heap %d MB, over twice its %d MB after the warm-up plus %d MB",
				ms.HeapAlloc>>20, base>>20, soakHeapSlack>>20)
		}
	})
	every(time.Minute, func() {
		st := c.Stats()
		t.Logf("%v: %d lookups, %d registry calls, %d watch reconnects, %d goroutines, violations: %v",
			time.Since(start).Round(time.Second), lookups.Load(), f.Report().TotalCalls,
			st.WatchReconnects, runtime.NumGoroutine(), v)
	})

	time.Sleep(duration)
	close(done)
	// A lookup of a ghost waits for its registry call, which may be in a
	// hang that ignores its context: end hangs until every goroutine is
	// back.
	stopped := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
	}()
	for waiting := true; waiting; {
		f.ReleaseHangs()
		select {
		case <-stopped:
			waiting = false
		case <-time.After(10 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)

	// The faults end: the cache converges to the registry, its watch
	// stream included, within the backoff cap and a TTL.
	f.ClearFaults()
	converged := time.Now()
	deadline := converged.Add(45 * time.Second)
	var behind []string
	for {
		behind = behind[:0]
		for _, name := range names {
			svcs, err := c.Lookup(name)
			want, _ := mem.GetService(name)
			if err != nil || fmt.Sprint(nodeSetOf(svcs)) != fmt.Sprint(nodeSetOf(want)) {
				behind = append(behind, name)
			}
		}
		if len(behind) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(behind) > 0 {
		v.add("converges", "%d services still differ from the registry 45 s after the faults ended: %v",
			len(behind), behind[:min(5, len(behind))])
	}
	convergedIn := time.Since(converged)

	r := f.Report()
	if r.Violations > 0 {
		v.add("registry calls", "%d violations; the first: %q", r.Violations, r.First)
	}
	bound := 1 + int(time.Since(start)/soakInterval)
	if r.MaxCalls > bound {
		v.add("registry calls", "service %q: %d calls, over 1 + elapsed/interval = %d", r.MaxService, r.MaxCalls, bound)
	}
	st := c.Stats()
	c.Stop()
	left := cache.GoroutinesLeft(cacheFrame, 0, 5*time.Second)
	if len(left) > 0 {
		v.add("stop", "%d goroutines running cache code after Stop:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)

	var faults []string
	injected.Range(func(k, n any) bool {
		faults = append(faults, fmt.Sprintf("%s %d", k, n.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(faults)
	secs := elapsed.Seconds()
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %v, %d readers, %d services, TTL %v, retry interval %v, %s, GOMAXPROCS %d, race detector %v\n",
		elapsed.Round(time.Second), soakReaders, soakServices, soakTTL, soakInterval, runtime.Version(), runtime.GOMAXPROCS(0), raceEnabled())
	fmt.Fprintf(&b, "lookups:         %d (%.0f/s); errors for services with data: %d; cold errors (nothing cached yet): %d\n",
		lookups.Load(), float64(lookups.Load())/secs, v.count["no error with data"], coldErrs.Load())
	fmt.Fprintf(&b, "registry calls:  %d (%.0f/s); most for one service %d, bound 1 + elapsed/interval = %d; shortest gap %v (interval %v)\n",
		r.TotalCalls, float64(r.TotalCalls)/secs, r.MaxCalls, bound, r.MinGap.Round(time.Microsecond), soakInterval)
	fmt.Fprintf(&b, "watch:           %d Watch calls, %d streams, %d reconnects, at most %d open at once; %d events received from the registry's streams\n",
		r.Watches, r.Streams, st.WatchReconnects, r.MaxOpen, r.Received)
	fmt.Fprintf(&b, "cache stats:     fresh %d, stale %d, throttled %d, misses %d, refreshes %d (errors %d), events applied %d, ignored %d, invalidating %d; %d log lines, %d observer events (%d dropped)\n",
		st.FreshHits, st.StaleServes, st.Throttled, st.Misses, st.Refreshes, st.RefreshErrors,
		st.EventsApplied, st.EventsIgnored, st.EventsInvalidating, logLines.Load(), observed.Load(), st.ObserverDropped)
	fmt.Fprintf(&b, "churn:           %d registry changes; %d lookups of names never registered, %d entries at the end\n",
		churnCount.Load(), ghosts.Load(), st.Entries)
	fmt.Fprintf(&b, "faults:          %s\n", strings.Join(faults, ", "))
	fmt.Fprintf(&b, "converged:       in %v after the faults ended\n", convergedIn.Round(time.Millisecond))
	fmt.Fprintf(&b, "goroutines:      at most %d owned by the cache (bound 3 + services = %d), at most %d in the process; %d running cache code after Stop\n",
		maxOwned.Load(), 3+soakServices, maxTotal.Load(), len(left))
	fmt.Fprintf(&b, "heap:            live %.1f MB after the warm-up, at most %.1f MB, %.1f MB at the end\n",
		float64(heapBase.Load())/(1<<20), float64(heapMax.Load())/(1<<20), float64(ms.HeapAlloc)/(1<<20))
	fmt.Fprintf(&b, "violations:      %v", v)
	t.Log("\n" + b.String())
}
