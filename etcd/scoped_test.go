package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/watchscope"
	"go-micro.dev/v4/registry"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// probe is a registry that the tests look into, as a cache uses it: it
// counts the GetService calls by service, and keeps the watchers that
// Watch returns and the scope (watchscope.Scope) of Watch's context.
type probe struct {
	registry.Registry
	scope    atomic.Value
	mu       sync.Mutex
	calls    map[string]int
	watchers []registry.Watcher
}

func (p *probe) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	p.mu.Lock()
	if p.calls == nil {
		p.calls = map[string]int{}
	}
	p.calls[name]++
	p.mu.Unlock()
	return p.Registry.GetService(name, opts...)
}

func (p *probe) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var o registry.WatchOptions
	for _, opt := range opts {
		opt(&o)
	}
	if s := watchscope.FromContext(o.Context); s != nil {
		p.scope.Store(s)
	}
	w, err := p.Registry.Watch(opts...)
	if err == nil {
		p.mu.Lock()
		p.watchers = append(p.watchers, w)
		p.mu.Unlock()
	}
	return w, err
}

func (p *probe) callsFor(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[name]
}

// scoped is the last watcher Watch returned, a scoped one.
func (p *probe) scoped(t *testing.T) *scopedWatcher {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.watchers) == 0 {
		t.Fatal("no watcher")
	}
	w, ok := p.watchers[len(p.watchers)-1].(*scopedWatcher)
	if !ok {
		t.Fatalf("the watcher is a %T, not the scoped one", p.watchers[len(p.watchers)-1])
	}
	return w
}

// streams is the number of watchers Watch returned.
func (p *probe) streams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watchers)
}

// memoryScope is a cache over a memory registry holding svcs, stopped when
// the test ends, and the scope of its stream once the stream is up.
func memoryScope(t *testing.T, svcs ...*registry.Service) (cache.Cache, watchscope.Scope) {
	t.Helper()
	reg := &probe{Registry: registry.NewMemoryRegistry()}
	for _, svc := range svcs {
		if err := reg.Register(svc); err != nil {
			t.Fatal(err)
		}
	}
	c := cache.New(reg, cache.WithTTL(time.Hour))
	t.Cleanup(c.Stop)
	c.GetService("anchor")
	eventually(t, "the stream's scope", func() bool { return reg.scope.Load() != nil })
	return c, reg.scope.Load().(watchscope.Scope)
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

// newScopedCache is a cache over a registry of the package on addr, its
// stream established and its sender run: a gate set from now on
// (gateSender) holds the sender at its next round.
func newScopedCache(t *testing.T, addr string, opts ...cache.Option) (cache.Cache, *probe) {
	t.Helper()
	reg := &probe{Registry: newTestRegistry(t, addr, 5*time.Second)}
	c := cache.New(reg, append([]cache.Option{cache.WithTTL(time.Hour)}, opts...)...)
	t.Cleanup(c.Stop)
	if _, err := c.GetService("anchor"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetService(anchor): %v", err)
	}
	eventually(t, "the stream established", func() bool { return c.Stats().Stream == cache.StreamConnected })
	w := reg.scoped(t)
	eventually(t, "anchor's watch acknowledged", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		kw := w.byPrefix[watchPrefix("anchor")]
		// anchor was held when the stream started; kw is nil once the
		// sender applied its eviction.
		return kw == nil || kw.created
	})
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
	c, reg := newScopedCache(t, s.Addr())
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
	c, reg := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(time.Minute))
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
	c, reg := newScopedCache(t, s.Addr(), cache.WithMinimumRetryInterval(100*time.Millisecond))
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

// A service dropped and held again before the cache is done with its old
// watch's events gets a watch that starts where the old one was, so that
// an old event the cache applies over its new data is corrected by the
// events after it; once the cache is done with them, the new watch starts
// after the newest revision etcd reported before the service was held.
func TestAServiceHeldAgainIsWatchedFromWhereItsOldWatchWas(t *testing.T) {
	w := &scopedWatcher{byPrefix: map[string]*keyWatch{}, byID: map[int64]*keyWatch{}, lastID: sentinelID,
		closing: newClosingWatches(), arm: make(chan struct{}, 1),
		marks: []revMark{{seq: 4, rev: 10}}}
	w.apply([]watchscope.Change{{Service: "a", Held: true, Seq: 5}})
	old := w.byPrefix[watchPrefix("a")]
	old.created, old.next = true, 16 // etcd sent it up to revision 15
	old.queued.Add(1)                // and Next has a response of it
	w.marks = append(w.marks, revMark{seq: 6, rev: 30})
	w.apply([]watchscope.Change{{Service: "a", Held: false, Seq: 7}, {Service: "a", Held: true, Seq: 8}})
	if got := w.requests[len(w.requests)-1].GetCreateRequest().GetStartRevision(); got != 16 {
		t.Errorf("held again while the old watch's events may reach the cache: start %d, want 16", got)
	}
	// etcd ends the old watch; Next is done with its response. The one
	// that replaced it is dropped too, and etcd ends it at once.
	old.finished = true
	old.queued.Add(-1)
	old.doneSeq.Store(8)
	second := w.byPrefix[watchPrefix("a")]
	w.apply([]watchscope.Change{{Service: "a", Held: false, Seq: 9}})
	second.finished = true
	w.marks = append(w.marks, revMark{seq: 9, rev: 40})
	w.apply([]watchscope.Change{{Service: "a", Held: true, Seq: 10}})
	if got := w.requests[len(w.requests)-1].GetCreateRequest().GetStartRevision(); got != 41 {
		t.Errorf("held again once the cache was done with the old watch: start %d, want 41", got)
	}
	if w.closing.byID[old.id] != nil {
		t.Error("the old watch is still remembered")
	}
}

// Next delivers the events of a watch cancelled since they came, and tells
// when the cache is done with them.
func TestNextDeliversTheEventsOfACancelledWatch(t *testing.T) {
	c, scope := memoryScope(t)
	old := &keyWatch{id: 2} // cancelled: in no watcher's byID
	w := &scopedWatcher{scope: scope, items: make(chan scopedItem, 2), stopped: make(chan struct{})}
	put := func(name, node string) *mvccpb.Event {
		v := encode(service(name, "1", node))
		return &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(nodeKey(name, node)), Value: []byte(v), CreateRevision: 5, ModRevision: 5, Version: 1}}
	}
	old.queued.Add(1)
	w.items <- scopedItem{from: old, events: []*mvccpb.Event{put("a", "e1"), put("a", "e2")}}
	for _, want := range []string{"e1", "e2"} {
		res, err := w.Next()
		if err != nil || nodeIDs(res.Service)[0] != want {
			t.Fatalf("Next: %v, %v; want %s", res, err, want)
		}
		if old.queued.Load() != 1 {
			t.Fatalf("done with the response before the cache applied %s", want)
		}
	}
	c.GetService("other") // a change to the services held
	go w.Next()
	eventually(t, "Next done with the response", func() bool { return old.queued.Load() == 0 })
	if got, want := old.doneSeq.Load(), scope.Seq(); got != want {
		t.Errorf("done at change %d, want %d", got, want)
	}
	close(w.stopped)
}

// Names that the plugin's keys make alike share a watch, which lasts as
// long as one of them is held; a change is watched from the newest
// revision etcd reported before it.
func TestScopedWatchesByPrefix(t *testing.T) {
	w := &scopedWatcher{byPrefix: map[string]*keyWatch{}, byID: map[int64]*keyWatch{}, lastID: sentinelID,
		closing: newClosingWatches(), arm: make(chan struct{}, 1),
		marks: []revMark{{seq: 4, rev: 100}, {seq: 6, rev: 120}, {seq: 9, rev: 150}}}
	w.apply([]watchscope.Change{{Service: "a/b", Held: true, Seq: 7}, {Service: "a-b", Held: true, Seq: 8}})
	if len(w.byID) != 1 || len(w.requests) != 1 {
		t.Fatalf("%d watches, %d requests; want 1 of each", len(w.byID), len(w.requests))
	}
	if got := w.requests[0].GetCreateRequest().StartRevision; got != 121 {
		t.Errorf("start revision %d, want 121: from after the newest revision reported before change 7", got)
	}
	w.apply([]watchscope.Change{{Service: "a/b", Held: false, Seq: 10}})
	if len(w.byID) != 1 || len(w.requests) != 1 {
		t.Fatalf("a-b still held: %d watches, %d requests", len(w.byID), len(w.requests))
	}
	kw := w.byPrefix[watchPrefix("a-b")]
	w.apply([]watchscope.Change{{Service: "a-b", Held: false, Seq: 11}})
	if len(w.byID) != 0 || len(w.requests) != 2 || w.requests[1].GetCancelRequest().GetWatchId() != kw.id || w.closing.byID[kw.id] != kw {
		t.Fatalf("none held: %d watches, requests %v, closing %v", len(w.byID), w.requests, w.closing.byID)
	}
	w.apply([]watchscope.Change{{Service: "c", Held: true, Seq: 12}})
	if got := w.requests[2].GetCreateRequest().StartRevision; got != 151 {
		t.Errorf("start revision %d, want 151", got)
	}
	if len(w.marks) != 1 {
		t.Errorf("marks %v: only the newest before the last change is needed", w.marks)
	}
}

// A watch that etcd does not acknowledge within the timeout fails the
// stream, so that the cache redials rather than wait for its events.
func TestAWatchNotAcknowledgedFailsTheStream(t *testing.T) {
	checkNoWatcherLeft(t)
	c, scope := memoryScope(t)
	streams := make(chan *fakeStream, 1)
	open := func(ctx context.Context) (pb.Watch_WatchClient, error) {
		s := newFakeStream(ctx)
		s.resps <- created(sentinelID, 7)
		streams <- s
		return s, nil
	}
	w, err := newScopedWatcherOn(open, newFakeConn(connectivity.Ready), scope, context.Background(), 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	stream := <-streams
	stream.request(t) // the sentinel
	stream.request(t) // anchor's
	if _, err := c.GetService("held"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetService(held): %v", err)
	}
	req := stream.request(t)
	if got := req.GetCreateRequest(); got == nil || string(got.Key) != watchPrefix("held") || got.StartRevision != 8 {
		t.Fatalf("request %v; want a watch of held from revision 8", req)
	}
	res, err := next(t, w, 10*time.Second)
	if !errors.Is(err, errAckTimeout) {
		t.Fatalf("Next: %v, %v; want a watch not acknowledged", res, err)
	}
}

// fakeStream is a watch stream whose requests the test reads and whose
// responses (or error) the test gives.
type fakeStream struct {
	pb.Watch_WatchClient
	ctx   context.Context
	sent  chan *pb.WatchRequest
	resps chan fakeRecv
}

type fakeRecv struct {
	resp *pb.WatchResponse
	err  error
}

func newFakeStream(ctx context.Context) *fakeStream {
	return &fakeStream{ctx: ctx, sent: make(chan *pb.WatchRequest, 16), resps: make(chan fakeRecv, 16)}
}

func (s *fakeStream) Send(r *pb.WatchRequest) error {
	select {
	case s.sent <- r:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *fakeStream) Recv() (*pb.WatchResponse, error) {
	select {
	case r := <-s.resps:
		return r.resp, r.err
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// request is the next request sent on s.
func (s *fakeStream) request(t *testing.T) *pb.WatchRequest {
	t.Helper()
	select {
	case r := <-s.sent:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request within 10 s")
		return nil
	}
}

func created(id, rev int64) fakeRecv {
	return fakeRecv{resp: &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: rev}, WatchId: id, Created: true}}
}

func scopedPut(id int64, name, node string, rev int64) fakeRecv {
	v := encode(service(name, "1", node))
	ev := &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(nodeKey(name, node)), Value: []byte(v), CreateRevision: rev, ModRevision: rev, Version: 1}}
	return fakeRecv{resp: &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: rev}, WatchId: id, Events: []*mvccpb.Event{ev}}}
}

// A stream that breaks while the connection stays up is replaced, and each
// watch resumes at the revision after the last etcd sent of it: nothing is
// lost, nothing repeated, and Next goes on without an error, so that the
// cache need not resync. A stream that breaks again soon after ends the
// watcher instead.
func TestABrokenStreamResumesItsWatches(t *testing.T) {
	checkNoWatcherLeft(t)
	_, scope := memoryScope(t)

	streams := make(chan *fakeStream, 4)
	open := func(ctx context.Context) (pb.Watch_WatchClient, error) {
		s := newFakeStream(ctx)
		streams <- s
		s.resps <- created(sentinelID, 10)
		return s, nil
	}
	w, err := newScopedWatcherOn(open, newFakeConn(connectivity.Ready), scope, context.Background(), 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first := <-streams
	if r := first.request(t).GetCreateRequest(); r == nil || r.WatchId != sentinelID {
		t.Fatalf("first request %v, want the sentinel", r)
	}
	// "anchor" was held before: its watch starts after the stream's
	// revision.
	if r := first.request(t).GetCreateRequest(); string(r.Key) != watchPrefix("anchor") || r.StartRevision != 11 {
		t.Fatalf("request %v, want a watch of anchor from 11", r)
	}
	first.resps <- created(2, 12)
	first.resps <- scopedPut(2, "anchor", "n1", 15)
	if res, err := next(t, w, 10*time.Second); err != nil || nodeIDs(res.Service)[0] != "n1" {
		t.Fatalf("Next: %v, %v", res, err)
	}
	// A break now would resume watch 2 from 16.
	w.mu.Lock()
	if got := w.byID[2].next; got != 16 {
		t.Errorf("watch 2 would resume from %d, want 16", got)
	}
	w.mu.Unlock()

	// etcd compacts what the watch would resume from: it starts again at
	// the compaction, and resumes from there until etcd sends more.
	first.resps <- fakeRecv{resp: &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 25}, WatchId: 2, CompactRevision: 25, Canceled: true}}
	if r := first.request(t).GetCancelRequest(); r == nil || r.WatchId != 2 {
		t.Fatalf("request %v, want watch 2 cancelled: etcd keeps a compacted watch until then", r)
	}
	if r := first.request(t).GetCreateRequest(); r == nil || r.WatchId != 3 || r.StartRevision != 25 {
		t.Fatalf("request %v, want watch 3 from 25", r)
	}
	first.resps <- created(3, 30)

	first.resps <- fakeRecv{err: status.Error(codes.Unavailable, "transport is closing")}
	var second *fakeStream
	select {
	case second = <-streams:
	case <-time.After(10 * time.Second):
		t.Fatal("no new stream within 10 s")
	}
	if r := second.request(t).GetCreateRequest(); r == nil || r.WatchId != sentinelID {
		t.Fatalf("first request on the new stream %v, want the sentinel", r)
	}
	if r := second.request(t).GetCreateRequest(); r == nil || r.WatchId != 3 || r.StartRevision != 25 {
		t.Fatalf("request %v, want watch 3 again from 25", r)
	}
	second.resps <- created(3, 40)
	second.resps <- scopedPut(3, "anchor", "n2", 32)
	if res, err := next(t, w, 10*time.Second); err != nil || nodeIDs(res.Service)[0] != "n2" {
		t.Fatalf("Next after the resumption: %v, %v", res, err)
	}

	second.resps <- fakeRecv{err: status.Error(codes.Unavailable, "transport is closing")}
	if res, err := next(t, w, 10*time.Second); err == nil {
		t.Fatalf("Next: %v; want an error: the stream broke twice within %v", res, resumeEvery)
	}
	if len(streams) != 0 {
		t.Error("a third stream was opened")
	}
}

// An error of etcd's own ends the watcher rather than resume it.
func TestResumable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "transport is closing"), true},
		{status.Error(codes.Unavailable, "etcdserver: no leader"), false},
		{status.Error(codes.Canceled, "context canceled"), false},
		{status.Error(codes.Internal, "x"), false},
		{errors.New("not a status"), false},
	} {
		if got := resumable(tc.err); got != tc.want {
			t.Errorf("resumable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// While the services held are quiet, the watcher asks etcd for its
// revision, so that the revision a service held next is watched from is
// recent, not compacted away.
func TestAQuietStreamKeepsItsRevisionRecent(t *testing.T) {
	checkNoWatcherLeft(t)
	old := quietAfter
	quietAfter = 50 * time.Millisecond
	t.Cleanup(func() { quietAfter = old })
	s := startEtcd(t)
	cl := newClient(t, s.Addr())
	putNode(t, cl, service("anchor", "1", "a"))
	reg := &probe{Registry: newTestRegistry(t, s.Addr(), 5*time.Second)}
	c := cache.New(reg, cache.WithTTL(time.Hour))
	t.Cleanup(c.Stop)
	if _, err := c.GetService("anchor"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stream established", func() bool { return c.Stats().Stream == "connected" })
	w := reg.scoped(t)
	var rev int64
	for i := 0; i < 3; i++ {
		rev = putNode(t, cl, service("unheld", "1", fmt.Sprintf("u%d", i)))
	}
	eventually(t, "the revision of the last change learnt", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.lastRev >= rev
	})
}

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
