package cache_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// BenchmarkRevalidate is one re-validation round: n services of 3 nodes
// cached, then the watch stream breaks and comes back, and the cache
// re-validates every service, since it may have missed events meanwhile.
// Each GetService takes 1 ms. With list=names the registry lists names
// only, as mdns does, so each service is asked for on its own; with
// list=nodes it lists whole services, as etcd does, and one ListServices
// call does it all. go-micro's cache has no re-validation, so these rows
// have no pair.
//
// An op is one round. ns/op runs from the stream's return (its reconnect
// backoff is left out) to the moment every service holds data fetched in
// this round. cpu-ms/op is the process's CPU time over the round, less the
// reader's below, and includes the fake registry's copying of what it
// returns, as a client decoding answers would spend; cpu-us/svc is the same
// per service, for comparing sizes. regcalls/op and lists/op count the
// registry calls of the round.
//
// A reader runs through the round: every 200 µs it looks up one of the
// cached services, which answers without the cache's lock, and one service
// the registry does not have, which takes the lock every time and is
// refused within its retry window, or asks the registry (at once: nothing
// is registered under that name) once the window has opened.
// max-lookup-ns/op is the slowest lookup that did not wait for the
// registry, in all rounds (a maximum, not a mean): the stall a caller can
// see on the cache's lock. max-hit-ns/op is the slowest of the cached
// services alone: as they take no lock, it is what the machine's
// scheduling and the GC add. max-miss-ns/op is the slowest of those that
// waited for the registry, the start of a goroutine included.
//
// regcache runs with a MinimumRetryInterval of 100 ms, so that a round can
// start 100 ms after the last (a service is not re-validated within its
// retry window). The 100 000 row (list=nodes only) is left out with -short.
func BenchmarkRevalidate(b *testing.B) {
	lists := []struct {
		name string
		mode int32
	}{{"names", listNames}, {"nodes", listNodes}}
	for _, n := range []int{3000, 10000, 30000, 100000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			if n > 30000 && testing.Short() {
				b.Skip("100 000 services: not with -short")
			}
			base, names := scaleServices(n, 3)
			for _, l := range lists {
				if n > 30000 && l.mode == listNames {
					continue // a 25 s round
				}
				b.Run(fmt.Sprintf("list=%s/impl=regcache", l.name), func(b *testing.B) {
					benchRevalidate(b, base, names, l.mode)
				})
			}
		})
	}
}

// revalidateRetry is regcache's MinimumRetryInterval in BenchmarkRevalidate.
const revalidateRetry = 100 * time.Millisecond

// absentService is a name the registry does not have.
const absentService = "regcache.absent"

func benchRevalidate(b *testing.B, base *benchReg, names []string, list int32) {
	r := newScaleReg(base)
	r.list.Store(list)
	c := cache.New(r, cache.WithTTL(time.Hour), cache.WithMinimumRetryInterval(revalidateRetry),
		cache.WithLogger(benchLogger))
	defer c.Stop()
	if failed := scaleFill(c, names); failed > 0 {
		b.Fatalf("%d lookups failed", failed)
	}
	r.quiet()
	// The services fetched before the stream was up are re-validated once
	// their retry windows close.
	time.Sleep(revalidateRetry)
	r.quiet()
	r.latency.Store(int64(time.Millisecond))

	var span, cpu, worst, hit, miss time.Duration
	var calls, listCalls int64
	old := make([]*registry.Service, len(names))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		time.Sleep(revalidateRetry) // the last round's windows close
		for j, name := range names {
			svcs, err := c.Lookup(name)
			if err != nil {
				b.Fatal(err)
			}
			old[j] = svcs[0]
		}
		calls0 := r.calls.Load() - r.absent.Load()
		lists0, watches0 := r.lists.Load(), r.watchCalls.Load()
		runtime.GC()
		ready, done := make(chan struct{}), make(chan roundSeen)
		go observeRound(c, names, old, ready, done)
		b.StartTimer()

		<-ready
		cpu0 := processCPU()
		r.breakAll()
		seen := <-done
		cpu += processCPU() - cpu0 - seen.cpu
		b.StopTimer()
		if seen.err != nil {
			b.Fatal(seen.err)
		}
		if r.watchCalls.Load() == watches0 {
			b.Fatal("the stream did not come back")
		}
		span += seen.end.Sub(time.Unix(0, r.watchedAt.Load()))
		worst, hit, miss = max(worst, seen.worst), max(hit, seen.hit), max(miss, seen.miss)
		calls += r.calls.Load() - r.absent.Load() - calls0
		listCalls += r.lists.Load() - lists0
	}
	n := float64(b.N)
	b.ReportMetric(float64(span)/n, "ns/op")
	if cpuMeasured {
		b.ReportMetric(float64(cpu)/n/1e6, "cpu-ms/op")
		b.ReportMetric(float64(cpu)/n/1e3/float64(len(names)), "cpu-us/svc")
	}
	b.ReportMetric(float64(worst), "max-lookup-ns/op")
	b.ReportMetric(float64(hit), "max-hit-ns/op")
	b.ReportMetric(float64(miss), "max-miss-ns/op")
	b.ReportMetric(float64(calls)/n, "regcalls/op")
	b.ReportMetric(float64(listCalls)/n, "lists/op")
}

// roundSeen is what observeRound saw of a round.
type roundSeen struct {
	end   time.Time     // when it saw every service re-validated
	worst time.Duration // its slowest lookup that did not wait for the registry
	hit   time.Duration // its slowest lookup of a cached service
	miss  time.Duration // its slowest lookup that waited for the registry
	cpu   time.Duration // its own CPU time
	err   error
}

// observeRound watches a re-validation round from its own OS thread, so
// that its CPU time can be told apart: it closes ready, then, until every service in names holds data other than old,
// looks up one cached service and absentService every 200 µs and times
// both, and sends what it saw on done.
func observeRound(c cache.Cache, names []string, old []*registry.Service, ready chan<- struct{}, done chan<- roundSeen) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU()
	close(ready)
	start := time.Now()
	var seen roundSeen
	next, k := 0, 0
	for {
		for next < len(names) {
			svcs, err := c.Lookup(names[next])
			if err != nil || svcs[0] == old[next] {
				break
			}
			next++
		}
		if next == len(names) {
			break
		}
		if time.Since(start) > 2*time.Minute {
			seen.err = fmt.Errorf("%d of %d services re-validated after 2 minutes", next, len(names))
			break
		}
		t0 := time.Now()
		_, _ = c.Lookup(names[k])
		t1 := time.Now()
		_, err := c.Lookup(absentService)
		t2 := time.Now()
		seen.hit = max(seen.hit, t1.Sub(t0))
		seen.worst = max(seen.worst, seen.hit)
		if errors.Is(err, cache.ErrThrottled) {
			seen.worst = max(seen.worst, t2.Sub(t1))
		} else {
			seen.miss = max(seen.miss, t2.Sub(t1))
		}
		k = (k + 1) % len(names)
		time.Sleep(200 * time.Microsecond)
	}
	seen.end = time.Now()
	seen.cpu = threadCPU() - cpu0
	done <- seen
}
