package integration5

import (
	"slices"
	"testing"
	"time"

	cache "github.com/regcache/cache/gomicro5"
)

// TestV5OnEtcd: regcache's v5 flavour in front of go-micro v5's etcd
// registry, read by go-micro v5 RPC through cache.NewSelector. Lookups
// make one registry call; a new server instance and a stopped one reach
// the cache as watch events, with no registry call; while etcd is down,
// for longer than the TTL, every lookup is served from stale data and
// every RPC succeeds; after etcd is back, an instance started then gets
// traffic.
func TestV5OnEtcd(t *testing.T) {
	const (
		name   = "it5.greeter"
		ttl    = 5 * time.Second
		retry  = time.Second
		outage = 7 * time.Second // longer than the TTL
	)
	log := &recordingLogger{}
	quiet := &recordingLogger{} // go-micro's servers and client
	t.Cleanup(func() { t.Logf("regcache's log:\n%s", log.text()) })

	s := startEtcd(t)
	reg := newCountingRegistry(newRegistry(s, time.Second))
	c := cache.New(reg, cache.WithTTL(ttl), cache.WithMinimumRetryInterval(retry), cache.WithLogger(log))
	t.Cleanup(c.Stop)
	startServer(t, s, name, "s1", quiet)

	// Lookups: the first goes to etcd, the rest are served from memory.
	svcs, err := c.GetService(name)
	if err != nil {
		t.Fatalf("GetService: %v", err)
	}
	filled := time.Now()
	if got := nodeIDs(svcs); !slices.Equal(got, []string{name + "-s1"}) {
		t.Fatalf("nodes %v, want [%s-s1]", got, name)
	}
	start := time.Now()
	const lookups = 10000
	for i := 0; i < lookups; i++ {
		if _, err := c.Lookup(name); err != nil {
			t.Fatalf("Lookup: %v", err)
		}
	}
	t.Logf("lookups: %d in %v (%v each); registry: %v", lookups, time.Since(start).Round(time.Microsecond),
		time.Since(start)/lookups, reg)
	if n := reg.Gets(name); n != 1 {
		t.Fatalf("%d GetService calls for %d lookups, want 1", n, lookups+1)
	}

	// RPC through v5's client and regcache's selector.
	sel := cache.NewSelector(c)
	cl := newClient(sel, quiet)
	for i := 0; i < 20; i++ {
		if id, err := hello(cl, name); err != nil || id != "s1" {
			t.Fatalf("RPC: answered by %q, %v; want s1", id, err)
		}
	}

	// A second instance registers: the watch stream brings it, no
	// registry call does.
	gets := reg.Gets(name)
	stop2 := startServer(t, s, name, "s2", quiet)
	took := waitFor(t, 10*time.Second, "s2 in the cache", func() bool {
		svcs, _ := c.Lookup(name)
		return slices.Contains(nodeIDs(svcs), name+"-s2")
	})
	t.Logf("s2 registered: in the cache %v later", took.Round(time.Microsecond))
	waitFor(t, 10*time.Second, "an RPC answered by s2", func() bool {
		id, err := hello(cl, name)
		return err == nil && id == "s2"
	})
	stop2()
	took = waitFor(t, 10*time.Second, "s2 gone from the cache", func() bool {
		svcs, _ := c.Lookup(name)
		return !slices.Contains(nodeIDs(svcs), name+"-s2")
	})
	t.Logf("s2 deregistered: gone from the cache %v later", took.Round(time.Microsecond))
	switch n := reg.Gets(name); {
	case time.Since(filled) >= ttl:
		// On a machine so loaded that this took a TTL, the entry's
		// refresh is due; the check would prove nothing.
		t.Logf("the TTL ran out before s2 was gone: %d GetService calls", n-gets)
	case n != gets:
		t.Errorf("%d GetService calls while s2 came and went, want none (the watch stream's events suffice)", n-gets)
	}
	if st := c.Stats(); st.EventsApplied < 2 {
		t.Errorf("EventsApplied %d, want at least 2", st.EventsApplied)
	}

	// The outage: for longer than the TTL, every lookup is served from
	// stale data at once, and every RPC reaches s1.
	gets = reg.Gets(name)
	misses := c.Stats().Misses
	s.Stop()
	down := time.Now()
	var (
		lat       []time.Duration
		rpcs, bad int
	)
	for time.Since(down) < outage {
		t0 := time.Now()
		svcs, err := c.GetService(name)
		lat = append(lat, time.Since(t0))
		if err != nil || !slices.Equal(nodeIDs(svcs), []string{name + "-s1"}) {
			t.Fatalf("lookup %v into the outage: %v, %v", time.Since(down).Round(time.Millisecond), nodeIDs(svcs), err)
		}
		if id, err := hello(cl, name); err != nil || id != "s1" {
			bad++
			t.Errorf("RPC %v into the outage: answered by %q, %v", time.Since(down).Round(time.Millisecond), id, err)
		} else {
			rpcs++
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := c.Stats()
	calls := reg.Gets(name) - gets
	t.Logf("outage of %v: %d lookups, all answered (p50 %v, p99 %v, max %v); %d RPCs succeeded, %d failed; %d GetService calls for %s; registry down: %v; stale served: %d, now %v old",
		time.Since(down).Round(time.Millisecond), len(lat), quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 1),
		rpcs, bad, calls, name, st.RegistryDown, st.StaleServes, st.StaleServedAge.Round(time.Millisecond))
	if max := 1 + int(outage/retry); calls > max {
		t.Errorf("%d GetService calls for %s during the outage, want at most %d (one per %v retry interval)", calls, name, max, retry)
	}
	if n := st.Misses - misses; n != 0 {
		t.Errorf("%d lookups waited for the registry during the outage, want none", n)
	}
	if st.StaleServes == 0 || st.StaleServedAge < ttl {
		t.Errorf("stale served %d times, now %v old; want data older than the TTL served", st.StaleServes, st.StaleServedAge)
	}

	// etcd is back. An instance started now gets traffic.
	s.Start()
	back := time.Now()
	startServer(t, s, name, "s3", quiet)
	waitFor(t, 30*time.Second, "an RPC answered by s3", func() bool {
		id, err := hello(cl, name)
		return err == nil && id == "s3"
	})
	t.Logf("etcd back: s3 registered and answered an RPC %v later; registry: %v", time.Since(back).Round(time.Millisecond), reg)
	sst := sel.(cache.Selector).Stats()
	t.Logf("selector: %d failures, %d ejections; cache: %d lookups, %d refreshes (%d failed), %d lists, %d events applied, %d watch reconnects",
		sst.Failures, sst.Ejections, sst.Cache.Lookups, sst.Cache.Refreshes, sst.Cache.RefreshErrors, sst.Cache.Lists, sst.Cache.EventsApplied, sst.Cache.WatchReconnects)
}
