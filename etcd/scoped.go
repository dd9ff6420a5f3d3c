package etcd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/regcache/cache/watchscope"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
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
	client *clientv3.Client // the watcher's own, closed by Stop; nil in tests that keep theirs
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
// goroutines and etcd client are gone when it returns. It is
// idempotent, and safe with Next.
func (w *scopedWatcher) Stop() {
	w.stopOnce.Do(func() {
		close(w.stopped)
		if w.follower != nil {
			w.follower.Stop()
		}
		w.cancel()
		w.wg.Wait()
		if w.client != nil {
			w.client.Close()
		}
	})
}
