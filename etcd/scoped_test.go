package etcd

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cache "github.com/regcache/cache"
	"go-micro.dev/v4/registry"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// counting counts the GetService calls of a cache, by service.
type counting struct {
	registry.Registry
	mu    sync.Mutex
	calls map[string]int
}

func (c *counting) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	c.mu.Lock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[name]++
	c.mu.Unlock()
	return c.Registry.GetService(name, opts...)
}

func (c *counting) callsFor(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[name]
}

// gateSender holds the scoped watchers' senders, for the test, until the
// function it returns is called: the watches of the services held
// meanwhile are created late.
func gateSender(t *testing.T) (open func()) {
	gate := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	wait := func() { <-gate }
	beforeSend.Store(&wait)
	t.Cleanup(func() {
		open()
		beforeSend.Store(nil)
	})
	return open
}

// newScopedCache is a cache over a registry of the package on s, its
// stream established.
func newScopedCache(t *testing.T, s *etcdServer, opts ...cache.Option) (cache.Cache, *counting) {
	t.Helper()
	reg := &counting{Registry: newTestRegistry(t, s.Addr(), 5*time.Second)}
	c := cache.New(reg, append([]cache.Option{cache.WithTTL(time.Hour)}, opts...)...)
	t.Cleanup(c.Stop)
	if _, err := c.GetService("anchor"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetService(anchor): %v", err)
	}
	eventually(t, "the stream established", func() bool { return c.Stats().Stream == "connected" })
	return c, reg
}

// eventually fails the test unless cond holds within 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lookupIDs is the node ids the cache serves for name, none on an error.
func lookupIDs(c cache.Cache, name string) []string {
	svcs, err := c.Lookup(name)
	if err != nil {
		return nil
	}
	var ids []string
	for _, s := range svcs {
		ids = append(ids, nodeIDs(s)...)
	}
	return ids
}

// A cache's stream receives the changes of the services it holds and no
// other: etcd sends none of the rest.
func TestScopedWatchCarriesOnlyTheServicesHeld(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("held", "1", "h1"))
	putNode(t, cl, service("other", "1", "o1"))
	c, reg := newScopedCache(t, s)
	if ids := lookupIDsAfterGet(t, c, "held"); len(ids) != 1 {
		t.Fatalf("held: %v", ids)
	}
	for i := 0; i < 5; i++ {
		putNode(t, cl, service("other", "1", "o1"))
	}
	putNode(t, cl, service("held", "1", "h2"))
	eventually(t, "the held service's change served", func() bool { return len(lookupIDs(c, "held")) == 2 })
	if n := c.Stats().EventsIgnored; n != 0 {
		t.Errorf("%d events of services not held reached the cache", n)
	}
	if n := reg.callsFor("held"); n != 1 {
		t.Errorf("%d registry calls for the held service, want 1: its change came as an event", n)
	}
}

func lookupIDsAfterGet(t *testing.T, c cache.Cache, name string) []string {
	t.Helper()
	if _, err := c.GetService(name); err != nil {
		t.Fatalf("GetService(%s): %v", name, err)
	}
	return lookupIDs(c, name)
}

// A service's watch is created a round trip after the cache starts to
// hold it, or later, but starts at a revision from before: a change made
// in between reaches the cache as an event, not at its next registry
// call.
func TestScopedWatchCoversTheServiceFromItsFirstLookup(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	c, reg := newScopedCache(t, s, cache.WithMinimumRetryInterval(time.Minute))
	open := gateSender(t)
	if _, err := c.GetService("late"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetService(late): %v", err)
	}
	putNode(t, cl, service("late", "1", "l1"))
	for i := 0; i < 3; i++ {
		putNode(t, cl, service("busy", "1", "b1")) // the revision moves on
	}
	open()
	eventually(t, "the late service served", func() bool { return len(lookupIDs(c, "late")) == 1 })
	if n := reg.callsFor("late"); n != 1 {
		t.Errorf("%d registry calls for the late service, want 1", n)
	}
}

// When etcd has compacted the revision a watch was to start from, the
// watch starts from now, and the service is fetched again.
func TestScopedWatchAfterACompaction(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("x", "1", "x1"))
	c, reg := newScopedCache(t, s, cache.WithMinimumRetryInterval(100*time.Millisecond))
	open := gateSender(t)
	if ids := lookupIDsAfterGet(t, c, "x"); len(ids) != 1 {
		t.Fatalf("x: %v", ids)
	}
	putNode(t, cl, service("x", "1", "x2"))
	rev := putNode(t, cl, service("busy", "1", "b1"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cl.Compact(ctx, rev); err != nil {
		t.Fatalf("compact: %v", err)
	}
	open()
	eventually(t, "x's change served", func() bool { return len(lookupIDs(c, "x")) == 2 })
	if n := reg.callsFor("x"); n != 2 {
		t.Errorf("%d registry calls for x, want 2: the fetch and the one after the late watch", n)
	}
}

// A service dropped and held again gets a watch of its own: its old
// watch's events that Next has not delivered are dropped, since its data
// was fetched again after them.
func TestNextDropsTheEventsOfACancelledWatch(t *testing.T) {
	old := &keyWatch{id: 2}
	live := &keyWatch{id: 3}
	w := &scopedWatcher{items: make(chan scopedItem, 2), stopped: make(chan struct{})}
	put := func(name, node string) *mvccpb.Event {
		v := encode(service(name, "1", node))
		return &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(nodeKey(name, node)), Value: []byte(v), CreateRevision: 5, ModRevision: 5, Version: 1}}
	}
	w.items <- scopedItem{from: old, events: []*mvccpb.Event{put("a", "stale1"), put("a", "stale2")}}
	w.items <- scopedItem{from: live, events: []*mvccpb.Event{put("a", "fresh")}}
	res, err := w.Next()
	if err != nil || nodeIDs(res.Service)[0] != "stale1" {
		t.Fatalf("Next: %v, %v; want stale1 while its watch is open", res, err)
	}
	old.dead.Store(true)
	res, err = w.Next()
	if err != nil || nodeIDs(res.Service)[0] != "fresh" {
		t.Fatalf("Next: %v, %v; want fresh: stale2's watch was cancelled", res, err)
	}
}

// Names that the plugin's keys make alike share a watch, which lasts as
// long as one of them is held; a change is watched from the newest
// revision etcd reported before it.
func TestScopedWatchesByPrefix(t *testing.T) {
	w := &scopedWatcher{byPrefix: map[string]*keyWatch{}, byID: map[int64]*keyWatch{}, lastID: sentinelID,
		marks: []revMark{{seq: 4, rev: 100}, {seq: 6, rev: 120}, {seq: 9, rev: 150}}}
	w.apply([]cache.HeldChange{{Service: "a/b", Held: true, Seq: 7}, {Service: "a-b", Held: true, Seq: 8}})
	if len(w.byID) != 1 || len(w.requests) != 1 {
		t.Fatalf("%d watches, %d requests; want 1 of each", len(w.byID), len(w.requests))
	}
	if got := w.requests[0].GetCreateRequest().StartRevision; got != 121 {
		t.Errorf("start revision %d, want 121: from after the newest revision reported before change 7", got)
	}
	w.apply([]cache.HeldChange{{Service: "a/b", Held: false, Seq: 10}})
	if len(w.byID) != 1 || len(w.requests) != 1 {
		t.Fatalf("a-b still held: %d watches, %d requests", len(w.byID), len(w.requests))
	}
	kw := w.byPrefix[watchPrefix("a-b")]
	w.apply([]cache.HeldChange{{Service: "a-b", Held: false, Seq: 11}})
	if len(w.byID) != 0 || len(w.requests) != 2 || w.requests[1].GetCancelRequest().GetWatchId() != kw.id || !kw.dead.Load() {
		t.Fatalf("none held: %d watches, requests %v, dead %v", len(w.byID), w.requests, kw.dead.Load())
	}
	w.apply([]cache.HeldChange{{Service: "c", Held: true, Seq: 12}})
	if got := w.requests[2].GetCreateRequest().StartRevision; got != 151 {
		t.Errorf("start revision %d, want 151", got)
	}
	if len(w.marks) != 1 {
		t.Errorf("marks %v: only the newest before the last change is needed", w.marks)
	}
}

// scopeOf is a memory registry whose Watch keeps the scope of its context.
type scopeOf struct {
	registry.Registry
	scope atomic.Pointer[cache.WatchScope]
}

func (r *scopeOf) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var o registry.WatchOptions
	for _, opt := range opts {
		opt(&o)
	}
	if s := cache.WatchScopeOf(o.Context); s != nil {
		r.scope.Store(s)
	}
	return r.Registry.Watch(opts...)
}

// silentStream is a watch stream to an etcd that takes every request and
// answers none.
type silentStream struct {
	pb.Watch_WatchClient
	ctx  context.Context
	sent chan *pb.WatchRequest
}

func (s *silentStream) Send(r *pb.WatchRequest) error {
	s.sent <- r
	return nil
}

func (s *silentStream) Recv() (*pb.WatchResponse, error) {
	<-s.ctx.Done()
	return nil, s.ctx.Err()
}

// A watch that etcd does not acknowledge within the timeout fails the
// stream, so that the cache redials rather than wait for its events.
func TestAWatchNotAcknowledgedFailsTheStream(t *testing.T) {
	checkNoWatcherLeft(t)
	reg := &scopeOf{Registry: registry.NewMemoryRegistry()}
	c := cache.New(reg)
	defer c.Stop()
	c.GetService("anchor")
	eventually(t, "the stream's scope", func() bool { return reg.scope.Load() != nil })
	ctx, cancel := context.WithCancel(context.Background())
	stream := &silentStream{ctx: ctx, sent: make(chan *pb.WatchRequest, 16)}
	_, seq, follower := reg.scope.Load().Follow()
	w := &scopedWatcher{
		scope: reg.scope.Load(), follower: follower, stream: stream, ctx: ctx, cancel: cancel,
		items: make(chan scopedItem, 16), wake: make(chan struct{}, 1), stopped: make(chan struct{}),
		byPrefix: map[string]*keyWatch{}, byID: map[int64]*keyWatch{}, lastID: sentinelID,
		marks: []revMark{{seq, 7}}, timeout: 50 * time.Millisecond,
	}
	w.wg.Add(2)
	go w.send()
	go w.receive()
	defer w.Stop()
	if _, err := c.GetService("held"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetService(held): %v", err)
	}
	req := <-stream.sent
	if got := req.GetCreateRequest(); got == nil || string(got.Key) != watchPrefix("held") || got.StartRevision != 8 {
		t.Fatalf("request %v; want a watch of held from revision 8", req)
	}
	res, err := next(t, w, 10*time.Second)
	if !errors.Is(err, errAckTimeout) {
		t.Fatalf("Next: %v, %v; want the watch of held not acknowledged", res, err)
	}
}
