package etcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	cache "github.com/regcache/cache"
	"go-micro.dev/v4/registry"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// scopedWatcher is the watch stream of a cache that says which services
// it holds (cache.WatchScope): one gRPC watch stream to etcd carrying a
// watch of the keys of each service held, and of no other, so that etcd
// sends none of the changes of the services the cache does not hold. To
// the cache it is one stream of every service it holds, as the watch of
// the whole registry is, and it covers each service from the registry call
// that fetched it on: a service's watch starts at a revision of etcd's
// that the watcher saw before the cache started to hold the service, and
// so before that call (cache.WatchScope.Seq). Should etcd have compacted
// that revision away, the watch starts at the present one instead, and
// the cache fetches the service again once etcd has created it.
//
// It owns three goroutines, all ended and waited for by Stop: one reads
// etcd's responses, one sends etcd the watches to create and cancel as the
// services held change, and one watches the connection.
type scopedWatcher struct {
	scope    *cache.WatchScope
	follower *cache.Follower
	keep     func(service string) bool
	stream   pb.Watch_WatchClient

	ctx    context.Context // the stream's
	cancel context.CancelFunc
	own    *clientv3.Client // the watcher's own client, or nil

	// items carries etcd's events, a response at a time, and the error
	// that ends the stream, from the goroutines to Next.
	items chan scopedItem
	// wake tells the sender that there are requests to send.
	wake chan struct{}

	// Next's own, for one goroutine at a time.
	pending []*mvccpb.Event
	from    *keyWatch // the watch pending's events came from
	err     error

	mu sync.Mutex
	// byPrefix and byID are the watches open or being opened: a watch per
	// key prefix, which is a watch per service but for names that the
	// plugin's key paths make alike ("a/b" and "a-b").
	byPrefix map[string]*keyWatch
	byID     map[int64]*keyWatch
	lastID   int64
	// lastRev is the newest revision etcd reported, and marks the
	// revisions it reported with the count of changes to the services
	// held (cache.WatchScope.Seq) read after each: ascending in both.
	lastRev int64
	marks   []revMark
	// requests wait for the sender, in order.
	requests []*pb.WatchRequest
	// unacked are the watches asked for, in order, that etcd may not have
	// acknowledged yet; each must be within timeout, or the stream fails.
	unacked []*keyWatch
	timeout time.Duration

	wg       sync.WaitGroup
	stopped  chan struct{}
	stopOnce sync.Once
}

// keyWatch is one watch on the stream: of the keys under prefix, which
// the services names hold.
type keyWatch struct {
	id     int64
	prefix string
	names  map[string]struct{}
	// dead is set once the watch is cancelled: Next drops what of its
	// events it has not delivered yet, since the service's data after
	// them may have been fetched again since.
	dead atomic.Bool
	// revalidate is set on a watch that started at the present revision
	// rather than an earlier one: its services are fetched again once it
	// is created.
	revalidate bool
	// asked is when the watch was asked for, and created is set once etcd
	// acknowledged it.
	asked   time.Time
	created bool
}

type revMark struct {
	seq uint64
	rev int64
}

// scopedItem is what the goroutines pass to Next: the events of one
// response, or the error that ended the stream.
type scopedItem struct {
	from   *keyWatch
	events []*mvccpb.Event
	err    error
}

// sentinelID is the watch that opens the stream: of the one key under the
// registry's prefix that is never a node's, the prefix itself. Its
// acknowledgement tells that etcd answers and the revision to start the
// first watches from, and its progress notifications keep that revision
// recent while the services held are quiet.
const sentinelID = 1

// newScopedWatcher opens the stream and waits for etcd's acknowledgement,
// for at most timeout and while parent is not done, as newWatcher does.
func newScopedWatcher(client *clientv3.Client, scope *cache.WatchScope, parent context.Context, timeout time.Duration) (*scopedWatcher, error) {
	if parent == nil {
		parent = context.Background()
	}
	conn := client.ActiveConnection()

	ctx, cancel := context.WithCancelCause(parent)
	timer := time.AfterFunc(timeout, func() { cancel(errAckTimeout) })
	resetting, endResets := context.WithCancel(ctx)
	var resets sync.WaitGroup
	resets.Add(1)
	go func() {
		defer resets.Done()
		resetBackoffWhileFailing(resetting, conn, resetEvery)
	}()
	// WithRequireLeader, as newWatcher's: a member without a leader
	// cancels the watches rather than keeping them open and silent.
	stream, err := pb.NewWatchClient(conn).Watch(clientv3.WithRequireLeader(ctx), grpc.WaitForReady(true))
	if err == nil {
		err = stream.Send(createRequest(sentinelID, prefix, 0, true))
	}
	var first *pb.WatchResponse
	if err == nil {
		first, err = stream.Recv()
	}
	endResets()
	resets.Wait()
	if !timer.Stop() {
		cancel(errAckTimeout)
	}
	if ctx.Err() != nil {
		cancel(nil)
		if cause := context.Cause(ctx); cause != errAckTimeout {
			return nil, fmt.Errorf("etcd: watch of %s not acknowledged: %w", prefix, cause)
		}
		return nil, fmt.Errorf("etcd: watch of %s not acknowledged within %v: %w", prefix, timeout, errAckTimeout)
	}
	fail := func(err error) (*scopedWatcher, error) {
		cancel(nil)
		return nil, fmt.Errorf("etcd: watch of %s: %w", prefix, err)
	}
	switch {
	case err != nil:
		return fail(err)
	case !first.Created || first.WatchId != sentinelID:
		return fail(fmt.Errorf("etcd answered the watch with %v", first))
	case first.Canceled:
		return fail(fmt.Errorf("etcd refused the watch: %s", first.CancelReason))
	}

	w := &scopedWatcher{
		scope:    scope,
		stream:   stream,
		ctx:      ctx,
		cancel:   func() { cancel(nil) },
		items:    make(chan scopedItem, 16),
		wake:     make(chan struct{}, 1),
		byPrefix: make(map[string]*keyWatch),
		byID:     make(map[int64]*keyWatch),
		lastID:   sentinelID,
		lastRev:  first.Header.GetRevision(),
		timeout:  timeout,
		stopped:  make(chan struct{}),
	}
	// The services held now were fetched before the stream, and the cache
	// re-validates them once Watch returns; the ones held from now on are
	// fetched after the acknowledgement, whose revision their watches can
	// start from.
	names, seq, follower := scope.Follow()
	w.follower = follower
	w.marks = []revMark{{seq, w.lastRev}}
	for _, name := range names {
		w.holdLocked(name, w.lastRev)
	}
	w.wg.Add(3)
	go w.receive()
	go w.send()
	go w.monitor(conn)
	return w, nil
}

// createRequest asks for a watch, numbered id, of the keys under p (of the
// key p alone, for the sentinel) from revision start on (0: from now), with
// each delete's previous value.
func createRequest(id int64, p string, start int64, sentinel bool) *pb.WatchRequest {
	create := &pb.WatchCreateRequest{
		Key:           []byte(p),
		StartRevision: start,
		PrevKv:        true,
		WatchId:       id,
	}
	if sentinel {
		create.ProgressNotify = true
	} else {
		create.RangeEnd = []byte(clientv3.GetPrefixRangeEnd(p))
	}
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}
}

func cancelRequest(id int64) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}
}

// holdLocked watches the keys of a service now held, from the revision
// after rev, unless a watch of its keys is open. w.mu is held.
func (w *scopedWatcher) holdLocked(name string, rev int64) {
	p := watchPrefix(name)
	if kw := w.byPrefix[p]; kw != nil {
		kw.names[name] = struct{}{}
		return
	}
	w.openLocked(p, map[string]struct{}{name: {}}, rev+1, false)
}

// openLocked opens a watch of the keys under p, for names, from start.
func (w *scopedWatcher) openLocked(p string, names map[string]struct{}, start int64, revalidate bool) {
	w.lastID++
	kw := &keyWatch{id: w.lastID, prefix: p, names: names, revalidate: revalidate, asked: time.Now()}
	w.byPrefix[p] = kw
	w.byID[kw.id] = kw
	w.unacked = append(w.unacked, kw)
	w.requests = append(w.requests, createRequest(kw.id, p, start, false))
}

// closeLocked cancels kw.
func (w *scopedWatcher) closeLocked(kw *keyWatch) {
	kw.dead.Store(true)
	delete(w.byPrefix, kw.prefix)
	delete(w.byID, kw.id)
	w.requests = append(w.requests, cancelRequest(kw.id))
}

// dropLocked cancels the watch of a service no longer held, unless it
// watches another service held too.
func (w *scopedWatcher) dropLocked(name string) {
	kw := w.byPrefix[watchPrefix(name)]
	if kw == nil {
		return
	}
	delete(kw.names, name)
	if len(kw.names) == 0 {
		w.closeLocked(kw)
	}
}

// revBeforeLocked returns the newest revision that etcd reported before
// the change numbered seq, and forgets the marks no change after it needs.
func (w *scopedWatcher) revBeforeLocked(seq uint64) int64 {
	i := len(w.marks) - 1
	for i > 0 && w.marks[i].seq >= seq {
		i--
	}
	// Changes come in order: the ones after this need no older mark.
	if i > 0 {
		w.marks = append(w.marks[:0], w.marks[i:]...)
	}
	return w.marks[0].rev
}

// apply opens and cancels watches for the changes to the services held.
func (w *scopedWatcher) apply(changes []cache.HeldChange) {
	w.mu.Lock()
	for _, ch := range changes {
		if ch.Held {
			w.holdLocked(ch.Service, w.revBeforeLocked(ch.Seq))
		} else {
			w.dropLocked(ch.Service)
		}
	}
	w.mu.Unlock()
}

// beforeSend, when set (by tests), is called by the sender before it takes
// the requests waiting.
var beforeSend atomic.Pointer[func()]

// send sends etcd the requests, as the services held change, and fails
// the stream when etcd has not acknowledged a watch within the timeout.
func (w *scopedWatcher) send() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if f := beforeSend.Load(); f != nil {
			(*f)()
		}
		w.mu.Lock()
		requests := w.requests
		w.requests = nil
		w.mu.Unlock()
		for _, r := range requests {
			if err := w.stream.Send(r); err != nil {
				w.deliver(scopedItem{err: fmt.Errorf("etcd: watch: %w", err)})
				return
			}
		}
		w.mu.Lock()
		due, err := w.overdueLocked(time.Now())
		w.mu.Unlock()
		if err != nil {
			w.deliver(scopedItem{err: err})
			return
		}
		timer.Stop()
		if !due.IsZero() {
			timer.Reset(time.Until(due))
		}
		select {
		case <-w.ctx.Done():
			return
		case <-w.follower.Changed():
			w.apply(w.follower.Changes())
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// overdueLocked returns when the oldest watch etcd has not acknowledged
// is due, or, if it is overdue, the error that ends the stream.
func (w *scopedWatcher) overdueLocked(now time.Time) (due time.Time, err error) {
	for len(w.unacked) > 0 && (w.unacked[0].created || w.unacked[0].dead.Load()) {
		w.unacked[0] = nil
		w.unacked = w.unacked[1:]
	}
	if len(w.unacked) == 0 {
		return time.Time{}, nil
	}
	kw := w.unacked[0]
	due = kw.asked.Add(w.timeout)
	if !now.Before(due) {
		return due, fmt.Errorf("etcd: watch of %s not acknowledged within %v: %w", kw.prefix, w.timeout, errAckTimeout)
	}
	return due, nil
}

// receive reads etcd's responses until the stream ends.
func (w *scopedWatcher) receive() {
	defer w.wg.Done()
	for {
		resp, err := w.stream.Recv()
		if err != nil {
			w.deliver(scopedItem{err: streamError(w.ctx, err)})
			return
		}
		item, revalidate, err := w.received(resp)
		for _, name := range revalidate {
			w.scope.Revalidate(name)
		}
		if err == nil && item.events == nil {
			continue
		}
		if err != nil {
			item = scopedItem{err: err}
		}
		if !w.deliver(item) || err != nil {
			return
		}
	}
}

// streamError is the error that ended the stream: ctx's cause, if it is
// done, or err.
func streamError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("etcd: the watch ended: %w", cause)
	}
	return fmt.Errorf("etcd: watch: %w", err)
}

// received records one response: the revision it reports, a watch created
// (and the services to fetch again, if it started late), a watch etcd
// ended. It returns the events to deliver, or the error that ends the
// stream.
func (w *scopedWatcher) received(resp *pb.WatchResponse) (item scopedItem, revalidate []string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev := resp.Header.GetRevision(); rev > w.lastRev {
		w.lastRev = rev
		seq := w.scope.Seq()
		if last := &w.marks[len(w.marks)-1]; last.seq == seq {
			last.rev = rev // the same changes came after it
		} else {
			w.marks = append(w.marks, revMark{seq, rev})
		}
	}
	if resp.WatchId == sentinelID {
		if resp.Canceled {
			return item, nil, fmt.Errorf("etcd: watch of %s cancelled: %s", prefix, resp.CancelReason)
		}
		return item, nil, nil // progress, or a stray value at the prefix
	}
	kw := w.byID[resp.WatchId]
	switch {
	case kw == nil:
		// A watch cancelled since: nothing of it is wanted.
	case resp.CompactRevision != 0:
		// etcd no longer has the revision the watch started from, and
		// ended it: a watch from now, and the services fetched again
		// once it is created.
		w.closeLocked(kw)
		w.requests = w.requests[:len(w.requests)-1] // etcd has ended it
		w.openLocked(kw.prefix, kw.names, 0, true)
		w.wakeSender()
	case resp.Canceled:
		return item, nil, fmt.Errorf("etcd: watch of %s cancelled: %s", kw.prefix, resp.CancelReason)
	case resp.Created:
		kw.created = true
		if kw.revalidate {
			kw.revalidate = false
			for name := range kw.names {
				revalidate = append(revalidate, name)
			}
		}
	case len(resp.Events) > 0:
		item = scopedItem{from: kw, events: resp.Events}
	}
	return item, revalidate, nil
}

func (w *scopedWatcher) wakeSender() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// monitor tells Next when the connection to etcd is lost, as the watch of
// the whole registry's does.
func (w *scopedWatcher) monitor(conn connState) {
	defer w.wg.Done()
	if err := watchConnection(w.ctx, conn, grace); err != nil {
		w.deliver(scopedItem{err: err})
	}
}

// deliver passes it to Next, unless the watch is stopped first.
func (w *scopedWatcher) deliver(it scopedItem) bool {
	select {
	case w.items <- it:
		return true
	case <-w.ctx.Done():
		return false
	}
}

var _ registry.Watcher = (*scopedWatcher)(nil)

// Next returns the next event of a service held: every event of every
// response of its watch, in order, but the values that are not services,
// the services the watch filter does not keep, and the events of a watch
// cancelled since they came. It fails, and keeps failing, as the watch of
// the whole registry's Next does; after Stop it returns
// registry.ErrWatcherStopped. It is for one goroutine at a time, and safe
// with Stop.
func (w *scopedWatcher) Next() (*registry.Result, error) {
	for {
		select {
		case <-w.stopped:
			return nil, registry.ErrWatcherStopped
		default:
		}
		if w.err != nil {
			return nil, w.err
		}
		for len(w.pending) > 0 && !w.from.dead.Load() {
			ev := w.pending[0]
			w.pending[0] = nil
			w.pending = w.pending[1:]
			res, err := result((*clientv3.Event)(ev), w.keep)
			if err != nil {
				w.err = err
				return nil, err
			}
			if res != nil {
				return res, nil
			}
		}
		w.pending, w.from = nil, nil
		select {
		case <-w.stopped:
			return nil, registry.ErrWatcherStopped
		case it := <-w.items:
			if it.err != nil {
				w.err = it.err
				continue
			}
			w.pending, w.from = it.events, it.from
		}
	}
}

// Stop ends the stream: Next returns registry.ErrWatcherStopped, and the
// goroutines and own client, if any, are gone when it returns. It is
// idempotent, and safe with Next.
func (w *scopedWatcher) Stop() {
	w.stopOnce.Do(func() {
		close(w.stopped)
		w.follower.Stop()
		w.cancel()
		w.wg.Wait()
		if w.own != nil {
			w.own.Close()
		}
	})
}
