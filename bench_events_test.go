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

// BenchmarkEvents is watch events applied by a cache holding 10 000
// services of 3 nodes: one update event per service, announcing one of its
// nodes with the whole service definition, as a registry sends when an
// instance registers again. phase=first is the first event for each
// service after the fill, on a new cache each time; phase=steady is the
// same pass again and again on one cache.
//
// Each cache gets its events the way it watches: regcache on its one
// stream for the whole registry, go-micro's cache on the watch it opens per
// service (Watch with registry.WatchService). An op is one pass, sent from
// one goroutine, and ends once every event has been applied: a watcher
// that asks for its next event is done with the one before. ns/event is
// the op over the events.
func BenchmarkEvents(b *testing.B) {
	const services = 10000
	b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
		base, names := scaleServices(services, 3)
		tmpl := make([]*registry.Service, len(names))
		for i, name := range names {
			tmpl[i] = benchService(name, 1)
		}
		for _, phase := range []string{"first", "steady", "changed"} {
			for _, impl := range benchImpls {
				b.Run(fmt.Sprintf("phase=%s/impl=%s", phase, impl.name), func(b *testing.B) {
					benchEvents(b, impl, base, names, tmpl, phase)
				})
			}
		}
	})
}

func benchEvents(b *testing.B, impl benchImpl, base *benchReg, names []string, tmpl []*registry.Service, phase string) {
	first := phase == "first"
	pass := 0
	next := func() []*registry.Result {
		evs := eventPass(tmpl)
		if phase == "changed" {
			pass++
			for _, ev := range evs {
				ev.Service.Nodes[0].Metadata["revision"] = fmt.Sprint(pass)
			}
		}
		return evs
	}
	var c gocache.Cache
	var r *scaleReg
	var chans []chan *registry.Result
	var g0 int
	var total time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if c == nil || first {
			if c != nil {
				c.Stop()
				scaleSettle(b, g0)
			}
			g0 = runtime.NumGoroutine()
			c, r = eventsCache(b, impl, base, names)
			chans = r.targets(names, impl.name == "gomicro")
			if !first {
				benchEventPass(r, chans, next()) // the first pass, not measured
			}
		}
		evs := next()
		runtime.GC()
		b.StartTimer()

		start := time.Now()
		benchEventPass(r, chans, evs)
		total += time.Since(start)
	}
	b.StopTimer()
	c.Stop()
	scaleSettle(b, g0)
	b.ReportMetric(float64(total)/float64(b.N)/float64(len(names)), "ns/event")
}

// eventsCache returns a cache of impl holding every service in names, with
// nothing left to do and its watches open: regcache's stream, or go-micro's
// watch per service.
func eventsCache(b *testing.B, impl benchImpl, base *benchReg, names []string) (gocache.Cache, *scaleReg) {
	r := newScaleReg(base)
	if impl.name == "gomicro" {
		r.prepareWatches(names)
	}
	c := impl.new(r, time.Hour, cache.DefaultMinimumRetryInterval)
	if failed := scaleFill(c, names); failed > 0 {
		b.Fatalf("%d lookups failed", failed)
	}
	r.quiet()
	watches := int64(1)
	if impl.name == "gomicro" {
		watches = int64(len(names))
	}
	r.waitWatches(b, watches)
	return c, r
}

// eventPass returns one update event per service of tmpl, each a fresh
// copy, as a registry decodes them: go-micro's cache keeps and changes the
// event's service.
func eventPass(tmpl []*registry.Service) []*registry.Result {
	evs := make([]*registry.Result, len(tmpl))
	for i, s := range tmpl {
		evs[i] = &registry.Result{Action: "update", Service: benchCopy(s)}
	}
	return evs
}

// benchEventPass sends evs[i] on chans[i], and returns once the watchers
// are done with all of them.
func benchEventPass(r *scaleReg, chans []chan *registry.Result, evs []*registry.Result) {
	base := r.applied.Load()
	for i, ev := range evs {
		chans[i] <- ev
	}
	r.waitApplied(base, int64(len(evs)))
}
