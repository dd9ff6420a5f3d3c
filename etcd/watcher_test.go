package etcd

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func nodeName(i int) string { return fmt.Sprintf("node-%02d", i) }

// TestEveryEventOfATransaction: 20 node keys written in one etcd
// transaction come as one watch response; Next yields all 20, in order,
// where the plugin's watcher yields the first and drops the other 19.
func TestEveryEventOfATransaction(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	kv := newClient(t, s.Addr())
	batch := func(name string) []clientv3.Op {
		ops := make([]clientv3.Op, 20)
		for i := range ops {
			ops[i] = clientv3.OpPut(nodeKey(name, nodeName(i)), encode(service(name, "1", nodeName(i))))
		}
		return ops
	}

	w := watch(t, r)
	txn(t, kv, batch("batch")...)
	for i := 0; i < 20; i++ {
		mustNext(t, w, "create", nodeName(i))
	}

	// The plugin's watcher, over the same etcd: the first event of the
	// transaction, then the next write's, with nothing in between.
	pw, err := r.plugin.Watch()
	if err != nil {
		t.Fatalf("the plugin's Watch: %v", err)
	}
	defer pw.Stop()
	txn(t, kv, batch("batch2")...)
	putNode(t, kv, service("after", "1", "sentinel"))
	mustNext(t, pw, "create", nodeName(0))
	res := mustNext(t, pw, "create", "sentinel")
	t.Logf("the plugin's watcher: %s of %s/%v after the transaction's first event: 19 events lost", res.Action, res.Service.Name, nodeIDs(res.Service))
}

// TestEveryDeleteOfALease: the nodes of a lease that ends go in one
// response too; each is a delete of the service its previous value held.
func TestEveryDeleteOfALease(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	kv := newClient(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := kv.Grant(ctx, 60)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	ops := make([]clientv3.Op, 20)
	for i := range ops {
		ops[i] = clientv3.OpPut(nodeKey("leased", nodeName(i)), encode(service("leased", "1", nodeName(i))), clientv3.WithLease(lease.ID))
	}
	txn(t, kv, ops...)

	w := watch(t, r)
	if _, err := kv.Revoke(ctx, lease.ID); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	for i := 0; i < 20; i++ {
		res := mustNext(t, w, "delete", nodeName(i))
		if res.Service.Name != "leased" || res.Service.Version != "1" {
			t.Fatalf("delete of %s %s; want leased 1", res.Service.Name, res.Service.Version)
		}
	}
}

// TestCreateUpdateDelete: what the plugin's Register and Deregister write,
// as events; a value that is not a service is skipped. (The plugin's
// Register needs a TTL: without one, v1.2.0 logs a nil lease and panics.)
func TestCreateUpdateDelete(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	kv := newClient(t, s.Addr())
	w := watch(t, r)

	svc := service("greeter", "1", "n1")
	if err := r.Register(svc, registry.RegisterTTL(time.Minute)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, w, "create", "n1")

	svc.Nodes[0].Metadata = map[string]string{"zone": "b"}
	if err := r.Register(svc, registry.RegisterTTL(time.Minute)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if res := mustNext(t, w, "update", "n1"); res.Service.Nodes[0].Metadata["zone"] != "b" {
		t.Fatalf("update with node metadata %v", res.Service.Nodes[0].Metadata)
	}

	if err := r.Deregister(svc); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	res := mustNext(t, w, "delete", "n1")
	if res.Service.Name != "greeter" || res.Service.Version != "1" || res.Service.Nodes[0].Metadata["zone"] != "b" {
		t.Fatalf("delete of %+v, node %+v; want the last value of greeter's n1", res.Service, res.Service.Nodes[0])
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, nodeKey("greeter", "junk"), "not a service"); err != nil {
		t.Fatalf("put: %v", err)
	}
	putNode(t, kv, service("greeter", "1", "n2"))
	mustNext(t, w, "create", "n2")
}

// TestDeleteWithoutPrevKV: a delete that etcd sends without its previous
// value (here from a watch that does not ask for it) is an error from
// Next, which keeps failing, and never a panic, as it is in the plugin.
func TestDeleteWithoutPrevKV(t *testing.T) {
	s := startEtcd(t)
	kv := newClient(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	putNode(t, kv, service("greeter", "1", "n1"))
	events := kv.Watch(ctx, prefix, clientv3.WithPrefix())
	if _, err := kv.Delete(ctx, nodeKey("greeter", "n1")); err != nil {
		t.Fatalf("delete: %v", err)
	}
	var resp clientv3.WatchResponse
	select {
	case resp = <-events:
	case <-ctx.Done():
		t.Fatal("no watch response")
	}
	if len(resp.Events) != 1 || resp.Events[0].Type != clientv3.EventTypeDelete || resp.Events[0].PrevKv != nil {
		t.Fatalf("response %+v; want one delete without its previous value", resp.Events)
	}

	if _, err := result(resp.Events[0], nil); !errors.Is(err, errNoPrevKV) {
		t.Fatalf("result: %v; want %v", err, errNoPrevKV)
	}
	ch := make(chan clientv3.WatchResponse, 1)
	ch <- resp
	w := fakeWatcher(ch)
	defer w.Stop()
	for i := 0; i < 2; i++ {
		if _, err := next(t, w, 5*time.Second); !errors.Is(err, errNoPrevKV) {
			t.Fatalf("Next: %v; want %v", err, errNoPrevKV)
		}
	}
}

// fakeWatcher is a watcher on a channel of the test's, without etcd.
func fakeWatcher(events chan clientv3.WatchResponse) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &watcher{ctx: ctx, events: events, lost: make(chan error, 1), cancel: cancel, stopped: make(chan struct{})}
}

func putEvent(node string, create bool) *clientv3.Event {
	mod := int64(9)
	created := mod
	if !create {
		created = 3
	}
	return &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(nodeKey("greeter", node), encode(service("greeter", "1", node)), created, mod)}
}

// TestNext: every event of every response in order; whatever means the
// stream may have missed something is an error, and stays one.
func TestNext(t *testing.T) {
	n := putEvent
	errLost := errors.New("the connection is lost")
	garbage := &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(nodeKey("greeter", "junk"), "junk", 9, 9)}
	noPrev := &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: kv(nodeKey("greeter", "n9"), "", 0, 9)}
	for _, tc := range []struct {
		name  string
		resps []clientv3.WatchResponse
		close bool
		lost  bool
		want  []string // node IDs, then "error" for an error that matches err
		err   error    // nil: any error
	}{
		{name: "every event of every response, in order",
			resps: []clientv3.WatchResponse{
				{Events: []*clientv3.Event{n("a", true), n("b", true), n("c", false)}},
				{Events: []*clientv3.Event{n("d", false)}}},
			want: []string{"a", "b", "c", "d"}},
		{name: "responses without events are passed over",
			resps: []clientv3.WatchResponse{{Created: true}, {}, {Events: []*clientv3.Event{n("a", true)}}},
			want:  []string{"a"}},
		{name: "values that are not services are skipped",
			resps: []clientv3.WatchResponse{{Events: []*clientv3.Event{garbage, n("a", true), garbage}}, {Events: []*clientv3.Event{n("b", true)}}},
			want:  []string{"a", "b"}},
		{name: "a compaction is an error",
			resps: []clientv3.WatchResponse{{Events: []*clientv3.Event{n("a", true)}}, {CompactRevision: 5, Canceled: true}},
			want:  []string{"a", "error", "error"}, err: rpctypes.ErrCompacted},
		{name: "a cancelled watch is an error",
			resps: []clientv3.WatchResponse{{Canceled: true}},
			want:  []string{"error", "error"}},
		{name: "the channel closing is an error",
			resps: []clientv3.WatchResponse{{Events: []*clientv3.Event{n("a", true)}}}, close: true,
			want: []string{"a", "error", "error"}},
		{name: "a delete without its previous value ends the stream",
			resps: []clientv3.WatchResponse{{Events: []*clientv3.Event{n("a", true), noPrev, n("b", true)}}},
			want:  []string{"a", "error", "error"}, err: errNoPrevKV},
		{name: "a lost connection is an error",
			lost: true,
			want: []string{"error", "error"}, err: errLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := make(chan clientv3.WatchResponse, len(tc.resps))
			for _, r := range tc.resps {
				ch <- r
			}
			if tc.close {
				close(ch)
			}
			w := fakeWatcher(ch)
			defer w.Stop()
			if tc.lost {
				w.lost <- errLost
			}
			for i, want := range tc.want {
				res, err := next(t, w, 5*time.Second)
				switch {
				case want == "error":
					if err == nil || tc.err != nil && !errors.Is(err, tc.err) {
						t.Fatalf("Next %d: %v, %v; want error %v", i, res, err, tc.err)
					}
				case err != nil:
					t.Fatalf("Next %d: %v; want %s", i, err, want)
				case res.Service.Nodes[0].Id != want:
					t.Fatalf("Next %d: %s; want %s", i, res.Service.Nodes[0].Id, want)
				}
			}
		})
	}
}

// TestStop: Stop unblocks Next, which returns registry.ErrWatcherStopped
// from then on; it is idempotent and safe to call from several goroutines;
// once it returns, no goroutine of the watcher is left, and etcd's client
// soon has no more than before the watch.
func TestStop(t *testing.T) {
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	// A request first, so that the client's connection, whose goroutines
	// outlive any watch, is up before counting.
	if _, err := r.ListServices(); err != nil {
		t.Fatalf("ListServices: %v", err)
	}
	before := runtime.NumGoroutine()

	w, err := r.Watch()
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := w.Next()
		blocked <- err
	}()
	// Time for Next to block; if it has not yet, it must still return
	// ErrWatcherStopped.
	time.Sleep(50 * time.Millisecond)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Stop()
		}()
	}
	wg.Wait()
	if n := libraryGoroutines(); n != 0 {
		t.Errorf("%d goroutines of the watcher left after Stop", n)
	}
	select {
	case err := <-blocked:
		if !errors.Is(err, registry.ErrWatcherStopped) {
			t.Errorf("the blocked Next: %v; want %v", err, registry.ErrWatcherStopped)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not unblock Next")
	}
	w.Stop()
	if _, err := w.Next(); !errors.Is(err, registry.ErrWatcherStopped) {
		t.Errorf("Next after Stop: %v; want %v", err, registry.ErrWatcherStopped)
	}
	waitGoroutines(t, before)
}

// TestWatchService: a watch of one service sees only its nodes, and not
// those of a service whose name starts with the same letters.
func TestWatchService(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	w := watch(t, r, registry.WatchService("team/api"))
	for _, svc := range []*registry.Service{
		service("team/api2", "1", "theirs"),
		service("team", "1", "theirs"),
		service("other", "1", "theirs"),
		service("team/api", "1", "mine"),
		service("team/api", "2", "mine2"),
	} {
		if err := r.Register(svc, registry.RegisterTTL(time.Minute)); err != nil {
			t.Fatalf("Register %s: %v", svc.Name, err)
		}
	}
	if res := mustNext(t, w, "create", "mine"); res.Service.Name != "team/api" {
		t.Fatalf("event of %s", res.Service.Name)
	}
	mustNext(t, w, "create", "mine2")
}

// TestWatchContext: the context of registry.WatchContext ends the watch.
func TestWatchContext(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	w := watch(t, r, registry.WatchContext(ctx))
	cancel()
	if _, err := next(t, w, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v; want %v", err, context.Canceled)
	}
}

// TestReconnectWithinTheGrace: a connection that breaks and is back at
// once is no error: etcd's client resumes the watch where it was, and the
// events written meanwhile arrive.
func TestReconnectWithinTheGrace(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	p := startProxy(t, s.Addr())
	r := newTestRegistry(t, p.Addr(), time.Second)
	kv := newClient(t, s.Addr())
	w := watch(t, r)
	putNode(t, kv, service("svc", "1", "a"))
	mustNext(t, w, "create", "a")

	p.set(hold)
	p.waitUntil(t, 5*time.Second, "redialled", func() bool { return len(p.held) > 0 })
	putNode(t, kv, service("svc", "1", "b"))
	p.set(forward)
	mustNext(t, w, "create", "b")
	putNode(t, kv, service("svc", "1", "c"))
	mustNext(t, w, "create", "c")
}

// TestCompactionDuringAReconnect: when the revisions a watch must resume
// from are compacted while its connection is down, Next returns etcd's
// ErrCompacted, so that a cache resyncs.
func TestCompactionDuringAReconnect(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	p := startProxy(t, s.Addr())
	r := newTestRegistry(t, p.Addr(), time.Second)
	kv := newClient(t, s.Addr())
	w := watch(t, r)
	putNode(t, kv, service("svc", "1", "a"))
	mustNext(t, w, "create", "a")

	p.set(hold)
	p.waitUntil(t, 5*time.Second, "redialled", func() bool { return len(p.held) > 0 })
	putNode(t, kv, service("svc", "1", "b"))
	rev := putNode(t, kv, service("svc", "1", "c"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kv.Compact(ctx, rev); err != nil {
		t.Fatalf("compact: %v", err)
	}
	p.set(forward)
	if res, err := next(t, w, 5*time.Second); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("Next: %v, %v; want %v", res, err, rpctypes.ErrCompacted)
	}
}

// TestConnectionHangs: a connection that is not READY again within the
// grace is an error from Next, naming its state.
func TestConnectionHangs(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	p := startProxy(t, s.Addr())
	r := newTestRegistry(t, p.Addr(), time.Second)
	w := watch(t, r)

	start := time.Now()
	p.set(hold)
	_, err := next(t, w, 5*time.Second)
	elapsed := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "not READY") {
		t.Fatalf("Next: %v; want an error for a connection not READY", err)
	}
	if elapsed < grace || elapsed > grace+time.Second {
		t.Errorf("Next failed %v after the connection broke; the grace is %v", elapsed, grace)
	}
	t.Logf("Next failed %v after the connection hung: %v", elapsed, err)
}

// TestEtcdOutage: etcd stops. Next fails within about a second; Watch
// fails within the registry's Timeout, or the context of
// registry.WatchContext, and leaves nothing behind; once etcd is back,
// the first Watch succeeds and sees a new registration.
func TestEtcdOutage(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	const timeout = time.Second
	r := newTestRegistry(t, s.Addr(), timeout)
	w := watch(t, r)
	if err := r.Register(service("svc", "1", "before"), registry.RegisterTTL(time.Minute)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, w, "create", "before")

	stopped := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(stopped)
		s.Stop()
	}()
	_, err := next(t, w, 5*time.Second)
	elapsed := time.Since(start)
	if err == nil {
		t.Fatal("Next: no error while etcd stops")
	}
	if elapsed > 2*time.Second {
		t.Errorf("Next failed %v after etcd's stop began", elapsed)
	}
	t.Logf("Next failed %v after etcd's stop began: %v", elapsed, err)
	w.Stop()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("etcd has not stopped within 30s")
	}

	var after int // goroutines after the first failed Watch
	for i := 0; i < 3; i++ {
		start := time.Now()
		w, err := r.Watch()
		elapsed := time.Since(start)
		if err == nil {
			w.Stop()
			t.Fatal("Watch succeeded while etcd is down")
		}
		if elapsed > timeout+500*time.Millisecond {
			t.Errorf("Watch failed after %v; the timeout is %v", elapsed, timeout)
		}
		if i == 0 {
			t.Logf("Watch failed after %v while etcd is down: %v", elapsed, err)
			after = runtime.NumGoroutine()
		}
	}
	if n := libraryGoroutines(); n != 0 {
		t.Errorf("%d goroutines of the watcher left after failed Watch calls", n)
	}
	waitGoroutines(t, after)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	if w, err := r.Watch(registry.WatchContext(ctx)); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			w.Stop()
		}
		t.Errorf("Watch with a context of 200ms: %v; want %v", err, context.DeadlineExceeded)
	}
	if elapsed := time.Since(start); elapsed > 700*time.Millisecond {
		t.Errorf("Watch with a context of 200ms failed after %v", elapsed)
	}

	s.Start()
	start = time.Now()
	w = watch(t, r)
	t.Logf("Watch succeeded %v after etcd was back", time.Since(start))
	// The write comes from a registry made now, as from a process started
	// after etcd's return: r's plugin redials through its own client, on
	// gRPC's growing backoff, which the module does not reach (D135), and
	// may not be back within the 1 s timeout (it was not in about half
	// the runs, on each etcd line).
	writer := newTestRegistry(t, s.Addr(), timeout)
	if err := writer.Register(service("svc", "1", "after"), registry.RegisterTTL(time.Minute)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, w, "create", "after")
}

// TestWatchAfterRefusedDials: a Watch made once etcd is reachable again,
// after Watches whose dials were refused while it was not, succeeds within
// its timeout. Each Watch dials through an etcd client of its own, made at
// Watch (D135), so no earlier client's connect backoff (gRPC's: 2.56 s ±
// 20 % after a third failed dial) delays it. The plugin's own client is
// not counted on to dial: etcd's client of the 3.7 line leaves a broken
// connection idle until a call needs it.
func TestWatchAfterRefusedDials(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	p := startProxy(t, s.Addr())
	const timeout = time.Second
	r := newTestRegistry(t, p.Addr(), timeout)
	watch(t, r).Stop()

	p.set(refuse)
	for i := 0; i < 3; i++ {
		if w, err := r.Watch(); err == nil {
			w.Stop()
			t.Fatal("Watch succeeded while the proxy refuses every connection")
		}
	}
	p.waitUntil(t, 10*time.Second, "refused 3 dials", func() bool { return p.refused >= 3 })
	p.set(forward)
	start := time.Now()
	w, err := r.Watch()
	if err != nil {
		t.Fatalf("Watch %v after etcd was reachable again: %v", time.Since(start), err)
	}
	t.Logf("Watch succeeded %v after etcd was reachable again", time.Since(start))
	w.Stop()
}

// TestWatchThroughALongOutage: a Watch that starts while etcd is down, with
// a Timeout of 5 s, and waits through etcd's return 3 s later, succeeds
// within about half a second of it. With a single reset of gRPC's backoff
// at the start, the client's dials after the first (refused) one come 1 s,
// 2.6 s and 5.2 s later, ±20 % each: with etcd back after about 3 s, the
// next dial, and the acknowledgement, would come a second or more after
// etcd's return, or after the Watch's timeout. (etcd elects itself within
// about 100 ms here, so that its return is when it listens again, give or
// take that: by default it accepts connections at once and answers only
// after an election timeout, 1 to 2 s, in which gRPC's next dial could
// fall and hide its backoff.)
func TestWatchThroughALongOutage(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcdWith(t, fastElection)
	const (
		timeout = 5 * time.Second
		down    = 3 * time.Second
		bound   = 500 * time.Millisecond
	)
	r := newTestRegistry(t, s.Addr(), timeout)
	watch(t, r).Stop() // the connection is up

	s.Stop()
	type answer struct {
		w   registry.Watcher
		err error
		at  time.Time
	}
	answered := make(chan answer, 1)
	start := time.Now()
	go func() {
		w, err := r.Watch()
		answered <- answer{w, err, time.Now()}
	}()
	time.Sleep(down)
	s.Start()
	back := time.Now()
	var a answer
	select {
	case a = <-answered:
	case <-time.After(timeout):
		t.Fatal("Watch has not returned within its timeout")
	}
	if a.err != nil {
		t.Fatalf("Watch, started with etcd down and etcd back %v later: %v (after %v)", back.Sub(start).Round(time.Millisecond), a.err, a.at.Sub(start).Round(time.Millisecond))
	}
	defer a.w.Stop()
	after := a.at.Sub(back)
	t.Logf("Watch started with etcd down; etcd served again %v later (its restart took %v); Watch succeeded %v after that",
		back.Sub(start).Round(time.Millisecond), back.Sub(start.Add(down)).Round(time.Millisecond), after.Round(time.Millisecond))
	if after > bound {
		t.Errorf("Watch succeeded %v after etcd was back; want within %v", after, bound)
	}
	if err := r.Register(service("svc", "1", "after"), registry.RegisterTTL(time.Minute)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, a.w, "create", "after")
}
