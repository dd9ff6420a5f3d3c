package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	cache "github.com/regcache/cache"
)

// TestRecovery: etcd is closed, then restarted on the same data directory
// and port. The cache is neither stopped nor recreated. Changes made in etcd
// while the cache was cut off, and changes made after it is back, reach it
// within seconds.
//
// The cache's etcd client goes through a proxy, so that the test decides
// when it is disconnected: it stays cut off for a while after etcd is back,
// while another client changes the registry.
func TestRecovery(t *testing.T) {
	const (
		registryTimeout = 2 * time.Second
		ttl             = 4 * time.Second
		retryInterval   = time.Second
	)
	const a, b = "it.recovery.a", "it.recovery.b"
	s := startEtcd(t)
	p := startProxy(t, s.Addr())
	writer := newEtcdRegistry(t, s, registryTimeout)
	counted := newCountingRegistry(newEtcdRegistryAt(t, p.Addr(), registryTimeout))
	c := newCache(t, counted, cache.WithTTL(ttl), cache.WithMinimumRetryInterval(retryInterval))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("watch stream of the cache:\n%s", strings.Join(counted.Events(), "\n"))
		}
	})

	mustRegister(t, writer, service(a, "a1"), registerTTL)
	if _, err := c.GetService(a); err != nil {
		t.Fatalf("lookup before the outage: %v", err)
	}
	warmUpWatch(t, c, writer, a)

	// Outage: the cache is cut off and etcd is closed.
	p.Cut()
	s.Stop()
	down := time.Now()
	for time.Since(down) < 3*time.Second {
		svcs, err := c.GetService(a)
		if err != nil || !hasNode(svcs, "a1") {
			t.Fatalf("lookup during the outage: %v %v, want stale [a1]", nodeIDs(svcs), err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// etcd is back on the same data directory and port. The cache is
	// still cut off while the registry changes: a1 goes, a2 and a3 come.
	s.Start()
	counted.record("etcd restarted")
	t.Logf("etcd restarted after %v", time.Since(down).Round(time.Millisecond))
	writer = newEtcdRegistry(t, s, registryTimeout)
	mustDeregister(t, writer, service(a, "a1"))
	mustRegister(t, writer, service(a, "a2"), registerTTL)
	mustRegister(t, writer, service(a, "a3"), registerTTL)
	time.Sleep(500 * time.Millisecond)
	gets, watches := counted.Gets(a), counted.Watches()

	// The cache's connection comes back. Nothing calls Stop or New.
	p.Restore()
	counted.record("proxy restored")
	restored := time.Now()
	var seen []string // the distinct states the cache went through
	took := waitFor(t, 30*time.Second, "changes made while the cache was cut off", func() bool {
		svcs, err := c.GetService(a)
		got := "<" + fmt.Sprint(err) + ">"
		if err == nil {
			got = "[" + joinIDs(svcs) + "]"
		}
		if len(seen) == 0 || seen[len(seen)-1] != got {
			seen = append(seen, got)
		}
		return got == "[a2,a3]"
	})
	t.Logf("changes made while cut off reached the cache %v after the reconnect; states seen: %v; registry lookups of %s since the changes: %d; new Watch calls: %d",
		took.Round(time.Millisecond), seen, a, counted.Gets(a)-gets, counted.Watches()-watches)

	// Changes after the restart. A service first cached now, and a node
	// added right away: it reaches the cache within seconds. It may come
	// through the watch stream or through the TTL refresh: the etcd
	// client resumes the watch a little after its first unary call
	// succeeds, and the plugin's Next returns only the first event of the
	// response that replays the gap, so a change made in between can be
	// lost to the stream.
	mustRegister(t, writer, service(b, "b1"), registerTTL)
	waitFor(t, 10*time.Second, "lookup of "+b+" after the restart", func() bool {
		svcs, err := c.GetService(b)
		return err == nil && joinIDs(svcs) == "b1"
	})
	getsB := counted.Gets(b)
	counted.record("registering b2")
	mustRegister(t, writer, service(b, "b2"), registerTTL)
	took = waitFor(t, ttl+retryInterval+10*time.Second, "node registered after the restart", func() bool {
		svcs, err := c.GetService(b)
		return err == nil && joinIDs(svcs) == "b1,b2"
	})
	t.Logf("a node registered right after the restart reached the cache in %v; through the watch stream: %v; registry lookups of %s meanwhile: %d",
		took.Round(time.Millisecond), streamDelivered(counted, "create "+b+" [b2]"), b, counted.Gets(b)-getsB)

	// The cache's watch stream works again, without Stop, New or a new
	// Watch call: once it is seen delivering, a change reaches the cache
	// through it within 2 s.
	warmUpWatch(t, c, writer, b)
	mustDeregister(t, writer, service(b, "b1"))
	took = waitFor(t, 2*time.Second, "deregistration after the restart, through the watch stream", func() bool {
		return streamDelivered(counted, "delete "+b+" [b1]") && cachedIDs(c, b) == "b2"
	})
	t.Logf("a node deregistered after the restart left the cache through the watch stream in %v, %v after the reconnect; Watch calls in total: %d",
		took.Round(time.Millisecond), time.Since(restored).Round(time.Millisecond), counted.Watches())
}

// streamDelivered reports whether the cache's watch stream returned an event
// whose record ends in what ("create svc [node]").
func streamDelivered(c *countingRegistry, what string) bool {
	for _, e := range c.Events() {
		if strings.HasSuffix(e, "Next: "+what) {
			return true
		}
	}
	return false
}
