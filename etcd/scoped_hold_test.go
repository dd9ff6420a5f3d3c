package etcd

// The scoped stream (scoped.go) as the services a cache holds change: held,
// dropped, held again, many at once, names that share a key prefix, names
// that get no watch. A cache over this package's registry, against an
// embedded etcd on loopback, through the cache's public API and real etcd
// writes.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cache "github.com/regcache/cache"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// pauseLogger is a cache logger that, the first time a line of the cache's
// event path ("a delete event left service <name> with no nodes") names a
// service in pauses, blocks the goroutine that writes it until the test
// releases it. The cache writes that line from its watch consumer, after
// applying the event, so the consumer stops at a known point of the
// stream: the events after it wait in the watcher, received but not
// delivered.
type pauseLogger struct {
	mu      sync.Mutex
	gates   map[string]chan struct{} // service -> closed to release
	paused  map[string]chan struct{} // service -> closed once paused
	hit     map[string]bool
	release sync.Once
}

func newPauseLogger(services ...string) *pauseLogger {
	l := &pauseLogger{gates: map[string]chan struct{}{}, paused: map[string]chan struct{}{}, hit: map[string]bool{}}
	for _, s := range services {
		l.gates[s] = make(chan struct{})
		l.paused[s] = make(chan struct{})
	}
	return l
}

func (l *pauseLogger) Init(...logger.Option) error                 { return nil }
func (l *pauseLogger) Options() logger.Options                     { return logger.Options{} }
func (l *pauseLogger) Fields(map[string]interface{}) logger.Logger { return l }
func (l *pauseLogger) Log(logger.Level, ...interface{})            {}
func (l *pauseLogger) String() string                              { return "pause" }

func (l *pauseLogger) Logf(_ logger.Level, format string, v ...interface{}) {
	if !strings.HasPrefix(format, "regcache: a delete event left service") {
		return
	}
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	var gate, paused chan struct{}
	for s, g := range l.gates {
		if strings.Contains(msg, fmt.Sprintf("%q", s)) && !l.hit[s] {
			l.hit[s] = true
			gate, paused = g, l.paused[s]
		}
	}
	l.mu.Unlock()
	if gate != nil {
		close(paused)
		<-gate
	}
}

// waitPaused waits until the consumer is paused at service's line.
func (l *pauseLogger) waitPaused(t *testing.T, service string) {
	t.Helper()
	select {
	case <-l.paused[service]:
	case <-time.After(10 * time.Second):
		t.Fatalf("the cache's consumer did not reach the event of %s within 10 s", service)
	}
}

func (l *pauseLogger) resume(service string) { close(l.gates[service]) }

// releaseAll lets every paused goroutine go (cleanup).
func (l *pauseLogger) releaseAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s, g := range l.gates {
		select {
		case <-g:
		default:
			close(g)
		}
		l.hit[s] = true
	}
}

// readEvery looks the names up every period until the test ends, so that
// idle eviction keeps them.
func readEvery(t *testing.T, c cache.Cache, period time.Duration, names ...string) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			for _, n := range names {
				c.Lookup(n)
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(func() { close(done); wg.Wait() })
}

func held(c cache.Cache, name string) bool {
	for _, s := range c.Services(name, "", 0) {
		if s.Name == name {
			return true
		}
	}
	return false
}

func sortedIDs(c cache.Cache, name string) []string {
	ids := lookupIDs(c, name)
	sort.Strings(ids)
	return ids
}

func del(t *testing.T, cl *clientv3.Client, name, node string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cl.Delete(ctx, nodeKey(name, node))
	if err != nil {
		t.Fatalf("delete %s/%s: %v", name, node, err)
	}
	return resp.Header.Revision
}

// staysAt fails the test if cond stops holding within d: the bounded wait
// for something that must NOT happen.
func staysAt(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !cond() {
			t.Errorf("within %v: %s", d, what)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logGoroutines logs the stacks of the goroutines that have fn in them.
func logGoroutines(t *testing.T, fn string) {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			lines := strings.Split(g, "\n")
			if len(lines) > 16 {
				lines = lines[:16]
			}
			t.Logf("%s", strings.Join(lines, "\n"))
		}
	}
}

// A service dropped (idle eviction) and held again before the sender has
// cancelled its old watch: the old watch's events still reach the cache, in
// order, and the new watch starts no later than where the old one stood, so
// that an old put applied over the fresh fetch is followed by the delete
// that corrects it. It holds off a bug where the old watch's remaining
// events were dropped once it was cancelled: an old put delivered after the
// fresh fetch stayed in the cache, its correcting delete dropped and the new
// watch starting after it.
//
// The sender's delay is made with the package's beforeSend hook (the same
// as gateSender: a goroutine not scheduled for a moment on a loaded host);
// the consumer's lag with a logger that blocks on one of the cache's log
// lines (public API: cache.WithLogger).
func TestAServiceHeldAgainGetsTheCorrectionsOfItsOldWatch(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("x", "1", "C"))
	putNode(t, cl, service("gate1", "1", "g"))
	putNode(t, cl, service("gate2", "1", "g"))
	lg := newPauseLogger("gate1", "gate2")
	t.Cleanup(lg.releaseAll) // runs before the cache's Stop
	c, reg := newScopedCache(t, s.Addr(), cache.WithIdleEviction(time.Second), cache.WithMinimumRetryInterval(0),
		cache.WithLastKnownNodes(), cache.WithLogger(lg))
	t.Cleanup(lg.releaseAll)
	w := reg.scoped(t)
	for _, n := range []string{"x", "gate1", "gate2"} {
		if ids := lookupIDsAfterGet(t, c, n); len(ids) != 1 {
			t.Fatalf("%s: %v", n, ids)
		}
	}
	readEvery(t, c, 100*time.Millisecond, "gate1", "gate2")

	// Hold the sender at the top of its loop.
	var arrivals atomic.Int32
	release := make(chan struct{})
	var releaseOnce sync.Once
	open := func() { releaseOnce.Do(func() { close(release) }) }
	hook := func() {
		if arrivals.Add(1) == 1 {
			<-release
		}
	}
	beforeSend.Store(&hook)
	t.Cleanup(func() { open(); beforeSend.Store(nil) })
	c.GetService("trigger") // a change: the sender applies it, then waits
	eventually(t, "the sender held", func() bool { return arrivals.Load() == 1 })

	// The stream, in order: gate1's last node deleted (the consumer
	// pauses there), x/B put, gate2's deleted (pauses again), x/B
	// deleted. The truth at the end: x = {C}.
	del(t, cl, "gate1", "g")
	putNode(t, cl, service("x", "1", "B"))
	del(t, cl, "gate2", "g")
	deleted := del(t, cl, "x", "B")
	lg.waitPaused(t, "gate1")
	// The receiver takes in the rest, x/B's delete last, while the
	// consumer is paused: they wait in the watcher, received.
	eventually(t, "x/B's delete received", func() bool { _, _, next := w.watchOf("x"); return next > deleted })

	// x, not read since, is evicted; held again at once.
	eventually(t, "x evicted", func() bool { return !held(c, "x") })
	if ids := lookupIDsAfterGet(t, c, "x"); len(ids) != 1 || ids[0] != "C" {
		t.Fatalf("x fetched again: %v, want [C]", ids)
	}
	lg.resume("gate1")
	lg.waitPaused(t, "gate2")
	t.Logf("x after the old watch's put: %v", sortedIDs(c, "x"))

	// The sender cancels x's old watch and opens the new one.
	open()
	eventually(t, "the sender's changes applied", func() bool { return arrivals.Load() >= 2 })
	c.GetService("trigger2")
	eventually(t, "the sender round again", func() bool { return arrivals.Load() >= 3 })
	lg.resume("gate2")

	eventually(t, "the consumer past gate2", func() bool { return len(lookupIDs(c, "gate2")) <= 1 })
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ids := sortedIDs(c, "x"); len(ids) == 1 && ids[0] == "C" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("x served %v 10 s after x/B was deleted; the registry holds [C]", sortedIDs(c, "x"))
}

// Names whose keys are alike ("a/b" and "a-b") share one watch: one of
// them dropped (idle eviction) and held again, the other, held
// throughout, keeps getting its changes as events. (The plugin's
// GetService of "a/b" answers the nodes under a-b's keys, whatever their
// service: only a-b's truth is asserted.)
func TestNamesOfOneKeyPrefixShareAWatch(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("a-b", "1", "dash1"))
	c, reg := newScopedCache(t, s.Addr(), cache.WithIdleEviction(time.Second), cache.WithMinimumRetryInterval(0))
	if ids := lookupIDsAfterGet(t, c, "a-b"); len(ids) != 1 {
		t.Fatalf("a-b: %v", ids)
	}
	c.GetService("a/b")
	readEvery(t, c, 100*time.Millisecond, "a-b")
	eventually(t, "a/b evicted", func() bool { return !held(c, "a/b") })
	putNode(t, cl, service("a-b", "1", "dash2"))
	eventually(t, "a-b's change served after a/b dropped", func() bool { return len(lookupIDs(c, "a-b")) == 2 })
	c.GetService("a/b")
	for i := 0; i < 3; i++ {
		eventually(t, "a/b evicted", func() bool { return !held(c, "a/b") })
		c.GetService("a/b")
		putNode(t, cl, service("a-b", "1", fmt.Sprintf("dash%d", 3+i)))
	}
	del(t, cl, "a-b", "dash1")
	eventually(t, "a-b served its truth", func() bool {
		return fmt.Sprint(sortedIDs(c, "a-b")) == "[dash2 dash3 dash4 dash5]"
	})
	if k := reg.callsFor("a-b"); k != 1 {
		t.Errorf("a-b: %d registry calls, want 1", k)
	}
}

// Churn of holds and drops (idle eviction of hundreds of services, round
// after round): each dropped service's watch is cancelled and remembered
// until the cache is done with it. The remembered watches must not grow
// with the churn: etcd acknowledges each cancel at once and no event of them
// is pending, so each round's are forgotten at the next change
// (closingWatches.sweep runs only in apply and at an end: a cache that goes
// idle keeps the last batch until it holds or drops another service).
func TestCancelledWatchesAreForgottenUnderChurn(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	const n, rounds = 200, 3
	putNode(t, cl, service("idle-r0-000", "1", "a"))
	c, reg := newScopedCache(t, s.Addr(), cache.WithIdleEviction(time.Second), cache.WithMinimumRetryInterval(0))
	w := reg.scoped(t)
	closing := func() (byID, byPrefix int) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.closing.byID), len(w.closing.byPrefix)
	}
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) { defer wg.Done(); c.GetService(fmt.Sprintf("idle-r%d-%03d", r, i)) }(i)
		}
		wg.Wait()
		eventually(t, "every service evicted", func() bool { return c.Stats().Entries == 0 })
		if k, _ := closing(); k > n {
			t.Errorf("round %d: %d cancelled watches remembered, more than the %d services of the round", r, k, n)
		}
	}
	eventually(t, "etcd acknowledged every cancel", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, kw := range w.closing.byID {
			if !kw.finished {
				return false
			}
		}
		return true
	})
	if k, _ := closing(); k == 0 {
		t.Log("(the last batch was swept by a later change already)")
	}
	c.GetService("next")
	if !within(5*time.Second, func() bool { k, p := closing(); return k == 0 && p == 0 }) {
		k, p := closing()
		w.mu.Lock()
		var fin, q, late int
		for _, kw := range w.closing.byID {
			if kw.finished {
				fin++
			}
			if kw.queued.Load() != 0 {
				q++
			}
			if kw.doneSeq.Load() > w.applied {
				late++
			}
		}
		w.mu.Unlock()
		t.Errorf("%d (%d prefixes) cancelled watches still remembered after the next change: %d of them acknowledged by etcd, %d with responses queued, %d done after the last change applied", k, p, fin, q, late)
	}
}

// A service named "." (or "..") is a name the cache holds like any other,
// but the plugin keeps its nodes outside a folder of their own: a watch of
// its keys would be of the whole registry ("/micro/"), carrying every
// service's events. It gets no watch (its changes reach the cache at its
// refreshes), and no event of a service not held reaches the cache's
// watcher. It holds off a bug where its watch did.
func TestADotNameGetsNoWatch(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	c, _ := newScopedCache(t, s.Addr())
	for _, name := range []string{".", ".."} {
		if _, err := c.GetService(name); err != nil && !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("GetService(%q): %v", name, err)
		}
	}
	if got := watchPrefix("."); got != prefix {
		t.Logf("watchPrefix(\".\") = %q", got)
	}
	before := c.Stats().EventsIgnored
	for i := 0; i < 5; i++ {
		putNode(t, cl, service("other", "1", fmt.Sprintf("o%d", i)))
	}
	putNode(t, cl, service("held", "1", "h"))
	if _, err := c.GetService("held"); err != nil {
		t.Fatalf("GetService(held): %v", err)
	}
	putNode(t, cl, service("held", "1", "h2"))
	eventually(t, "held's change served", func() bool { return len(lookupIDs(c, "held")) == 2 })
	if n := c.Stats().EventsIgnored - before; n != 0 {
		t.Errorf("%d events of services not held reached the cache's watcher (through the watch of %q)", n, watchPrefix("."))
	}
}

// Hundreds of services held while etcd churns on them and on others: each
// is served its truth, by events, with one registry call each, no event of
// a service not held reaches the cache, and Stop, in the middle of more
// churn, leaves no goroutine.
func TestManyServicesHeldWhileEtcdChurns(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	c, reg := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(time.Minute))
	const n = 200
	name := func(i int) string { return fmt.Sprintf("svc-%03d", i) }
	for i := 0; i < n; i++ {
		putNode(t, cl, service(name(i), "1", "a"))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // churn on services never held
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cl.Put(ctx, nodeKey("unheld", fmt.Sprint(i%7)), encode(service("unheld", "1", fmt.Sprint(i%7))))
			cancel()
		}
	}()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c.GetService(name(i))
		}(i)
	}
	// Changes racing the watches' creation: b put, a deleted, in one txn.
	for i := 0; i < n; i++ {
		txn(t, cl, clientv3.OpPut(nodeKey(name(i), "b"), encode(service(name(i), "1", "b"))),
			clientv3.OpDelete(nodeKey(name(i), "a")))
	}
	close(stop)
	wg.Wait()
	eventually(t, "every service served [b]", func() bool {
		for i := 0; i < n; i++ {
			if ids := lookupIDs(c, name(i)); len(ids) != 1 || ids[0] != "b" {
				return false
			}
		}
		return true
	})
	for i := 0; i < n; i++ {
		if k := reg.callsFor(name(i)); k != 1 {
			t.Errorf("%s: %d registry calls, want 1", name(i), k)
		}
	}
	if k := c.Stats().EventsIgnored; k != 0 {
		t.Errorf("%d events of services not held reached the cache", k)
	}
	// Stop while the services change again.
	go func() {
		for i := 0; i < n; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cl.Put(ctx, nodeKey(name(i), "c"), encode(service(name(i), "1", "c")))
			cancel()
		}
	}()
	start := time.Now()
	c.Stop()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %v", d)
	}
}

// A lease of many nodes of several held services expires at once: one
// response of many deletes, all applied.
func TestALeaseOfManyNodesRevokedAtOnce(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := cl.Grant(ctx, 60)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	names := []string{"l1", "l2", "l3"}
	for _, n := range names {
		putNode(t, cl, service(n, "1", "keep"))
		for i := 0; i < 40; i++ {
			id := fmt.Sprintf("n%02d", i)
			if _, err := cl.Put(ctx, nodeKey(n, id), encode(service(n, "1", id)), clientv3.WithLease(lease.ID)); err != nil {
				t.Fatalf("put: %v", err)
			}
		}
	}
	c, reg := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(time.Minute))
	for _, n := range names {
		if ids := lookupIDsAfterGet(t, c, n); len(ids) != 41 {
			t.Fatalf("%s: %d nodes", n, len(ids))
		}
	}
	if _, err := cl.Revoke(ctx, lease.ID); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	eventually(t, "every leased node gone", func() bool {
		for _, n := range names {
			if ids := lookupIDs(c, n); len(ids) != 1 || ids[0] != "keep" {
				return false
			}
		}
		return true
	})
	for _, n := range names {
		if k := reg.callsFor(n); k != 1 {
			t.Errorf("%s: %d registry calls, want 1", n, k)
		}
	}
}

// etcd restarted, with a service first held while it is down: once etcd
// is back, the cache serves every held service's truth, and later changes
// come as events.
func TestAServiceFirstHeldWhileEtcdIsDown(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcdWith(t, fastElection)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("before", "1", "b1"))
	putNode(t, cl, service("during", "1", "d1"))
	c, _ := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(100*time.Millisecond), cache.WithProbeInterval(200*time.Millisecond))
	if ids := lookupIDsAfterGet(t, c, "before"); len(ids) != 1 {
		t.Fatalf("before: %v", ids)
	}
	s.Stop()
	eventually(t, "the stream lost", func() bool { return c.Stats().Stream != cache.StreamConnected })
	c.GetService("during") // fails: etcd is down, but the service is held
	s.Start()
	putNode(t, cl, service("before", "1", "b2"))
	putNode(t, cl, service("during", "1", "d2"))
	eventually(t, "the stream back", func() bool { return c.Stats().Stream == cache.StreamConnected })
	eventually(t, "both served their truth", func() bool {
		return len(lookupIDs(c, "before")) == 2 && len(lookupIDs(c, "during")) == 2
	})
	putNode(t, cl, service("during", "1", "d3"))
	eventually(t, "during's later change", func() bool { return len(lookupIDs(c, "during")) == 3 })
}
