package etcd

// Second round of attacks on the scoped watch stream (scoped.go): the
// resume path, the closing-watch bookkeeping, the watchdog and the
// restart at etcd's CompactRevision. A cache over this package's registry,
// against an embedded etcd on loopback, through the cache's public API,
// real etcd writes, compactions and proxy cuts; the watcher's internals
// are only read, to tell where a run is.

// Each test here attacks the scoped stream through the public API. A
// comment that describes a failure tells what the attack found; each was
// fixed since, and the test now holds the fix.
import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cache "github.com/regcache/cache"
	"go-micro.dev/v4/registry"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// within reports whether cond holds within d, polling.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// setQuietAfter sets the watchdog's quiet period for the watchers created
// from now on, and restores it when the test ends (after the caches
// created later are stopped: cleanups run last in, first out).
func setQuietAfter(t *testing.T, d time.Duration) {
	old := quietAfter
	quietAfter = d
	t.Cleanup(func() { quietAfter = old })
}

// watchOf returns the id of the open watch of name's keys, whether etcd
// acknowledged it, and where it would resume (0, false, 0 if none).
func (w *scopedWatcher) watchOf(name string) (id int64, created bool, next int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.byPrefix[watchPrefix(name)]; kw != nil {
		return kw.id, kw.created, kw.next
	}
	return 0, false, 0
}

func (w *scopedWatcher) noted() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastRev
}

// restartAtCompaction makes name's watch restart at etcd's CompactRevision:
// the sender is held while the cache fetches name, etcd compacts past the
// revision the watch is to start from, then the sender goes on. It
// returns once the restarted watch is acknowledged.
func restartAtCompaction(t *testing.T, c cache.Cache, w *scopedWatcher, name string, compactTo func() int64) {
	t.Helper()
	open := gateSender(t)
	c.GetService(name)
	eventually(t, name+"'s watch asked for", func() bool { id, _, _ := w.watchOf(name); return id != 0 })
	first, _, _ := w.watchOf(name)
	rev := compactTo()
	open()
	eventually(t, name+"'s watch restarted at the compaction and acknowledged", func() bool {
		id, created, next := w.watchOf(name)
		return id != first && created && next >= rev
	})
}

// ATTACK2 1. The restart at the CompactRevision leaves the compacted watch
// registered on etcd's side: etcd ends a compacted watch (its response is
// Canceled) but keeps it in the stream's watch set until the client
// cancels it, as etcd's own client does. received pops the cancel that
// closeLocked queued ("etcd has ended it", scoped.go:665). etcd answers a
// WatchProgressRequest only when every watch of the stream is synced
// (mvcc watchableStore.progressIfSync), and a compacted watch never is:
// from the first compaction restart on, every progress request of the
// watchdog is ignored for the life of the stream, the revision a service
// held next starts from goes stale while the services held are quiet, and
// a compaction then costs each service held next a second registry call
// (and the gap exposure of the restart), which the watchdog is there to
// prevent. etcd also keeps the compacted watch's bookkeeping (its id,
// prevKV and progress entries) until the stream ends.
func TestAttack2CompactionRestartSilencesProgressRequests(t *testing.T) {
	progressAfterRestart(t, true)
}

// Control of ATTACK2 1: with no compaction restart before, the quiet
// stream's revision stays recent and the later service costs one call.
func TestAttack2ControlProgressWithoutRestart(t *testing.T) {
	progressAfterRestart(t, false)
}

func progressAfterRestart(t *testing.T, restart bool) {
	checkNoWatcherLeft(t)
	setQuietAfter(t, 100*time.Millisecond)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("x", "1", "x1"))
	putNode(t, cl, service("y", "1", "y1"))
	c, reg := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(100*time.Millisecond))
	w := reg.scoped(t)
	if restart {
		restartAtCompaction(t, c, w, "x", func() int64 {
			var rev int64
			for i := 0; i < 3; i++ {
				rev = putNode(t, cl, service("unheld", "1", fmt.Sprintf("u%d", i)))
			}
			compact(t, cl, rev)
			return rev
		})
		eventually(t, "x fetched again after its restart", func() bool { return reg.callsFor("x") == 2 })
	}
	// The services held are quiet; the rest of the registry is not.
	var rev int64
	for i := 0; i < 3; i++ {
		rev = putNode(t, cl, service("unheld", "1", fmt.Sprintf("v%d", i)))
	}
	if !within(5*time.Second, func() bool { return w.noted() >= rev }) {
		t.Errorf("the stream's revision is %d 5 s after etcd's moved to %d, with a progress request every 100 ms: etcd ignores them", w.noted(), rev)
	}
	compact(t, cl, rev)
	if ids := lookupIDsAfterGet(t, c, "y"); len(ids) != 1 {
		t.Fatalf("y: %v", ids)
	}
	staysAt(t, time.Second, "a second registry call for y, which did not change", func() bool { return reg.callsFor("y") == 1 })
	if reg.streams() != 1 {
		t.Errorf("%d watch streams; want 1", reg.streams())
	}
}

// gatedGet holds the first GetService of one service after the registry
// answered it, until released: a registry call that read etcd at one
// revision and whose answer reaches the cache late (a slow network, a GC
// pause).
type gatedGet struct {
	registry.Registry
	name    string
	calls   atomic.Int32
	read    chan struct{} // closed once the held call has read etcd
	release chan struct{}
}

func (g *gatedGet) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	svcs, err := g.Registry.GetService(name, opts...)
	if name == g.name && g.calls.Add(1) == 1 {
		close(g.read)
		<-g.release
	}
	return svcs, err
}

// ATTACK2 2. A compaction racing a service's first fetch. The fetch reads
// etcd (not found) at F; the service is registered at P > F; etcd compacts
// past P before the service's watch is created, so the watch restarts at
// the compaction and misses P, and the watcher calls Revalidate once it is
// created. The fetch's answer is still on its way: Revalidate reopens the
// retry window only of an entry with no flight (watchscope.go:89), and for
// a flight it only lowers the flight's epoch (watchset.go:630), which
// re-validates an answer with data (refresh.go:125) but not a not-found
// one. The not-found answer lands and is kept for the whole retry window:
// the cache answers not found for a registered service, with no event to
// come and no registry call until the window opens (a minute here).
func TestAttack2CompactionRacingAFirstFetchInFlightLosesARegistration(t *testing.T) {
	compactionRacingFetch(t, true)
}

// Control of ATTACK2 2: the same race with the fetch's answer landed
// before the restarted watch is created is repaired by Revalidate.
func TestAttack2ControlCompactionAfterTheFetchLanded(t *testing.T) {
	compactionRacingFetch(t, false)
}

func compactionRacingFetch(t *testing.T, inFlight bool) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("m", "1", "m1"))
	g := &gatedGet{name: "late", read: make(chan struct{}), release: make(chan struct{})}
	g.Registry = newTestRegistry(t, s.Addr(), 5*time.Second)
	reg := &probe{Registry: g}
	c := cache.New(reg, cache.WithTTL(time.Hour), cache.WithMinimumRetryInterval(time.Minute))
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(g.release) }) }
	t.Cleanup(c.Stop)
	t.Cleanup(release) // before Stop
	if ids := lookupIDsAfterGet(t, c, "m"); len(ids) != 1 {
		t.Fatalf("m: %v", ids)
	}
	eventually(t, "the stream established", func() bool { return c.Stats().Stream == cache.StreamConnected })
	w := reg.scoped(t)
	// The sender has run: the gate holds it at its next round.
	eventually(t, "m's watch acknowledged", func() bool { _, created, _ := w.watchOf("m"); return created })

	open := gateSender(t)
	answer := make(chan error, 1)
	go func() {
		_, err := c.GetService("late")
		answer <- err
	}()
	select {
	case <-g.read:
	case <-time.After(10 * time.Second):
		t.Fatal("late's fetch did not reach etcd within 10 s")
	}
	putNode(t, cl, service("late", "1", "n1")) // after the fetch read etcd
	compact(t, cl, putNode(t, cl, service("unheld", "1", "u1")))
	if !inFlight {
		release()
		if err := <-answer; !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("GetService(late): %v", err)
		}
	}
	eventually(t, "late's watch asked for", func() bool { id, _, _ := w.watchOf("late"); return id != 0 })
	first, _, _ := w.watchOf("late")
	open()
	eventually(t, "late's watch restarted and acknowledged", func() bool {
		id, created, _ := w.watchOf("late")
		return id != first && created
	})
	// The receiver has called Revalidate once it reads a later response.
	putNode(t, cl, service("m", "1", "m2"))
	eventually(t, "m's later change served", func() bool { return len(lookupIDs(c, "m")) == 2 })
	if inFlight {
		release()
		if err := <-answer; !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("GetService(late): %v", err)
		}
	}
	if !within(10*time.Second, func() bool { return len(lookupIDs(c, "late")) == 1 }) {
		_, err := c.Lookup("late")
		t.Errorf("late registered before the compaction; 10 s later the cache answers %v (%d registry calls)", err, reg.callsFor("late"))
	}
}

// ATTACK2 3. A stream that breaks while the connection comes straight
// back (here: a proxy that cuts its connections and forwards new ones) is
// resumed, each watch from its `next`: the revision after the last event
// etcd sent of it, or the one it started from. A watch of a quiet service
// never moves `next` (progress notifications are not applied to it,
// scoped.go:656/680 only), so after etcd compacted, as it does
// periodically, every quiet service's watch resumes at a compacted
// revision, is restarted at the compaction and has its service fetched
// again (scoped.go:606, 659-668): a registry call per service held, one by
// one — what the resumption is there to spare, and more than the cache's
// own resync, which lists the registry once. etcd's client moves every
// watch's revision on a stream-wide progress notification.
func TestAttack2ResumeAfterCompactionRefetchesEveryQuietService(t *testing.T) {
	resumeAfterCompaction(t, true)
}

// Control of ATTACK2 3: the same cut without a compaction resumes every
// watch with no registry call.
func TestAttack2ControlResumeWithoutCompaction(t *testing.T) {
	resumeAfterCompaction(t, false)
}

func resumeAfterCompaction(t *testing.T, compactFirst bool) {
	checkNoWatcherLeft(t)
	setQuietAfter(t, 100*time.Millisecond)
	s := startEtcd(t)
	p := startProxy(t, s.Addr())
	cl := newClient(t, s.Addr())
	const n = 20
	name := func(i int) string { return fmt.Sprintf("quiet-%02d", i) }
	for i := 0; i < n; i++ {
		putNode(t, cl, service(name(i), "1", "a"))
	}
	c, reg := newScopedCache(t, p.Addr(), cache.WithMinimumRetryInterval(100*time.Millisecond))
	w := reg.scoped(t)
	for i := 0; i < n; i++ {
		if ids := lookupIDsAfterGet(t, c, name(i)); len(ids) != 1 {
			t.Fatalf("%s: %v", name(i), ids)
		}
	}
	eventually(t, "every watch acknowledged", func() bool {
		for i := 0; i < n; i++ {
			if _, created, _ := w.watchOf(name(i)); !created {
				return false
			}
		}
		return true
	})
	var rev int64
	for i := 0; i < 5; i++ {
		rev = putNode(t, cl, service("unheld", "1", fmt.Sprintf("u%d", i)))
	}
	eventually(t, "the stream's revision recent", func() bool { return w.noted() >= rev })
	// A progress notification (the watchdog asks for one while the
	// stream is quiet) tells that every watch has all it had up to the
	// revision: each quiet watch resumes after it.
	eventually(t, "a progress notification", func() bool {
		for i := 0; i < n; i++ {
			if _, _, next := w.watchOf(name(i)); next <= rev {
				return false
			}
		}
		return true
	})
	if compactFirst {
		compact(t, cl, rev)
	}
	p.mu.Lock()
	p.closeAllLocked() // the proxy keeps accepting: the connection comes back
	p.mu.Unlock()
	eventually(t, "the stream resumed", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.resumed.IsZero()
	})
	if reg.streams() != 1 {
		t.Fatalf("the cut ended the stream (%d streams) rather than resume it: inconclusive", reg.streams())
	}
	time.Sleep(time.Second) // the resumed watches created, any restart and re-fetch made
	extra := 0
	for i := 0; i < n; i++ {
		extra += reg.callsFor(name(i)) - 1
	}
	if extra != 0 {
		t.Errorf("a resumption cost %d registry calls for %d services that did not change", extra, n)
	}
	if reg.streams() != 1 {
		t.Errorf("%d watch streams; want 1", reg.streams())
	}
	putNode(t, cl, service(name(0), "1", "b"))
	eventually(t, "a later change served", func() bool { return len(lookupIDs(c, name(0))) == 2 })
}

// ATTACK2 4. Churn of holds and drops (idle eviction of hundreds of
// services, round after round): each dropped service's watch is cancelled
// and remembered in `closing` until the cache is done with it. The maps
// must not grow with the churn: etcd acknowledges each cancel at once and
// no event of them is pending, so each round's are forgotten at the next
// change (closingWatches.sweep runs only in apply and at an end: a cache
// that goes idle keeps the last batch until it holds or drops another
// service).
func TestAttack2ClosingWatchesDoNotGrowUnderChurn(t *testing.T) {
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

// ATTACK2 5. After a resumption every watch is asked for again, with a
// fresh ack deadline (scoped.go:603-607), but the watchdog is not armed
// (resume does not signal w.arm, as openLocked does): it sleeps until the
// quiet period it set before (up to quietAfter, 5 s), so a new stream
// that takes the requests but never acknowledges them fails only then,
// not within the registry timeout. Fake stream (newScopedWatcherOn): a
// real etcd always acknowledges.
func TestAttack2UnacknowledgedAfterResumeDetectedLate(t *testing.T) {
	checkNoWatcherLeft(t)
	// anchor has a node, so that the cache keeps holding it (a service
	// not found is dropped when its retry window ends).
	_, scope := memoryScope(t, service("anchor", "1", "a1"))
	streams := make(chan *fakeStream, 4)
	open := func(ctx context.Context) (pb.Watch_WatchClient, error) {
		s := newFakeStream(ctx)
		s.resps <- created(sentinelID, 10)
		streams <- s
		return s, nil
	}
	const timeout = 200 * time.Millisecond
	w, err := newScopedWatcherOn(open, newFakeConn(connectivity.Ready), scope, context.Background(), timeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first := <-streams
	first.request(t) // the sentinel
	first.request(t) // anchor's
	first.resps <- created(2, 11)
	eventually(t, "anchor's watch acknowledged", func() bool { _, created, _ := w.watchOf("anchor"); return created })
	// Past anchor's first deadline: the watchdog sleeps until the quiet
	// period is over.
	time.Sleep(2 * timeout)
	first.resps <- fakeRecv{err: status.Error(codes.Unavailable, "transport is closing")}
	second := <-streams
	second.request(t) // the sentinel
	if r := second.request(t).GetCreateRequest(); r == nil || r.WatchId != 2 {
		t.Fatalf("request %v, want anchor's watch again", r)
	}
	start := time.Now()
	res, err := next(t, w, 10*time.Second)
	if !errors.Is(err, errAckTimeout) {
		t.Fatalf("Next: %v, %v; want a watch not acknowledged", res, err)
	}
	if d := time.Since(start); d > 5*timeout {
		t.Errorf("a watch asked for again on the resumed stream and never acknowledged failed the stream after %v; the timeout is %v", d.Round(time.Millisecond), timeout)
	}
}
