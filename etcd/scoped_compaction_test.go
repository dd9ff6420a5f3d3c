package etcd

// The scoped stream (scoped.go) when etcd has compacted the revision a
// watch starts from: the watch starts at the compaction, its service is
// fetched again, and nothing is lost. A cache over this package's
// registry, against an embedded etcd on loopback, through the cache's
// public API, real etcd writes and compactions.

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
	clientv3 "go.etcd.io/etcd/client/v3"
)

func compact(t *testing.T, cl *clientv3.Client, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cl.Compact(ctx, rev); err != nil {
		t.Fatalf("compact %d: %v", rev, err)
	}
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

// A cache whose held services are quiet learns newer revisions only from
// the watchdog's progress requests, every few seconds. etcd compacting up to
// its latest revision just before a service is first held compacts the
// revision its watch starts from: the watch starts at the compaction, and
// the service is fetched once more, in case the compaction came after its
// first fetch. That second call is the price, and the service is served
// right.
func TestACompactedWatchStartCostsOneRegistryCallMore(t *testing.T) {
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

// Without the compaction, a service first held costs one registry call.
func TestAServiceFirstHeldCostsOneRegistryCall(t *testing.T) {
	oneCall(t)
}

// A service looked up and not found while the stream has been quiet: the
// revision its watch starts from (the last one etcd reported on the stream)
// has been compacted, so the watch starts at the compaction once etcd says
// so (etcd checks compaction on its unsynced watchers every 100 ms), and
// the cache fetches the service again once etcd has created it. A
// registration made between the not-found answer and the watch's creation
// is served. It holds off a bug where that re-validation did nothing for an
// entry without data, and the cache answered not found for its whole retry
// window.
func TestARegistrationBeforeACompactedWatchStartIsServed(t *testing.T) {
	lateRegistrations(t, true)
}

// The same without the compaction: the watch replays the registration.
func TestARegistrationBeforeTheWatchIsCreatedIsServed(t *testing.T) {
	lateRegistrations(t, false)
}

// The same with a service that has data: its node registered in the gap is
// served at once. It holds off a bug where it reached the cache only at the
// re-validation after the retry window (here a minute), not as an event.
func TestANodeRegisteredBeforeACompactedWatchStartIsServed(t *testing.T) {
	nodeInTheGap(t, true)
}

// The same without the compaction.
func TestANodeRegisteredBeforeTheWatchIsCreatedIsServed(t *testing.T) {
	nodeInTheGap(t, false)
}

// A compaction racing a service's first fetch: the fetch reads etcd (not
// found) at F; the service is registered at P > F; etcd compacts past P
// before the service's watch is created, so the watch starts at the
// compaction, missing P, and the cache is asked to re-validate the service
// while the fetch's answer is still on its way. The not-found answer is
// re-validated when it lands, and the registration is served. It holds off
// a bug where the re-validation reopened only an entry with no call in
// flight: the not-found answer was kept for the whole retry window, with no
// event to come.
func TestACompactionRacingAFirstFetchLosesNoRegistration(t *testing.T) {
	compactionRacingFetch(t, true)
}

// The same race with the fetch's answer landed before the restarted watch
// is created.
func TestACompactionAfterTheFirstFetchLosesNoRegistration(t *testing.T) {
	compactionRacingFetch(t, false)
}

// After a watch restarted on a compaction, the service's later changes
// come as events, at the cost of one registry call more.
func TestAWatchRestartedAtACompactionDeliversLaterChanges(t *testing.T) {
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

// A watch restarted at etcd's CompactRevision has its compacted watch
// cancelled: etcd keeps a compacted watch, never synced, until then, and
// answers no progress request while it does. It holds off a bug where the
// compacted watch was left open: the watchdog's progress requests went
// unanswered for the life of the stream, the revision that a service held
// next starts from went stale while the services held were quiet, and a
// compaction then cost each service held next a second registry call.
func TestACompactedWatchIsCancelledSoProgressIsAnswered(t *testing.T) {
	progressAfterRestart(t, true)
}

// Without a compaction restart, the quiet stream's revision stays recent
// and a service held later costs one call.
func TestProgressIsAnsweredWithoutACompaction(t *testing.T) {
	progressAfterRestart(t, false)
}
