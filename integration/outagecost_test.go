package integration

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// callCounter counts the registry calls a cache makes: GetService,
// ListServices and Watch.
type callCounter struct {
	registry.Registry
	gets, lists, watches atomic.Int64
}

func (c *callCounter) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	c.gets.Add(1)
	return c.Registry.GetService(name, opts...)
}

func (c *callCounter) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	c.lists.Add(1)
	return c.Registry.ListServices(opts...)
}

func (c *callCounter) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	c.watches.Add(1)
	return c.Registry.Watch(opts...)
}

// registryCalls is a callCounter's counts at one moment.
type registryCalls struct{ Gets, Lists, Watches int64 }

func (c *callCounter) Snapshot() registryCalls {
	return registryCalls{c.gets.Load(), c.lists.Load(), c.watches.Load()}
}

func (r registryCalls) Sub(e registryCalls) registryCalls {
	return registryCalls{r.Gets - e.Gets, r.Lists - e.Lists, r.Watches - e.Watches}
}

func (r registryCalls) String() string {
	return fmt.Sprintf("%d GetService, %d ListServices, %d Watch", r.Gets, r.Lists, r.Watches)
}

// serviceNames returns n service names under prefix.
func serviceNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s.%04d", prefix, i)
	}
	return names
}

// registerServices registers each name with nodes nodes, a few at a time.
func registerServices(t *testing.T, r registry.Registry, names []string, nodes int) {
	t.Helper()
	var wg sync.WaitGroup
	work := make(chan string)
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				ids := make([]string, nodes)
				for i := range ids {
					ids[i] = fmt.Sprintf("%s-%d", name, i)
				}
				if err := r.Register(service(name, ids...), registry.RegisterTTL(10*time.Minute)); err != nil {
					select {
					case errs <- fmt.Errorf("register %s: %w", name, err):
					default:
					}
				}
			}
		}()
	}
	for _, n := range names {
		work <- n
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// costSide is one cache under measurement: a child process with its own
// etcd client behind its own metered proxy.
type costSide struct {
	name  string
	meter *grpcMeter
	proc  *child
	// filled is the child's report once filled and measured.
	filled childReport

	// At the start of the outage, at the restart, and at the end.
	at      [3]childReport
	meterAt [3]meterSnapshot
}

func (sd *costSide) calls(i, j int) registryCalls {
	a, b := sd.at[i], sd.at[j]
	return registryCalls{b.Gets - a.Gets, b.Lists - a.Lists, b.Watches - a.Watches}
}

// outageCost is one run: services registered in etcd, two caches filled
// with all of them, etcd stopped for outage while readers look up services
// at random, then restarted and watched for after.
type outageCost struct {
	services, nodes int
	ttl             time.Duration
	// expireInto is how long into the outage the cached data expires:
	// the outage starts ttl - expireInto after the fill.
	expireInto    time.Duration
	outage, after time.Duration
	readers       int // per cache
	timeout       time.Duration
}

// run measures regcache and go-micro's registry/cache side by side, each in
// a child process, at the same time against the same etcd. The children
// fill one after the other, so that each fill time is its own, and the
// outage starts ttl - expireInto after regcache's fill.
func (oc outageCost) run(t *testing.T) (rc, gm *costSide) {
	t.Helper()
	s := startEtcd(t)
	names := serviceNames("it.cost", oc.services)
	start := time.Now()
	registerServices(t, newEtcdRegistry(t, s, 5*time.Second), names, oc.nodes)
	t.Logf("%d services of %d nodes registered in %v", oc.services, oc.nodes, time.Since(start).Round(time.Millisecond))

	side := func(name, mode string) *costSide {
		p, m := startMeteredProxy(t, s.Addr())
		sd := &costSide{name: name, meter: m}
		sd.proc = startChild(t, name, childConfig{
			Mode: mode, Addr: p.Addr(), Names: names, TTL: oc.ttl, Timeout: oc.timeout, Readers: oc.readers,
		})
		return sd
	}
	rc = side("regcache", "regcache")
	gm = side("go-micro cache", "gomicro")
	sides := []*costSide{rc, gm}
	var filled time.Time
	for _, sd := range sides {
		sd.filled = sd.proc.Fill()
		if filled.IsZero() {
			filled = time.Now()
		}
	}
	// go-micro's cache starts its watches in the background.
	time.Sleep(2 * time.Second)
	// Every watch the caches opened is established once etcd has answered
	// its create request.
	waitFor(t, 30*time.Second, "watches established", func() bool {
		for _, sd := range sides {
			m := sd.meter.Snapshot()
			if m.WatchCreates == 0 || m.WatchMessages < m.WatchCreates {
				return false
			}
		}
		return true
	})
	for _, sd := range sides {
		r := sd.proc.Measure()
		r.Fill = sd.filled.Fill
		sd.filled = r
		t.Logf("%-14s fill of %d services: %v; then %d goroutines more, live heap %.1f MB more (%.0f B per service), heap in use %.1f MB more (%.1f MB in all)",
			sd.name, oc.services, r.Fill.Round(time.Millisecond), r.GoroutinesAfter-r.GoroutinesBefore,
			mb(r.HeapAllocAfter)-mb(r.HeapAllocBefore), (mb(r.HeapAllocAfter)-mb(r.HeapAllocBefore))*(1<<20)/float64(oc.services),
			mb(r.HeapInuse)-mb(r.HeapInuseBefore), mb(r.HeapInuse))
		sd.proc.Start()
	}

	if wait := oc.ttl - oc.expireInto - time.Since(filled); wait > 0 {
		time.Sleep(wait)
	}
	mark := func(i int) {
		for _, sd := range sides {
			sd.at[i], sd.meterAt[i] = sd.proc.Report(), sd.meter.Snapshot()
		}
	}
	mark(0)
	s.Stop()
	down := time.Now()
	time.Sleep(oc.outage)
	s.Start()
	mark(1)
	back := time.Now()
	t.Logf("etcd stopped for %v (until it served again)", back.Sub(down).Round(time.Millisecond))
	time.Sleep(oc.after)
	mark(2)
	for _, sd := range sides {
		last := sd.proc.Stop()
		md, ma := sd.meterAt[1].Sub(sd.meterAt[0]), sd.meterAt[2].Sub(sd.meterAt[1])
		t.Logf("%-14s during the %v outage: registry calls: %v; requests that reached etcd: %d", sd.name, oc.outage, sd.calls(0, 1), md.Requests())
		t.Logf("%-14s in the %v after the restart: registry calls: %v; requests that reached etcd: %v", sd.name, oc.after, sd.calls(1, 2), ma)
		t.Logf("%-14s readers: %d lookups, %d failed", sd.name, last.Lookups, last.Failed)
		sd.at[2].Failed = last.Failed
		if errs := sd.meterAt[2].Errors; len(errs) > 0 {
			t.Errorf("%s: the meter could not read some frames: %v", sd.name, errs)
		}
	}
	return rc, gm
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// TestOutageCost: 200 services cached, etcd stopped for 10 s and restarted,
// while readers look up services at random. During the outage regcache
// sends about one probe per probe interval, whatever the number of
// services; after the restart it re-validates everything with one
// ListServices call. go-micro's registry/cache is measured side by side.
func TestOutageCost(t *testing.T) {
	oc := outageCost{
		services: 200, nodes: 1,
		// The data expires 4 s into the outage, and not again in the
		// 10 s after the restart: what is counted then is the recovery.
		ttl: 11 * time.Second, expireInto: 4 * time.Second,
		outage: 10 * time.Second, after: 10 * time.Second,
		readers: 8,
		timeout: time.Second,
	}
	rc, _ := oc.run(t)
	checkOutageCost(t, oc, rc)
}

// TestScaleRestart: the same at 1 000 services of 3 nodes, with the fill
// time, goroutines and memory of each client. It takes about a minute, so
// it runs only with REGCACHE_IT_LONG=1 (without -race for the figures).
func TestScaleRestart(t *testing.T) {
	if os.Getenv("REGCACHE_IT_LONG") == "" {
		t.Skip("a measurement of about a minute: run it with REGCACHE_IT_LONG=1")
	}
	oc := outageCost{
		services: 1000, nodes: 3,
		ttl: 11 * time.Second, expireInto: 4 * time.Second,
		outage: 10 * time.Second, after: 10 * time.Second,
		readers: 8,
		timeout: time.Second,
	}
	if raceEnabled {
		t.Logf("built with -race: times and memory are the race detector's, not the client's")
	}
	rc, _ := oc.run(t)
	checkOutageCost(t, oc, rc)
}

// checkOutageCost checks regcache's side of a run against its bounds.
func checkOutageCost(t *testing.T, oc outageCost, rc *costSide) {
	t.Helper()
	during, after := rc.calls(0, 1), rc.calls(1, 2)
	// The background refreshes in flight when the registry failed (at
	// most 4), then one probe per probe interval.
	bound := 4 + int64(oc.outage/cache.DefaultProbeInterval)
	if n := during.Gets + during.Lists; n > bound {
		t.Errorf("regcache: %v during the %v outage, want at most %d (the refreshes in flight, then one probe per %v)",
			during, oc.outage, bound, cache.DefaultProbeInterval)
	}
	if during.Watches != 0 {
		t.Errorf("regcache: %d Watch calls during the outage; the etcd plugin's stream blocks through an outage", during.Watches)
	}
	if after.Lists != 1 {
		t.Errorf("regcache: %d ListServices calls after the restart, want one resync of %d services with one call", after.Lists, oc.services)
	}
	if max := int64(2 * oc.services); after.Gets > max {
		t.Errorf("regcache: %d GetService calls in the %v after the restart, want at most 2 per service (%d)", after.Gets, oc.after, max)
	}
	if f := rc.at[2].Failed; f != 0 {
		t.Errorf("regcache: %d lookups of cached services failed", f)
	}
	if ma := rc.meterAt[2].Sub(rc.meterAt[1]); ma.WatchCreates > 1 {
		t.Errorf("regcache: %d watches created after the restart, want its one stream", ma.WatchCreates)
	}
}
