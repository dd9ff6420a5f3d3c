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
// instance registers again.
//
//   - phase=first is the first event for each service after the fill, on
//     a new cache each time;
//   - phase=steady is the same pass again and again on one cache;
//   - phase=changed is steady, but each pass announces the node with new
//     metadata (as an instance registering again after a config change): a
//     change to apply for each event;
//   - phase=cold is steady with events that the CPU's caches no longer
//     hold: every pass is made before it is sent (20 MB), and the other
//     phases read each batch of 256 events once just before they send it,
//     as a registry hands over an event it has just decoded.
//
// The events are made before the pass, and the garbage of the passes
// before is collected then, so that the figures are the caches' work
// rather than the making of events: a registry's decoding costs the same
// whichever cache reads it.
//
// Each cache gets its events the way it watches: regcache on its one
// stream for the whole registry, go-micro's cache on the watch it opens per
// service (Watch with registry.WatchService). An op is one pass, sent from
// one goroutine, and ends once every event has been applied: a watcher
// that asks for its next event is done with the one before. ns/event is
// the op over the events. cpu-ns/event is the CPU time the process spent
// over the op, the sender's included, over the events: what a client pays
// for each event. It is the fairer figure of the two: go-micro's cache
// applies the events of different services on different goroutines, in
// parallel on as many cores as there are, so its ns/event shrinks with
// the cores while its CPU does not.
func BenchmarkEvents(b *testing.B) {
	const services = 10000
	b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
		base, names := scaleServices(services, 3)
		tmpl := make([]*registry.Service, len(names))
		for i, name := range names {
			tmpl[i] = benchService(name, 1)
		}
		for _, phase := range []string{"first", "steady", "changed", "cold"} {
			for _, impl := range append(benchImpls[:len(benchImpls):len(benchImpls)], readImpl) {
				b.Run(fmt.Sprintf("phase=%s/impl=%s", phase, impl.name), func(b *testing.B) {
					benchEvents(b, impl, base, names, tmpl, phase)
				})
			}
		}
	})
}

// readImpl is no cache: one stream whose events are read, every cache
// line of them, and dropped. Its rows are the floor under the caches' own:
// the harness (the send, the channel, the count of events done) and the
// reading of each event, which a cache must do in whole to tell that it
// changed nothing.
var readImpl = benchImpl{"read", func(r registry.Registry, _, _ time.Duration) gocache.Cache {
	w, err := r.Watch()
	if err != nil {
		panic(err)
	}
	c := &readCache{Registry: r, w: w, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			ev, err := w.Next()
			if err != nil {
				return
			}
			warmEvents([]*registry.Result{ev})
		}
	}()
	return c
}}

type readCache struct {
	registry.Registry
	w    registry.Watcher
	done chan struct{}
}

func (c *readCache) Stop() { c.w.Stop(); <-c.done }

// eventBatch is how many events a pass reads at a time just before it
// sends them, outside the timer: 256 events of about 2 KB stay in a CPU's
// cache until the watcher reads them.
const eventBatch = 256

func benchEvents(b *testing.B, impl benchImpl, base *benchReg, names []string, tmpl []*registry.Service, phase string) {
	var c gocache.Cache
	var r *scaleReg
	var chans []chan *registry.Result
	var g0 int
	var total, cpu time.Duration
	pass := 0
	// events returns one pass of events.
	events := func() []*registry.Result {
		evs := eventPass(tmpl)
		if phase == "changed" {
			for _, ev := range evs {
				ev.Service.Nodes[0].Metadata["revision"] = fmt.Sprint(pass)
			}
		}
		return evs
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if c == nil || phase == "first" {
			if c != nil {
				c.Stop()
				scaleSettle(b, g0)
			}
			g0 = runtime.NumGoroutine()
			c, r = eventsCache(b, impl, base, names)
			chans = r.targets(names, impl.name == "gomicro")
			if phase != "first" {
				pass++
				benchEventPass(r, chans, events()) // the first pass, not measured
			}
		}
		pass++
		evs := events()
		runtime.GC()
		batch := eventBatch
		if phase == "cold" {
			batch = len(evs)
		}
		for lo := 0; lo < len(evs); lo += batch {
			hi := min(lo+batch, len(evs))
			if phase != "cold" {
				warmEvents(evs[lo:hi])
			}
			b.StartTimer()
			start, cpu0 := time.Now(), processCPU()
			benchEventPass(r, chans[lo:hi], evs[lo:hi])
			total += time.Since(start)
			cpu += processCPU() - cpu0
			b.StopTimer()
		}
		b.StartTimer()
	}
	b.StopTimer()
	c.Stop()
	scaleSettle(b, g0)
	b.ReportMetric(float64(total)/float64(b.N)/float64(len(names)), "ns/event")
	if cpuMeasured {
		b.ReportMetric(float64(cpu)/float64(b.N)/float64(len(names)), "cpu-ns/event")
	}
}

// warmSink keeps warmEvents' reads from being optimised away.
var warmSink int

// warmEvents reads every byte that a cache may read of evs, so that the
// CPU's caches hold them.
func warmEvents(evs []*registry.Result) {
	n := 0
	str := func(s string) {
		n += len(s)
		for i := 0; i < len(s); i += 64 {
			n += int(s[i])
		}
	}
	md := func(m map[string]string) {
		for k, v := range m {
			str(k)
			str(v)
		}
	}
	var value func(v *registry.Value)
	value = func(v *registry.Value) {
		if v == nil {
			return
		}
		str(v.Name)
		str(v.Type)
		for _, sub := range v.Values {
			value(sub)
		}
	}
	for _, ev := range evs {
		s := ev.Service
		str(ev.Action)
		str(s.Name)
		str(s.Version)
		md(s.Metadata)
		for _, node := range s.Nodes {
			str(node.Id)
			str(node.Address)
			md(node.Metadata)
		}
		for _, e := range s.Endpoints {
			str(e.Name)
			md(e.Metadata)
			value(e.Request)
			value(e.Response)
		}
	}
	warmSink += n
}

// eventsCache returns a cache of impl holding every service in names, with
// nothing left to do and its watches open: regcache's stream, or go-micro's
// watch per service.
func eventsCache(b *testing.B, impl benchImpl, base *benchReg, names []string) (gocache.Cache, *scaleReg) {
	r := newBufferedScaleReg(base, eventBatch)
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
