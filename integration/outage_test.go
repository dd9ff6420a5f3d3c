package integration

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// TestOutage: with the etcd server closed, cached services keep resolving
// from stale data, at memory speed, while refreshes are throttled; a service
// that was never cached fails, and is throttled afterwards.
func TestOutage(t *testing.T) {
	// The retry interval is longer than the registry timeout: the throttle
	// window opens when an attempt starts, so with an interval shorter than
	// the time a failing lookup takes, the window is already closed when
	// that lookup returns, and the next caller of a never-cached service
	// makes (and waits for) another attempt.
	const (
		registryTimeout = time.Second
		ttl             = 300 * time.Millisecond
		retryInterval   = 3 * time.Second
		outage          = 6 * time.Second
		readers         = 4
		// A lookup that waited for the registry would take about
		// registryTimeout; one served from memory takes microseconds.
		// The bound sits far from both, for a noisy machine and -race.
		staleLookupBound = 500 * time.Millisecond
	)
	names := []string{"it.outage.a", "it.outage.b"}
	s := startEtcd(t)
	writer := newEtcdRegistry(t, s, registryTimeout)
	counted := newCountingRegistry(newEtcdRegistry(t, s, registryTimeout))
	c := newCache(t, counted, cache.WithTTL(ttl), cache.WithMinimumRetryInterval(retryInterval))

	for _, name := range names {
		mustRegister(t, writer, service(name, name+"-1"), registerTTL)
		if _, err := c.GetService(name); err != nil {
			t.Fatalf("lookup %s before the outage: %v", name, err)
		}
	}
	waitStream(t, counted, writer)
	before := map[string]int{}
	for _, name := range names {
		before[name] = counted.Gets(name)
	}

	s.Stop()
	down := time.Now()
	t.Logf("etcd closed")

	var (
		mu        sync.Mutex
		latencies []time.Duration
		failures  []string
		wg        sync.WaitGroup
	)
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(down) < outage {
				for _, name := range names {
					start := time.Now()
					svcs, err := c.GetService(name)
					d := time.Since(start)
					mu.Lock()
					latencies = append(latencies, d)
					switch {
					case err != nil:
						failures = append(failures, fmt.Sprintf("%s: %v", name, err))
					case !hasNode(svcs, name+"-1"):
						failures = append(failures, fmt.Sprintf("%s: nodes %v", name, nodeIDs(svcs)))
					case d > staleLookupBound:
						failures = append(failures, fmt.Sprintf("%s: took %v", name, d))
					}
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(down)

	if len(failures) > 0 {
		t.Fatalf("%d of %d lookups of cached services during the outage failed, first ones: %v",
			len(failures), len(latencies), failures[:min(5, len(failures))])
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	t.Logf("%d stale lookups during %v of outage: median %v, p99 %v, max %v",
		len(latencies), elapsed.Round(time.Millisecond), latencies[len(latencies)/2],
		latencies[len(latencies)*99/100], latencies[len(latencies)-1])

	bound := 1 + int(elapsed/retryInterval)
	for _, name := range names {
		n := counted.Gets(name) - before[name]
		t.Logf("registry lookups of %s during the outage: %d (bound %d)", name, n, bound)
		if n > bound {
			t.Errorf("registry lookups of %s during the outage: %d, want at most 1 + outage/MinimumRetryInterval = %d", name, n, bound)
		}
	}

	// A service that was never cached: the first lookup goes to the
	// registry and fails; the etcd client retries until its timeout.
	const never = "it.outage.never"
	start := time.Now()
	_, err := c.GetService(never)
	first := time.Since(start)
	t.Logf("first lookup of a never-cached service during the outage: %v after %v", err, first.Round(time.Millisecond))
	if err == nil {
		t.Fatalf("lookup of a never-cached service during the outage succeeded")
	}
	if first > registryTimeout+3*time.Second {
		t.Errorf("first lookup of a never-cached service took %v, want about the registry timeout %v", first, registryTimeout)
	}
	// Within the retry interval, the next ones are refused at once.
	for i := 0; i < 10; i++ {
		start = time.Now()
		_, err = c.GetService(never)
		d := time.Since(start)
		if !errors.Is(err, cache.ErrThrottled) || !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("lookup %d of a never-cached service right after a failure: %v, want ErrThrottled and ErrNotFound", i+2, err)
		}
		if d > staleLookupBound {
			t.Fatalf("throttled lookup took %v", d)
		}
	}
	t.Logf("throttled lookup: %v", err)
	if n := counted.Gets(never); n != 1 {
		t.Fatalf("registry lookups of a never-cached service: %d, want 1", n)
	}
}
