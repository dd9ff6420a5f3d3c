package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/watchscope"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scopedWatcher is the watch stream of a cache that says which services
// it holds (watchscope.Scope): one gRPC watch stream to etcd carrying a
// watch of the keys of each service held, and of no other, so that etcd
// sends none of the changes of the services the cache does not hold. To
// the cache it is one stream of every service it holds, as the watch of
// the whole registry is, and it covers each service from the registry call
// that fetched it on: a service's watch starts at a revision of etcd's
// that the watcher saw before the cache started to hold the service, and
// so before that call (watchscope.Scope.Seq). Should etcd have compacted
// that revision away, the watch starts at the compaction instead, and the
// cache fetches the service again once etcd has created it. A stream that
// breaks while the connection stays up is replaced, each watch resuming
// where it was.
//
// A watch that etcd refuses (a user whose role may not read the service's
// keys, under etcd auth) costs its service alone: the refusal is logged
// with etcd's reason, the service is re-validated (through the cache, under
// its retry window), and the watch is asked for again on a backoff
// (refusedWatch); the stream and every other watch go on.
//
// It needs an etcd that numbers each watch as the client asks
// (WatchCreateRequest.WatchId, etcd 3.4 on), which etcd's gRPC proxy does
// not: its first answer tells (errNoClientIDs), and Watch then falls back
// to one watch of the whole registry.
//
// It owns four goroutines, all ended and waited for by Stop: one reads
// etcd's responses (and resumes the watches on a new stream), one sends
// etcd the watches to create and cancel as the services held change, one
// watches the connection, and one fails the stream when etcd does not
// acknowledge a watch in time, asks etcd again for the watches it refused
// when their retry is due, and asks etcd for its revision while the stream
// is quiet.
type scopedWatcher struct {
	scope    watchscope.Scope
	follower watchscope.Follower
	keep     func(service string) bool
	// open opens a gRPC watch stream, and conn is the connection it uses.
	open func(ctx context.Context) (pb.Watch_WatchClient, error)
	conn connState

	ctx    context.Context // the watcher's: ends it
	cancel context.CancelFunc
	own    *clientv3.Client // the watcher's own client, or nil
	// log is the registry's logger, which the receiver writes told to,
	// outside the lock.
	log logger.Logger

	// items carries etcd's events, a response at a time, and the error
	// that ends the stream, from the goroutines to Next.
	items chan scopedItem
	// wake tells the sender that there are requests to send, and arm the
	// watchdog that a watch was asked for.
	wake, arm chan struct{}

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
	// closing are the watches cancelled while their events may still
	// reach the cache.
	closing closingWatches
	// applied is the number of the last change applied.
	applied uint64
	// lastRev is the newest revision etcd reported, and marks the
	// revisions it reported with the count of changes to the services
	// held (watchscope.Scope.Seq) read after each: ascending in both.
	lastRev int64
	marks   []revMark
	// requests wait for the sender, in order.
	requests []*pb.WatchRequest
	// awaiting are the watches asked for on the stream, in order, that
	// etcd has not answered yet, cancelled ones among them: etcd answers
	// the creations in the order asked, and a refusal does not name the
	// watch it refuses (its WatchId is -1), so it is the first awaiting's.
	// Each must be answered within timeout, or the stream fails.
	awaiting []*keyWatch
	timeout  time.Duration
	// refused are the watches etcd refused, by prefix, waiting for their
	// retry.
	refused map[string]*refusedWatch
	// told are the lines for the log, waiting for the receiver.
	told []toldLine
	// stream is the gRPC stream open now, endStream ends it, and resumed
	// is when it replaced one that broke.
	stream    pb.Watch_WatchClient
	endStream context.CancelFunc
	resumed   time.Time
	// heard is when etcd last sent a response, and asked when the
	// watchdog last asked it for its revision.
	heard, asked time.Time

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
	// delivery is how far the cache is with the watch's events, which
	// matters once it is cancelled (it is then in closing, no longer in
	// byID).
	delivery
	// revalidate is set on a watch that started later than it was asked
	// to (etcd had compacted that revision): its services are fetched
	// again once it is created.
	revalidate bool
	// asked is when the watch was asked for, and created is set once etcd
	// acknowledged it.
	asked   time.Time
	created bool
	// refusal is set on a watch asked for again after etcd refused it.
	refusal *refusedWatch
	// next is the revision to resume the watch from on another stream:
	// the one after the last that etcd sent of it, or that it started
	// from.
	next int64
}

// refusedWatch is a watch of the keys under prefix, for names, that etcd
// refused, failures times in a row, last for reason: it is asked for again
// at retry (a full-jitter backoff, as a stream's redial), and its services
// are re-validated once etcd creates it, their events in between missed.
type refusedWatch struct {
	prefix   string
	names    map[string]struct{}
	failures int
	reason   string
	retry    time.Time
}

type toldLine struct {
	level logger.Level
	line  string
}

// tellLocked queues a line for the log, which receive writes outside the
// lock.
func (w *scopedWatcher) tellLocked(level logger.Level, format string, args ...any) {
	w.told = append(w.told, toldLine{level, fmt.Sprintf(format, args...)})
}

// flushTold writes the lines queued for the log.
func (w *scopedWatcher) flushTold() {
	w.mu.Lock()
	told := w.told
	w.told = nil
	w.mu.Unlock()
	for _, t := range told {
		w.log.Log(t.level, t.line)
	}
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

// progressID is the watch of etcd's answer to a progress request (every
// watch on the stream), and of its refusal of a watch, which tells them
// apart with Created.
const progressID = -1

// errNoClientIDs is the first answer of an etcd that does not number the
// watches as the client asks: etcd's gRPC proxy, or a server older than
// 3.4. The scoped stream cannot tell its watches apart there.
var errNoClientIDs = errors.New("etcd does not honour client-chosen watch ids")

// newScopedWatcher opens the stream and waits for etcd's acknowledgement,
// for at most timeout and while parent is not done, as newWatcher does.
func newScopedWatcher(client *clientv3.Client, scope watchscope.Scope, parent context.Context, timeout time.Duration, log logger.Logger) (*scopedWatcher, error) {
	if parent == nil {
		parent = context.Background()
	}
	conn := client.ActiveConnection()
	open := func(ctx context.Context) (pb.Watch_WatchClient, error) { return openStream(ctx, conn) }
	return newScopedWatcherOn(open, conn, scope, parent, timeout, log)
}

// newScopedWatcherOn is newScopedWatcher with the streams that open opens
// on conn.
func newScopedWatcherOn(open func(context.Context) (pb.Watch_WatchClient, error), conn backoffConn,
	scope watchscope.Scope, parent context.Context, timeout time.Duration, log logger.Logger) (*scopedWatcher, error) {
	if log == nil {
		log = logger.DefaultLogger
	}
	ctx, cancel := context.WithCancel(parent)
	w := &scopedWatcher{
		log:      log,
		refused:  make(map[string]*refusedWatch),
		scope:    scope,
		open:     open,
		conn:     conn,
		ctx:      ctx,
		cancel:   cancel,
		items:    make(chan scopedItem, 16),
		wake:     make(chan struct{}, 1),
		arm:      make(chan struct{}, 1),
		byPrefix: make(map[string]*keyWatch),
		byID:     make(map[int64]*keyWatch),
		closing:  newClosingWatches(),
		lastID:   sentinelID,
		timeout:  timeout,
		stopped:  make(chan struct{}),
	}
	stream, endStream, err := w.openAcknowledged(conn, timeout)
	if err != nil {
		cancel()
		return nil, err
	}
	w.start(stream, endStream)
	return w, nil
}

// start follows the services held and starts the goroutines.
func (w *scopedWatcher) start(stream pb.Watch_WatchClient, endStream context.CancelFunc) {
	w.stream, w.endStream = stream, endStream
	// The services held now were fetched before the stream, and the cache
	// re-validates them once Watch returns; the ones held from now on are
	// fetched after the acknowledgement, whose revision their watches can
	// start from.
	names, seq, follower := w.scope.Follow()
	w.follower = follower
	w.marks = []revMark{{seq, w.lastRev}}
	for _, name := range names {
		w.holdLocked(name, w.lastRev)
	}
	w.heard = time.Now()
	w.wg.Add(4)
	go w.receive(stream)
	go w.send()
	go w.monitor(w.conn)
	go w.watchdog()
}

// openStream opens a gRPC watch stream on conn, until ctx is done.
func openStream(ctx context.Context, conn *grpc.ClientConn) (pb.Watch_WatchClient, error) {
	// WithRequireLeader, as newWatcher's: a member without a leader
	// cancels the watches rather than keeping them open and silent.
	// etcd's client allows responses of any size; gRPC's default is 4 MB,
	// which the catch-up of a watch started at an older revision may pass.
	return pb.NewWatchClient(conn).Watch(clientv3.WithRequireLeader(ctx),
		grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(math.MaxInt32))
}

// openAcknowledged opens a stream with the sentinel's watch, and waits for
// etcd's acknowledgement for at most timeout (awaitAck, with conn's
// backoff reset meanwhile if conn is not nil), recording its revision.
// The stream lasts until the watcher's context is done or endStream is
// called.
func (w *scopedWatcher) openAcknowledged(conn backoffConn, timeout time.Duration) (stream pb.Watch_WatchClient, endStream context.CancelFunc, err error) {
	var rev int64
	_, endStream, err = awaitAck(w.ctx, conn, prefix, timeout, func(ctx context.Context) error {
		s, err := w.open(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(createRequest(sentinelID, prefix, 0, true)); err != nil {
			return err
		}
		first, err := s.Recv()
		switch {
		case err != nil:
			return err
		case !first.Created:
			return fmt.Errorf("etcd answered the watch with %v", first)
		case first.Canceled:
			return fmt.Errorf("etcd refused the watch: %s", first.CancelReason)
		case first.WatchId != sentinelID:
			return fmt.Errorf("%w: the watch asked for as %d is %d", errNoClientIDs, sentinelID, first.WatchId)
		}
		stream, rev = s, first.Header.GetRevision()
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	w.mu.Lock()
	w.noteRevisionLocked(rev)
	w.mu.Unlock()
	return stream, endStream, nil
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
	if !watchable(name) {
		return
	}
	p := watchPrefix(name)
	if kw := w.byPrefix[p]; kw != nil {
		kw.names[name] = struct{}{}
		return
	}
	if r := w.refused[p]; r != nil {
		r.names[name] = struct{}{}
		return
	}
	w.openLocked(p, map[string]struct{}{name: {}}, rev+1, false)
}

// watchable reports whether a service's keys can be watched on their own:
// the plugin writes the nodes of "", "." and ".." (with "/" made "-")
// elsewhere than under a folder of their own, and reads every node of the
// registry for them, so a watch of theirs would be of the whole registry.
// Their changes reach the cache at its TTL refreshes.
func watchable(name string) bool {
	switch strings.ReplaceAll(name, "/", "-") {
	case "", ".", "..":
		return false
	}
	return true
}

// openLocked opens a watch of the keys under p, for names, from start.
func (w *scopedWatcher) openLocked(p string, names map[string]struct{}, start int64, revalidate bool) {
	w.lastID++
	kw := &keyWatch{id: w.lastID, prefix: p, names: names, revalidate: revalidate, asked: time.Now(), next: start}
	w.byPrefix[p] = kw
	w.byID[kw.id] = kw
	w.awaiting = append(w.awaiting, kw)
	select {
	case w.arm <- struct{}{}:
	default:
	}
	w.requests = append(w.requests, createRequest(kw.id, p, start, false))
}

// closeLocked cancels kw. Its events received still reach the cache
// (closingWatches).
func (w *scopedWatcher) closeLocked(kw *keyWatch) {
	delete(w.byPrefix, kw.prefix)
	delete(w.byID, kw.id)
	w.closing.add(kw)
	w.requests = append(w.requests, cancelRequest(kw.id))
}

// dropLocked cancels the watch of a service no longer held, unless it
// watches another service held too.
func (w *scopedWatcher) dropLocked(name string) {
	p := watchPrefix(name)
	if r := w.refused[p]; r != nil {
		delete(r.names, name)
		if len(r.names) == 0 {
			delete(w.refused, p)
		}
		return
	}
	kw := w.byPrefix[p]
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
func (w *scopedWatcher) apply(changes []watchscope.Change) {
	w.mu.Lock()
	for _, ch := range changes {
		if ch.Held {
			rev := w.closing.startAfter(watchPrefix(ch.Service), ch.Seq, w.revBeforeLocked(ch.Seq))
			w.holdLocked(ch.Service, rev)
		} else {
			w.dropLocked(ch.Service)
		}
		w.applied = ch.Seq
	}
	w.closing.sweep(w.applied + 1)
	w.mu.Unlock()
}

// beforeSend, when set (by tests), is called by the sender before it takes
// the requests waiting.
var beforeSend atomic.Pointer[func()]

// send sends etcd the requests, as the services held change, and fails
// the stream when etcd has not acknowledged a watch within the timeout.
func (w *scopedWatcher) send() {
	defer w.wg.Done()
	for {
		if f := beforeSend.Load(); f != nil {
			(*f)()
		}
		w.mu.Lock()
		stream, requests := w.stream, w.requests
		w.requests = nil
		w.mu.Unlock()
		for _, r := range requests {
			if stream.Send(r) != nil {
				// The stream broke: the receiver sees it too, and
				// either resumes the watches on another, asking again
				// for what was not sent, or ends the watcher.
				break
			}
		}
		select {
		case <-w.ctx.Done():
			return
		case <-w.follower.Changed():
			w.apply(w.follower.Changes())
		case <-w.wake:
		}
	}
}

// quietAfter is how long a stream may go without a response from etcd
// before the watchdog asks etcd for its revision: the revision that the
// watch of a service held next starts after stays that recent, well
// within what etcd keeps of its history, so that it is seldom compacted.
var quietAfter = 5 * time.Second // a variable for tests

// watchdog fails the stream when etcd has not acknowledged a watch within
// the timeout, whether or not the sender is stuck sending (a connection
// that takes nothing, flow control full), asks etcd again for the watches
// it refused once their retry is due, and asks etcd for its revision
// while the stream is quiet.
func (w *scopedWatcher) watchdog() {
	defer w.wg.Done()
	quiet := quietAfter
	t := time.NewTimer(quiet)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		case <-w.arm:
		}
		now := time.Now()
		w.mu.Lock()
		due, err := w.overdueLocked(now)
		if err != nil {
			end := w.endStream
			w.mu.Unlock()
			// The error first, then the end of the stream (and of a Send
			// stuck on it), whose own error comes after.
			w.deliver(scopedItem{err: err})
			end()
			return
		}
		retried, retry := w.retryRefusedLocked(now)
		ask := !now.Before(w.heard.Add(quiet)) && !now.Before(w.asked.Add(quiet))
		if ask {
			w.asked = now
			w.requests = append(w.requests, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
		}
		next := w.heard
		if w.asked.After(next) {
			next = w.asked
		}
		next = next.Add(quiet)
		if !due.IsZero() && due.Before(next) {
			next = due
		}
		if !retry.IsZero() && retry.Before(next) {
			next = retry
		}
		w.mu.Unlock()
		if ask || retried {
			w.wakeSender()
		}
		t.Stop()
		t.Reset(time.Until(next))
	}
}

// overdueLocked returns when the oldest watch etcd has not acknowledged
// is due, or, if it is overdue, the error that ends the stream.
func (w *scopedWatcher) overdueLocked(now time.Time) (due time.Time, err error) {
	// etcd answers every creation asked for, of a watch cancelled since
	// too.
	if len(w.awaiting) == 0 {
		return time.Time{}, nil
	}
	kw := w.awaiting[0]
	due = kw.asked.Add(w.timeout)
	if !now.Before(due) {
		return due, fmt.Errorf("etcd: watch of %s not acknowledged within %v: %w", kw.prefix, w.timeout, errAckTimeout)
	}
	return due, nil
}

// receive reads etcd's responses until the stream ends, and resumes the
// watches on a new stream when it broke but the connection did not.
func (w *scopedWatcher) receive(stream pb.Watch_WatchClient) {
	defer w.wg.Done()
	for {
		resp, err := stream.Recv()
		if err != nil {
			if stream, err = w.resume(err); err != nil {
				w.deliver(scopedItem{err: err})
				return
			}
			continue
		}
		item, revalidate, err := w.received(resp)
		w.flushTold()
		for _, name := range revalidate {
			w.scope.Revalidate(name)
		}
		if err == nil && item.events == nil {
			continue
		}
		if err != nil {
			item = scopedItem{err: err}
		} else {
			item.from.passed()
		}
		if !w.deliver(item) || err != nil {
			return
		}
	}
}

// resumeEvery is the least time between two resumptions: a stream that
// keeps breaking ends the watcher, and the cache above resyncs.
const resumeEvery = 10 * time.Second

// resume replaces a stream that broke, with err, by a new one on which
// each watch resumes at the revision after the last etcd sent of it, as
// etcd's client resumes its watches, so that nothing is lost or repeated
// and the cache need not resync: a GOAWAY, or a member of the cluster
// going away while the connection stays up through the others. It fails,
// and the watcher ends, when the watcher is stopped, when etcd ended the
// stream itself (a member without a leader), when the last resumption was
// less than resumeEvery ago, and when the new stream is not acknowledged
// within grace (the connection's monitor reports an outage meanwhile).
func (w *scopedWatcher) resume(broke error) (pb.Watch_WatchClient, error) {
	if w.ctx.Err() != nil {
		return nil, streamError(w.ctx, broke)
	}
	now := time.Now()
	w.mu.Lock()
	w.endStream()
	recent := !w.resumed.IsZero() && now.Sub(w.resumed) < resumeEvery
	w.mu.Unlock()
	if !resumable(broke) || recent {
		return nil, streamError(w.ctx, broke)
	}
	stream, endStream, err := w.openAcknowledged(nil, grace)
	if err != nil {
		return nil, fmt.Errorf("etcd: watch: %w; resuming it: %w", broke, err)
	}
	w.mu.Lock()
	w.stream, w.endStream, w.resumed = stream, endStream, time.Now()
	// Every watch is asked for again on the new stream, from where it
	// was; what waited to be sent on the old one is in that, but for
	// cancellations, which the old stream's end made. The watches refused
	// wait for their retry, on this stream.
	w.requests = w.requests[:0]
	clear(w.awaiting)
	w.awaiting = w.awaiting[:0]
	w.closing.finishAll()
	for _, kw := range w.byID {
		kw.created, kw.asked = false, time.Now()
		w.awaiting = append(w.awaiting, kw)
		w.requests = append(w.requests, createRequest(kw.id, kw.prefix, kw.next, false))
	}
	w.mu.Unlock()
	w.wakeSender()
	select {
	case w.arm <- struct{}{}:
	default:
	}
	return stream, nil
}

// resumable reports whether a stream that broke with err may be resumed:
// a transport that went away, not an error of etcd's.
func resumable(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && !strings.Contains(st.Message(), rpctypes.ErrNoLeader.Error())
}

// streamError is the error that ended the stream: ctx's cause, if it is
// done, or err.
func streamError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("etcd: the watch ended: %w", cause)
	}
	return fmt.Errorf("etcd: watch: %w", err)
}

// received records one response and returns the events to deliver, the
// services to fetch again, or the error that ends the stream.
func (w *scopedWatcher) received(resp *pb.WatchResponse) (item scopedItem, revalidate []string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteRevisionLocked(resp.Header.GetRevision())
	if resp.Created {
		// Before the id: etcd's refusal has the id of its answer to a
		// progress request, and a revision that does not tell how far
		// any watch is.
		revalidate, err = w.answeredLocked(resp)
		return item, revalidate, err
	}
	switch id := resp.WatchId; {
	case id == sentinelID:
		if resp.Canceled {
			return item, nil, fmt.Errorf("etcd: watch of %s cancelled: %s", prefix, resp.CancelReason)
		}
		// Progress, or a stray value at the prefix.
	case id == progressID:
		w.progressLocked(resp.Header.GetRevision())
	case w.byID[id] != nil:
		return w.receivedOpenLocked(w.byID[id], resp)
	case w.closing.byID[id] != nil:
		return w.closing.received(w.closing.byID[id], resp, w.applied+1), nil, nil
	}
	// Otherwise a watch the cache is done with.
	return item, nil, nil
}

// progressLocked records etcd's answer to a progress request: every watch
// on the stream has sent all it had up to rev, so a quiet watch resumes
// after it, not at its start, which etcd may have compacted since.
func (w *scopedWatcher) progressLocked(rev int64) {
	for _, kw := range w.byID {
		if kw.created {
			kw.next = max(kw.next, rev+1)
		}
	}
}

// answeredLocked records etcd's answer to the first creation awaiting it:
// the watch created, or refused. It returns the services to fetch again:
// of a watch created later than asked for (a compaction) or after a
// refusal, whose events in between are lost, and of a watch refused. An
// answer that is neither ends the stream.
func (w *scopedWatcher) answeredLocked(resp *pb.WatchResponse) (revalidate []string, err error) {
	if len(w.awaiting) == 0 {
		return nil, fmt.Errorf("etcd: an answer to no watch asked for: %v", resp)
	}
	kw := w.awaiting[0]
	w.awaiting[0] = nil
	w.awaiting = w.awaiting[1:]
	open := w.byID[kw.id] == kw
	switch {
	case resp.Canceled && resp.WatchId == progressID:
		if !open {
			kw.finished = true // cancelled since: nothing more of it comes
			w.closing.sweep(w.applied + 1)
			return nil, nil
		}
		return w.refuseLocked(kw, resp.CancelReason), nil
	case resp.Canceled || resp.WatchId != kw.id:
		return nil, fmt.Errorf("etcd: the watch of %s, asked for as %d, answered as %d (cancelled: %v %s)",
			kw.prefix, kw.id, resp.WatchId, resp.Canceled, resp.CancelReason)
	case !open:
		return nil, nil // its cancellation follows
	}
	kw.created = true
	if r := kw.refusal; r != nil {
		kw.refusal = nil
		w.tellLocked(logger.InfoLevel, "etcd: the watch of %s is accepted after %d refusals: its events are delivered again", kw.prefix, r.failures)
	}
	if kw.revalidate {
		kw.revalidate = false
		for name := range kw.names {
			revalidate = append(revalidate, name)
		}
	}
	return revalidate, nil
}

// refuseLocked records etcd's refusal of kw, open: it is no longer on the
// stream, its services lose their events until etcd accepts it, and are
// re-validated now, in case they changed since they were fetched. The
// first refusal of a watch, and a refusal for another reason, are logged.
func (w *scopedWatcher) refuseLocked(kw *keyWatch, reason string) (revalidate []string) {
	delete(w.byID, kw.id)
	delete(w.byPrefix, kw.prefix)
	r := kw.refusal
	if r == nil {
		r = &refusedWatch{prefix: kw.prefix}
	}
	r.names = kw.names
	r.failures++
	if r.failures == 1 || r.reason != reason {
		w.tellLocked(logger.ErrorLevel, "etcd: the watch of %s (%s) was refused: %s; its changes reach the cache at its refreshes, and the watch is asked for again on a backoff",
			kw.prefix, strings.Join(sortedNames(r.names), ", "), reason)
	}
	r.reason = reason
	r.retry = time.Now().Add(policy.Backoff(r.failures, rand.Float64()))
	w.refused[kw.prefix] = r
	select {
	case w.arm <- struct{}{}:
	default:
	}
	for name := range r.names {
		revalidate = append(revalidate, name)
	}
	return revalidate
}

// retryRefusedLocked asks etcd again for the refused watches whose retry
// is due, from the next revision, their services to be re-validated once
// it is created. It reports whether it asked for any, and when the next
// retry is due (zero if none).
func (w *scopedWatcher) retryRefusedLocked(now time.Time) (retried bool, next time.Time) {
	for p, r := range w.refused {
		if now.Before(r.retry) {
			if next.IsZero() || r.retry.Before(next) {
				next = r.retry
			}
			continue
		}
		delete(w.refused, p)
		w.openLocked(p, r.names, w.lastRev+1, true)
		w.byPrefix[p].refusal = r
		retried = true
	}
	return retried, next
}

func sortedNames(names map[string]struct{}) []string {
	out := make([]string, 0, len(names))
	for name := range names {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// receivedOpenLocked records a response of kw, open, other than etcd's
// answer to its creation: its events, or its end.
func (w *scopedWatcher) receivedOpenLocked(kw *keyWatch, resp *pb.WatchResponse) (item scopedItem, revalidate []string, err error) {
	switch {
	case resp.CompactRevision != 0:
		// etcd no longer has the revision the watch started from: a
		// watch from the oldest revision it has, and the services
		// fetched again once it is created, in case etcd compacted what
		// came after their registry call. etcd sends nothing more of the
		// old watch, but keeps it, never synced, until it is cancelled,
		// and answers no progress request meanwhile.
		w.closeLocked(kw)
		kw.finished = true
		w.openLocked(kw.prefix, kw.names, resp.CompactRevision, true)
		w.wakeSender()
	case resp.Canceled:
		return item, nil, fmt.Errorf("etcd: watch of %s cancelled: %s", kw.prefix, resp.CancelReason)
	default:
		item = kw.eventsOf(resp)
	}
	return item, revalidate, nil
}

// eventsOf returns the events of resp, a response of kw's, to pass to
// Next, and moves where kw resumes past them.
func (kw *keyWatch) eventsOf(resp *pb.WatchResponse) scopedItem {
	if len(resp.Events) == 0 {
		return scopedItem{}
	}
	kw.next = resp.Events[len(resp.Events)-1].Kv.ModRevision + 1
	return scopedItem{from: kw, events: resp.Events}
}

// noteRevisionLocked records a revision etcd reported, with the count of
// changes to the services held seen by then.
func (w *scopedWatcher) noteRevisionLocked(rev int64) {
	w.heard = time.Now()
	if rev <= w.lastRev {
		return
	}
	w.lastRev = rev
	seq := w.scope.Seq()
	if n := len(w.marks); n > 0 && w.marks[n-1].seq == seq {
		w.marks[n-1].rev = rev // the same changes came after it
	} else {
		w.marks = append(w.marks, revMark{seq, rev})
	}
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
// response of its watch, in order, but the values that are not services
// and the services the watch filter does not keep; the events of a watch
// cancelled since they came are delivered too, so that the cache is done
// with them before a watch that replaces it. It fails, and keeps failing,
// as the watch of the whole registry's Next does; after Stop it returns
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
		for len(w.pending) > 0 {
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
		// The cache applied what this Next's predecessors returned.
		if w.from != nil {
			w.from.doneWith(w.scope.Seq())
			w.pending, w.from = nil, nil
		}
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
		if w.follower != nil {
			w.follower.Stop()
		}
		w.cancel()
		w.wg.Wait()
		if w.own != nil {
			w.own.Close()
		}
	})
}
