package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// TestRecovery: etcd is closed, then restarted on the same data directory
// and port. The cache is neither stopped nor recreated. A change made in
// etcd while the cache was cut off reaches it within seconds of its
// reconnect through the re-validation that follows the registry's
// recovery, and the watch stream delivers events again.
//
// The test leaves the re-validation the only way for the change to reach
// the cache: the TTL is ten minutes, and the cache's watch streams drop
// every event of the changed service from the outage on (the etcd plugin
// loses most of the events replayed after a gap anyway). The cache notices
// the outage as a client would, from lookups of two services it never had
// that fail, and its recovery from one of them answered.
//
// The cache's etcd client goes through a proxy, so that the test decides
// when it is disconnected: it stays cut off for a while after etcd is back,
// while another client changes the registry.
func TestRecovery(t *testing.T) {
	const (
		registryTimeout = time.Second
		ttl             = 10 * time.Minute
		retryInterval   = time.Second
		// How soon after the reconnect the change must show: well under
		// the TTL, and above the etcd client's reconnect backoff after a
		// few seconds' outage plus a probe interval.
		limit = 20 * time.Second
	)
	const a, b = "it.recovery.a", "it.recovery.b"
	colds := []string{"it.recovery.cold1", "it.recovery.cold2"}
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
	counted.DropEvents(func(res *registry.Result) bool { return res.Service.Name == a })

	// Outage: the cache is cut off and etcd is closed. A caller looks up
	// two services the cache never had, every 50 ms, until the end of the
	// test: they fail, and then serve as the cache's probes.
	p.Cut()
	s.Stop()
	down := time.Now()
	stopCold := make(chan struct{})
	coldDone := make(chan struct{})
	go func() {
		defer close(coldDone)
		for i := 0; ; i++ {
			select {
			case <-stopCold:
				return
			case <-time.After(50 * time.Millisecond):
			}
			c.GetService(colds[i%2]) //nolint:errcheck // they fail, or are not found
		}
	}()
	t.Cleanup(func() {
		close(stopCold)
		<-coldDone
	})
	for time.Since(down) < 3*time.Second {
		svcs, err := c.GetService(a)
		if err != nil || !hasNode(svcs, "a1") {
			t.Fatalf("lookup during the outage: %v %v, want [a1]", nodeIDs(svcs), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitFor(t, 10*time.Second, "the cache holds the registry down", func() bool { return c.Stats().RegistryDown })

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
	took := waitFor(t, limit, "the change made while the cache was cut off", func() bool {
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
	t.Logf("the change made while cut off reached the cache %v after the reconnect, with the TTL at %v and its events dropped; states seen: %v; registry lookups of %s since the change: %d; new Watch calls: %d",
		took.Round(time.Millisecond), ttl, seen, a, counted.Gets(a)-gets, counted.Watches()-watches)
	if st := c.Stats(); st.RegistryDown {
		t.Errorf("the registry is still held down after the change came through")
	}

	// The watch stream works again, without Stop, New or a new Watch
	// call. A service first cached now: once the stream is seen
	// delivering its events, a node registered and one deregistered
	// reach the cache through it within 2 s (the TTL cannot).
	mustRegister(t, writer, service(b, "b1"), registerTTL)
	waitFor(t, 10*time.Second, "lookup of "+b+" after the restart", func() bool {
		svcs, err := c.GetService(b)
		return err == nil && joinIDs(svcs) == "b1"
	})
	warmUpWatch(t, c, writer, b)
	getsB := counted.Gets(b)
	mustRegister(t, writer, service(b, "b2"), registerTTL)
	took = waitFor(t, 2*time.Second, "registration after the restart, through the watch stream", func() bool {
		return streamDelivered(counted, "create "+b+" [b2]") && cachedIDs(c, b) == "b1,b2"
	})
	t.Logf("a node registered after the restart reached the cache through the watch stream in %v", took.Round(time.Millisecond))
	mustDeregister(t, writer, service(b, "b1"))
	took = waitFor(t, 2*time.Second, "deregistration after the restart, through the watch stream", func() bool {
		return streamDelivered(counted, "delete "+b+" [b1]") && cachedIDs(c, b) == "b2"
	})
	t.Logf("a node deregistered after the restart left the cache through the watch stream in %v, %v after the reconnect; Watch calls in total: %d",
		took.Round(time.Millisecond), time.Since(restored).Round(time.Millisecond), counted.Watches())
	if n := counted.Gets(b) - getsB; n != 0 {
		t.Errorf("%d registry lookups of %s while its changes came through the stream, want none", n, b)
	}
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
