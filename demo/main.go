// Command demo shows regcache next to go-micro's registry cache and no
// cache at all, in front of an in-memory registry that breaks part-way
// through. It needs no setup and sends no network traffic.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"

	regcache "github.com/regcache/cache"
)

func main() {
	var (
		duration    = flag.Duration("duration", 3*time.Second, "how long each phase runs")
		concurrency = flag.Int("concurrency", 64, "concurrent callers")
		services    = flag.Int("services", 20, "services registered")
		latency     = flag.Duration("latency", 20*time.Millisecond, "latency of each registry call")
	)
	flag.Parse()
	if *duration <= 0 || *concurrency <= 0 || *services <= 0 || *latency < 0 {
		fmt.Fprintln(os.Stderr, "demo: -duration, -concurrency and -services must be positive, -latency not negative")
		os.Exit(2)
	}
	// go-micro's cache logs every failure; keep the table readable.
	logger.DefaultLogger = logger.NewLogger(logger.WithLevel(logger.FatalLevel))

	fmt.Printf("%d callers over %d services; registry latency %v; TTL 1s; each phase %v\n\n",
		*concurrency, *services, *latency, *duration)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "client\tphase\tlookups\tfailed\tregistry calls\tp50\tp99\tmax\t")
	var summary []string
	for _, client := range []string{"no cache", "go-micro cache", "regcache"} {
		fmt.Fprintf(os.Stderr, "running %s...\n", client)
		for _, r := range run(client, *services, *concurrency, *duration, *latency) {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%v\t%v\t%v\t\n", client, r.phase, r.lookups, r.failed, r.calls,
				r.p(0.50), r.p(0.99), r.p(1))
			if r.phase == "registry down" {
				summary = append(summary, fmt.Sprintf("  %-15s served %d of %d lookups, made %d registry calls, p99 %v",
					client+":", r.lookups-r.failed, r.lookups, r.calls, r.p(0.99)))
			}
		}
	}
	tw.Flush()
	fmt.Println("\nWhile the registry was down:")
	for _, s := range summary {
		fmt.Println(s)
	}
}

type result struct {
	phase     string
	lookups   int
	failed    int
	calls     int64
	latencies []time.Duration
}

func (r result) p(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.latencies)-1))
	return r.latencies[i].Round(time.Microsecond)
}

// run drives one client through a healthy phase and an outage.
func run(client string, services, concurrency int, d, latency time.Duration) []result {
	mem := registry.NewMemoryRegistry()
	for i := 0; i < services; i++ {
		_ = mem.Register(&registry.Service{
			Name:    fmt.Sprint("svc-", i),
			Version: "1",
			Nodes:   []*registry.Node{{Id: fmt.Sprint("node-", i), Address: "127.0.0.1:1"}},
		})
	}
	b := &breakable{Registry: mem, latency: latency}
	var lookup registry.Registry = b
	switch client {
	case "go-micro cache":
		c := gmcache.New(b, gmcache.WithTTL(time.Second))
		defer c.Stop()
		lookup = c
	case "regcache":
		c := regcache.New(b, regcache.WithTTL(time.Second))
		defer c.Stop()
		lookup = c
	}
	var out []result
	for _, phase := range []string{"healthy", "registry down"} {
		b.down.Store(phase == "registry down")
		out = append(out, load(phase, lookup, b, services, concurrency, d))
	}
	return out
}

// load runs concurrency callers looking up random services for d.
func load(phase string, r registry.Registry, b *breakable, services, concurrency int, d time.Duration) result {
	before := b.calls.Load()
	var (
		mu  sync.Mutex
		res = result{phase: phase}
		wg  sync.WaitGroup
	)
	end := time.Now().Add(d)
	for g := 0; g < concurrency; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			var lat []time.Duration
			failed := 0
			for i := g; time.Now().Before(end); i++ {
				start := time.Now()
				_, err := r.GetService(fmt.Sprint("svc-", i%services))
				lat = append(lat, time.Since(start))
				if err != nil {
					failed++
				}
				time.Sleep(time.Millisecond) // a caller doing other work
			}
			mu.Lock()
			res.latencies = append(res.latencies, lat...)
			res.failed += failed
			mu.Unlock()
		}(g)
	}
	wg.Wait()
	res.lookups = len(res.latencies)
	res.calls = b.calls.Load() - before
	sort.Slice(res.latencies, func(i, j int) bool { return res.latencies[i] < res.latencies[j] })
	return res
}

// breakable wraps a registry with latency, a call counter and an outage
// switch.
type breakable struct {
	registry.Registry
	latency time.Duration
	down    atomic.Bool
	calls   atomic.Int64
}

var errOutage = errors.New("registry unavailable")

func (b *breakable) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	b.calls.Add(1)
	time.Sleep(b.latency)
	if b.down.Load() {
		return nil, errOutage
	}
	return b.Registry.GetService(name, opts...)
}
