package integration

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"

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

// costSide is one cache under measurement, with its own etcd client behind
// its own metered proxy.
type costSide struct {
	name  string
	calls *callCounter
	meter *grpcMeter
	get   func(string, ...registry.GetOption) ([]*registry.Service, error)
	// rc is the regcache cache, nil for go-micro's.
	rc cache.Cache

	fill time.Duration
	// At the start of the outage, at the restart, and at the end.
	callsAt [3]registryCalls
	meterAt [3]meterSnapshot
	// lookups and failed lookups by the readers, over the whole run.
	lookups, failed atomic.Int64
}

// outageCost is one run: services registered in etcd, two caches filled
// with all of them, etcd stopped for outage while readers look up every
// service, then restarted and watched for after.
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

// run measures regcache and go-micro's registry/cache side by side, at the
// same time against the same etcd.
func (oc outageCost) run(t *testing.T) (rc, gm *costSide) {
	t.Helper()
	s := startEtcd(t)
	names := serviceNames("it.cost", oc.services)
	start := time.Now()
	registerServices(t, newEtcdRegistry(t, s, 5*time.Second), names, oc.nodes)
	t.Logf("%d services of %d nodes registered in %v", oc.services, oc.nodes, time.Since(start).Round(time.Millisecond))

	side := func(name string) *costSide {
		p, m := startMeteredProxy(t, s.Addr())
		return &costSide{name: name, meter: m, calls: &callCounter{Registry: newEtcdRegistryAt(t, p.Addr(), oc.timeout)}}
	}
	rc, gm = side("regcache"), side("go-micro cache")
	rc.rc = newCache(t, rc.calls, cache.WithTTL(oc.ttl))
	rc.get = rc.rc.GetService
	g := gmcache.New(gm.calls, gmcache.WithTTL(oc.ttl))
	t.Cleanup(g.Stop)
	gm.get = g.GetService
	sides := []*costSide{rc, gm}

	for _, sd := range sides {
		start := time.Now()
		for _, n := range names {
			if _, err := sd.get(n); err != nil {
				t.Fatalf("%s: fill: %s: %v", sd.name, n, err)
			}
		}
		sd.fill = time.Since(start)
	}
	filled := time.Now()
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

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, sd := range sides {
		for range oc.readers {
			wg.Add(1)
			go func() {
				// Each lookup is of a service drawn at random, as
				// the RPCs of a busy client are.
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					sd.lookups.Add(1)
					if _, err := sd.get(names[rand.IntN(len(names))]); err != nil {
						sd.failed.Add(1)
					}
					time.Sleep(time.Millisecond)
				}
			}()
		}
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	mark := func(i int) {
		for _, sd := range sides {
			sd.callsAt[i], sd.meterAt[i] = sd.calls.Snapshot(), sd.meter.Snapshot()
		}
	}

	if wait := oc.ttl - oc.expireInto - time.Since(filled); wait > 0 {
		time.Sleep(wait)
	}
	mark(0)
	s.Stop()
	down := time.Now()
	time.Sleep(oc.outage)
	s.Start()
	mark(1)
	back := time.Now()
	t.Logf("etcd stopped for %v", back.Sub(down).Round(time.Millisecond))
	time.Sleep(oc.after)
	mark(2)
	for _, sd := range sides {
		during, after := sd.callsAt[1].Sub(sd.callsAt[0]), sd.callsAt[2].Sub(sd.callsAt[1])
		md, ma := sd.meterAt[1].Sub(sd.meterAt[0]), sd.meterAt[2].Sub(sd.meterAt[1])
		t.Logf("%-14s fill of %d services: %v", sd.name, oc.services, sd.fill.Round(time.Millisecond))
		t.Logf("%-14s during the %v outage: registry calls: %v; requests that reached etcd: %d", sd.name, oc.outage, during, md.Requests())
		t.Logf("%-14s in the %v after the restart: registry calls: %v; requests that reached etcd: %v", sd.name, oc.after, after, ma)
		t.Logf("%-14s readers: %d lookups, %d failed", sd.name, sd.lookups.Load(), sd.failed.Load())
		if errs := sd.meterAt[2].Errors; len(errs) > 0 {
			t.Errorf("%s: the meter could not read some frames: %v", sd.name, errs)
		}
	}
	return rc, gm
}

// TestOutageCost: 200 services cached, etcd stopped for 10 s and restarted,
// while readers look up every service. During the outage regcache sends
// about one probe per probe interval, whatever the number of services;
// after the restart it re-validates everything with one ListServices call,
// and then refreshes each service at most once more as its TTL runs out.
// go-micro's registry/cache is measured side by side.
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

	during := rc.callsAt[1].Sub(rc.callsAt[0])
	after := rc.callsAt[2].Sub(rc.callsAt[1])
	// Two failures of different services take the registry down; then
	// one probe per probe interval (a probe ends after the registry
	// timeout, and the next starts a probe interval later).
	bound := 3 + int64(oc.outage/cache.DefaultProbeInterval)
	if n := during.Gets + during.Lists; n > bound {
		t.Errorf("regcache: %v during the %v outage, want at most %d (2 failures, then about one probe per %v)",
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
	if f := rc.failed.Load(); f != 0 {
		t.Errorf("regcache: %d lookups of cached services failed", f)
	}
	ma := rc.meterAt[2].Sub(rc.meterAt[1])
	if ma.WatchCreates > 1 {
		t.Errorf("regcache: %d watches created after the restart, want its one stream", ma.WatchCreates)
	}
}
