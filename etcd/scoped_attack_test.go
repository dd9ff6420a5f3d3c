package etcd

// Attacks on the scoped watch stream (scoped.go): a cache over this
// package's registry, against an embedded etcd on loopback, driven through
// the cache's public API and real etcd writes.

// Each test here attacks the scoped stream through the public API. A
// comment that describes a failure tells what the attack found; each was
// fixed since, and the test now holds the fix.
import (
	"context"
	"errors"
	"fmt"
	"net"
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

func compact(t *testing.T, cl *clientv3.Client, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cl.Compact(ctx, rev); err != nil {
		t.Fatalf("compact %d: %v", rev, err)
	}
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

// ATTACK 1. A service dropped (idle eviction) and held again before the
// sender has cancelled its old watch: the old watch's events, received
// before the service was held again (so older than its fetch and than the
// new watch's start), are still delivered while the old watch is not yet
// marked dead, and the rest of them are dropped once it is. An old put
// delivered after the fresh fetch, whose correcting delete is then
// dropped, stays in the cache: the new watch starts after that delete.
//
// The sender's delay is made with the package's beforeSend hook (the same
// as gateSender: a goroutine not scheduled for a moment on a loaded host);
// the consumer's lag with a logger that blocks on one of the cache's log
// lines (public API: cache.WithLogger).
func TestAttackHeldAgainOldWatchEventStaysAfterItsCorrectionIsDropped(t *testing.T) {
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

// ATTACK 2. A service looked up and not found, while the stream has been
// quiet: the revision its watch starts from (the last one etcd reported
// on the stream, long ago) has been compacted, so the watch restarts
// "from now" once etcd says so (etcd checks compaction on its unsynced
// watchers every 100 ms), and Revalidate is called, which does nothing
// for an entry without data. A registration made between the not-found
// answer and the restarted watch's creation is never delivered: the cache
// keeps answering not-found for the whole retry window.
func TestAttackCompactedWatchStartLosesTheRegistrationOfAServiceNotFound(t *testing.T) {
	lateRegistrations(t, true)
}

// Control of ATTACK 2: the same without the compaction passes.
func TestAttackControlLateRegistrationWithoutCompaction(t *testing.T) {
	lateRegistrations(t, false)
}

func lateRegistrations(t *testing.T, compactFirst bool) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	c, reg := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(time.Minute))
	var names []string
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("late%d", i)
		names = append(names, name)
		// Services not held change: the stream hears nothing of it, and
		// etcd compacts away the revisions it last reported.
		putNode(t, cl, service("unheld", "1", "u1"))
		putNode(t, cl, service("unheld", "1", "u2"))
		rev := putNode(t, cl, service("unheld", "1", "u3"))
		if compactFirst {
			compact(t, cl, rev)
		}
		if _, err := c.GetService(name); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("GetService(%s): %v", name, err)
		}
		putNode(t, cl, service(name, "1", "n1")) // registered just after
	}
	deadline := time.Now().Add(10 * time.Second)
	var missing []string
	for time.Now().Before(deadline) {
		missing = missing[:0]
		for _, n := range names {
			if len(lookupIDs(c, n)) != 1 {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, n := range missing {
		_, err := c.Lookup(n)
		t.Errorf("%s registered, but the cache still answers %v 10 s later (%d registry calls)", n, err, reg.callsFor(n))
	}
}

// ATTACK 2b. The same with a service that has data: its node registered in
// the gap reaches the cache only at the re-validation, which waits for the
// retry window (here a minute), not as an event.
func TestAttackCompactedWatchStartDelaysANodeOfAHeldService(t *testing.T) {
	nodeInTheGap(t, true)
}

// Control of ATTACK 2b.
func TestAttackControlNodeInTheGapWithoutCompaction(t *testing.T) {
	nodeInTheGap(t, false)
}

func nodeInTheGap(t *testing.T, compactFirst bool) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("svc", "1", "a"))
	c, _ := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(time.Minute))
	putNode(t, cl, service("unheld", "1", "u1"))
	putNode(t, cl, service("unheld", "1", "u2"))
	if rev := putNode(t, cl, service("unheld", "1", "u3")); compactFirst {
		compact(t, cl, rev)
	}
	if ids := lookupIDsAfterGet(t, c, "svc"); len(ids) != 1 {
		t.Fatalf("svc: %v", ids)
	}
	putNode(t, cl, service("svc", "1", "b"))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if len(lookupIDs(c, "svc")) == 2 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("svc/b registered, the cache serves %v 10 s later", sortedIDs(c, "svc"))
}

// ATTACK 3. "No extra registry calls in the normal case": a cache whose
// held services are quiet learns newer revisions only from the watchdog's
// progress requests, every few seconds. etcd compacting up to its latest
// revision just before a service is first held compacts the revision its
// watch starts from: the watch starts at the compaction, and the service
// is fetched once more, in case the compaction came after its first
// fetch. That second call is the price, and the service is served right.
func TestAttackQuietStreamAndCompactionCostASecondRegistryCall(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("svc", "1", "a"))
	c, reg := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(100*time.Millisecond))
	for i := 0; i < 3; i++ {
		putNode(t, cl, service("unheld", "1", fmt.Sprintf("u%d", i)))
	}
	compact(t, cl, putNode(t, cl, service("unheld", "1", "last")))
	if ids := lookupIDsAfterGet(t, c, "svc"); len(ids) != 1 {
		t.Fatalf("svc: %v", ids)
	}
	eventually(t, "the second call", func() bool { return reg.callsFor("svc") == 2 })
	putNode(t, cl, service("svc", "1", "b"))
	eventually(t, "svc's change served", func() bool { return len(lookupIDs(c, "svc")) == 2 })
	staysAt(t, time.Second, "a third registry call for svc", func() bool { return reg.callsFor("svc") == 2 })
}

// Control of ATTACK 3.
func TestAttackControlOneCallWithoutCompaction(t *testing.T) {
	oneCall(t)
}

func oneCall(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("svc", "1", "a"))
	c, reg := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(100*time.Millisecond))
	for i := 0; i < 3; i++ {
		putNode(t, cl, service("unheld", "1", fmt.Sprintf("u%d", i)))
	}
	putNode(t, cl, service("unheld", "1", "last"))
	if ids := lookupIDsAfterGet(t, c, "svc"); len(ids) != 1 {
		t.Fatalf("svc: %v", ids)
	}
	staysAt(t, 3*time.Second, "a second registry call for svc, which did not change",
		func() bool { return reg.callsFor("svc") == 1 })
}

// ATTACK 4. "Events of services not held never reach the client": a
// service named "." (or "..") is a name the cache holds like any other,
// but its key prefix, path.Join'ed, is the whole registry ("/micro/") so
// its watch carries every service's events. The watch filter drops them,
// but only after etcd sent them and the watcher read their names.
func TestAttackDotNameWatchesTheWholeRegistry(t *testing.T) {
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

// After a watch restarted on a compaction, the service's later changes
// come as events, at the cost of one registry call more.
func TestAttackRestartedWatchDeliversLaterChanges(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	c, reg := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(time.Minute))
	w := reg.scoped(t)
	putNode(t, cl, service("unheld", "1", "u1"))
	putNode(t, cl, service("unheld", "1", "u2"))
	compacted := putNode(t, cl, service("unheld", "1", "u3"))
	compact(t, cl, compacted)
	if _, err := c.GetService("later"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetService(later): %v", err)
	}
	// etcd finds the watch's start compacted on a timer of its own (it
	// checks its unsynced watches every 100 ms), which no hook reaches:
	// the restart is waited for by what shows it done, the watch from
	// the compaction acknowledged.
	eventually(t, "later's watch restarted at the compaction and acknowledged", func() bool {
		id, created, next := w.watchOf("later")
		return id != 0 && created && next >= compacted
	})
	// The restart re-validated later: its retry window open, the next
	// lookup asks the registry once more. Once it has, the window is
	// shut for a minute, and the change below can only come as an event.
	eventually(t, "later fetched again", func() bool {
		c.GetService("later")
		return reg.callsFor("later") == 2
	})
	putNode(t, cl, service("later", "1", "n1"))
	eventually(t, "later served", func() bool { return len(lookupIDs(c, "later")) == 1 })
	if n := reg.callsFor("later"); n != 2 {
		t.Errorf("%d registry calls for later, want 2: its first fetch and the one after the restart", n)
	}
}

// freezeProxy is a TCP proxy in front of etcd whose connections can be
// frozen: they stay open, but nothing crosses them, as through a network
// that drops every packet of an established connection.
type freezeProxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	frozen chan struct{} // nil while forwarding; closed to thaw
	conns  []net.Conn
}

func startFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &freezeProxy{target: target, ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(up, c)
			go p.pipe(c, up)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.thaw()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *freezeProxy) Addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			f := p.frozen
			p.mu.Unlock()
			if f != nil {
				<-f
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

func (p *freezeProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

// ATTACK 5. "A create not acknowledged within the registry timeout fails
// the stream": the sender checks for overdue watches only after it has
// sent every request waiting. On a connection that has gone silent (no
// RST: a peer or network that drops packets) with enough services held
// meanwhile, the requests exceed HTTP/2's flow-control window, Send blocks
// until etcd's window update, which never comes, and the check never
// runs: the stream stays "connected", Next blocks, for as long as the
// connection stays silent. With a few services held, the same freeze fails
// the stream within the timeout (the control below).
func TestAttackSilentConnectionWithManyHoldsNeverFailsTheStream(t *testing.T) {
	silentConnection(t, 1500)
}

// Control of ATTACK 5.
func TestAttackControlSilentConnectionWithFewHolds(t *testing.T) {
	silentConnection(t, 5)
}

func silentConnection(t *testing.T, holds int) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	p := startFreezeProxy(t, s.Addr())
	reg := &probe{Registry: newTestRegistry(t, p.Addr(), time.Second)}
	c := cache.New(reg, cache.WithTTL(time.Hour))
	var stopped atomic.Bool
	t.Cleanup(func() {
		if !stopped.Load() {
			c.Stop()
		}
	})
	if _, err := c.GetService("anchor"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetService(anchor): %v", err)
	}
	eventually(t, "the stream established", func() bool { return c.Stats().Stream == cache.StreamConnected })
	p.freeze()
	var wg sync.WaitGroup
	for i := 0; i < holds; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c.GetService(fmt.Sprintf("held-while-silent-%04d", i))
		}(i)
	}
	wg.Wait()
	t.Logf("%d entries held", c.Stats().Entries)
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Stream == cache.StreamConnected && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if st := c.Stats().Stream; st == cache.StreamConnected {
		t.Errorf("the stream is still %q 10 s after %d watches were asked for on a silent connection (timeout 1 s)", st, holds)
		logGoroutines(t, "(*scopedWatcher).send")
	}
	start := time.Now()
	c.Stop()
	stopped.Store(true)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %v", d)
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

// Hundreds of services held while etcd churns on them and on others: each
// is served its truth, by events, with one registry call each, no event of
// a service not held reaches the cache, and Stop, in the middle of more
// churn, leaves no goroutine.
func TestAttackManyHeldWhileEtcdChurns(t *testing.T) {
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

// Names whose keys are alike ("a/b" and "a-b") share one watch: one of
// them dropped (idle eviction) and held again, the other, held
// throughout, keeps getting its changes as events. (The plugin's
// GetService of "a/b" answers the nodes under a-b's keys, whatever their
// service: only a-b's truth is asserted.)
func TestAttackSharedPrefixDroppedAndHeldAgain(t *testing.T) {
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

// A lease of many nodes of several held services expires at once: one
// response of many deletes, all applied.
func TestAttackLeaseRevokedInBatch(t *testing.T) {
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
func TestAttackHeldWhileEtcdDownThenRestarted(t *testing.T) {
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
