package integration

import (
	"fmt"
	"testing"
	"time"

	cache "github.com/regcache/cache"
)

// TestWatchDrivenFreshness: with etcd up, registrations, deregistrations and
// lease expiries reach the cache through its single watch stream, without a
// single extra registry lookup.
func TestWatchDrivenFreshness(t *testing.T) {
	const name = "it.watch"
	s := startEtcd(t)
	writer := newEtcdRegistry(t, s, 5*time.Second)
	counted := newCountingRegistry(newEtcdRegistry(t, s, 5*time.Second))
	// A long TTL: nothing in this test may reach the cache through a TTL
	// refresh, only through watch events.
	c := newCache(t, counted, cache.WithTTL(10*time.Minute), cache.WithMinimumRetryInterval(500*time.Millisecond))

	mustRegister(t, writer, service(name, "n1"), registerTTL)
	svcs, err := c.GetService(name)
	if err != nil {
		t.Fatalf("first lookup: %v", err)
	}
	if got := nodeIDs(svcs); len(got) != 1 || got[0] != "n1" {
		t.Fatalf("first lookup: nodes %v, want [n1]", got)
	}
	warmUpWatch(t, c, writer, name)
	// The entry was fetched before the watch stream was established, so
	// the cache may re-validate it once, one MinimumRetryInterval after
	// the first lookup. Let that happen before counting.
	time.Sleep(1500 * time.Millisecond)
	base := counted.Gets(name)
	if base < 1 || base > 2 {
		t.Fatalf("lookups before the measured part: %d, want the first lookup plus at most one re-validation", base)
	}

	// 1. A new node appears within 2 s.
	n2 := service(name, "n2")
	mustRegister(t, writer, n2, registerTTL)
	took := waitFor(t, 2*time.Second, "registered node n2 in the cache", func() bool {
		return cachedIDs(c, name) == "n1,n2"
	})
	t.Logf("registered node appeared after %v", took)

	// 2. A deregistered node disappears within 2 s.
	mustDeregister(t, writer, n2)
	took = waitFor(t, 2*time.Second, "deregistered node n2 gone from the cache", func() bool {
		return cachedIDs(c, name) == "n1"
	})
	t.Logf("deregistered node disappeared after %v", took)

	// 3. A node registered with a short TTL that is never renewed goes
	// when etcd expires its lease. etcd's minimum lease TTL is 2 s with
	// the default election timeout, and it checks for expiry every
	// 500 ms.
	n3 := service(name, "n3")
	mustRegister(t, writer, n3, 2*time.Second)
	registered := time.Now()
	waitFor(t, 2*time.Second, "short-lease node n3 in the cache", func() bool {
		return cachedIDs(c, name) == "n1,n3"
	})
	waitFor(t, 15*time.Second, "expired node n3 gone from the cache", func() bool {
		return cachedIDs(c, name) == "n1"
	})
	t.Logf("node with a 2s lease disappeared %v after it was registered", time.Since(registered).Round(time.Millisecond))

	if got := counted.Gets(name); got != base {
		t.Fatalf("registry lookups for %s: %d after the changes, %d before: events must not cause lookups", name, got, base)
	}
	if got := counted.Watches(); got != 1 {
		t.Fatalf("Watch calls: %d, want one shared stream", got)
	}
	// GetService (the copying path) agrees with Lookup.
	svcs, err = c.GetService(name)
	if err != nil || len(nodeIDs(svcs)) != 1 || nodeIDs(svcs)[0] != "n1" {
		t.Fatalf("GetService after the changes: %v %v, want [n1]", nodeIDs(svcs), err)
	}
	if got := counted.Gets(name); got != base {
		t.Fatalf("registry lookups for %s: %d, want still %d", name, got, base)
	}
}

// TestWatchPerServiceOnEtcd: with WithWatchPerService, the cache watches
// its own services through the etcd plugin's WatchService: their changes
// arrive as events, those of services it never looked up do not arrive at
// all, and a service looked up later gets its watch too.
func TestWatchPerServiceOnEtcd(t *testing.T) {
	const name, later = "it.scoped", "it.scoped.later"
	s := startEtcd(t)
	writer := newEtcdRegistry(t, s, 5*time.Second)
	counted := newCountingRegistry(newEtcdRegistry(t, s, 5*time.Second))
	c := newCache(t, counted, cache.WithWatchPerService(), cache.WithTTL(10*time.Minute),
		cache.WithMinimumRetryInterval(500*time.Millisecond))

	mustRegister(t, writer, service(name, "n1"), registerTTL)
	mustRegister(t, writer, service(later, "l1"), registerTTL)
	if _, err := c.GetService(name); err != nil {
		t.Fatalf("first lookup: %v", err)
	}
	warmUpWatch(t, c, writer, name)
	// The first lookup's data predates its watch: one re-validation, a
	// retry interval later, and no other call.
	waitFor(t, 10*time.Second, "the re-validation of the first lookup's data", func() bool {
		return counted.Gets(name) >= 2
	})
	base := counted.Gets(name)
	if base != 2 {
		t.Fatalf("lookups of %s before the measured part: %d, want the first lookup and one re-validation", name, base)
	}

	for i := 0; i < 20; i++ {
		mustRegister(t, writer, service("it.scoped.other", fmt.Sprintf("o%d", i)), registerTTL)
	}
	mustRegister(t, writer, service(name, "n2"), registerTTL)
	waitFor(t, 2*time.Second, "registered node n2 in the cache", func() bool {
		return cachedIDs(c, name) == "n1,n2"
	})
	if got := counted.Gets(name); got != base {
		t.Fatalf("registry lookups for %s: %d after the event, %d before", name, got, base)
	}
	if st := c.Stats(); st.EventsIgnored != 0 {
		t.Fatalf("%d events ignored: the cache received changes of services it does not hold", st.EventsIgnored)
	}

	watches := counted.Watches()
	if _, err := c.GetService(later); err != nil {
		t.Fatalf("lookup of %s: %v", later, err)
	}
	waitFor(t, 2*time.Second, "a watch for the service looked up later", func() bool {
		return counted.Watches() > watches
	})
	mustRegister(t, writer, service(later, "l2"), registerTTL)
	waitFor(t, 2*time.Second, "registered node l2 in the cache", func() bool {
		return cachedIDs(c, later) == "l1,l2"
	})
	if st := c.Stats(); st.EventsIgnored != 0 {
		t.Fatalf("%d events ignored after the second watch", st.EventsIgnored)
	}
}
