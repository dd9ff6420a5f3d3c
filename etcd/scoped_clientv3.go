package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/watchscope"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// scopeEnv, set to "clientv3", makes Watch build the scoped stream out of
// etcd's client (clientScoped) rather than drive the gRPC protocol
// itself: the candidate measured against scopedWatcher for decision 31 of
// docs/decisions.md, and nothing else.
const scopeEnv = "REGCACHE_ETCD_SCOPE"

func clientScopeChosen() bool { return os.Getenv(scopeEnv) == "clientv3" }

// clientScoped is the scoped stream over etcd's client: one
// clientv3.Watcher, a watch of each prefix held (WithRev, WithCreatedNotify,
// WithRequireLeader, WithPrevKV), multiplexed by the client on one gRPC
// stream, and a goroutine per watch that passes its responses on. The
// client resumes the watches on a new stream itself, numbers them as etcd
// does, and tells a refusal with the watch's own channel.
type clientScoped struct {
	scope    watchscope.Scope
	follower watchscope.Follower
	keep     func(service string) bool
	log      logger.Logger
	watcher  clientv3.Watcher
	conn     connState

	ctx    context.Context // carries WithRequireLeader; ends the watcher
	cancel context.CancelFunc
	own    *clientv3.Client

	items chan scopedItem

	// Next's own.
	pending []*mvccpb.Event
	err     error

	mu       sync.Mutex
	byPrefix map[string]*clientWatch
	refused  map[string]*refusedWatch
	lastRev  int64
	marks    []revMark
	heard    time.Time
	asked    time.Time

	wg       sync.WaitGroup
	stopped  chan struct{}
	stopOnce sync.Once
}

// clientWatch is one watch of the keys under prefix, for names.
type clientWatch struct {
	prefix     string
	names      map[string]struct{}
	cancel     context.CancelFunc
	revalidate bool
	refusal    *refusedWatch
	created    bool // forward's
}

func newClientScoped(client *clientv3.Client, scope watchscope.Scope, parent context.Context, timeout time.Duration, log logger.Logger) (*clientScoped, error) {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(parent))
	conn := client.ActiveConnection()
	w := &clientScoped{
		scope:    scope,
		log:      log,
		watcher:  clientv3.NewWatcher(client),
		conn:     conn,
		ctx:      ctx,
		cancel:   cancel,
		items:    make(chan scopedItem, 16),
		byPrefix: make(map[string]*clientWatch),
		refused:  make(map[string]*refusedWatch),
		stopped:  make(chan struct{}),
	}
	var sentinel clientv3.WatchChan
	var rev int64
	_, _, err := awaitAck(ctx, conn, prefix, timeout, func(actx context.Context) error {
		// The sentinel lives as long as the watcher, not as the wait.
		sentinel = w.watcher.Watch(ctx, prefix, clientv3.WithCreatedNotify(), clientv3.WithProgressNotify())
		select {
		case first, ok := <-sentinel:
			if !ok {
				return errors.New("the watch channel closed before etcd acknowledged the watch")
			}
			if err := first.Err(); err != nil {
				return err
			}
			rev = first.Header.Revision
			return nil
		case <-actx.Done():
			return actx.Err()
		}
	})
	if err != nil {
		cancel()
		w.watcher.Close()
		return nil, err
	}
	w.noteRevisionLocked(rev)
	names, seq, follower := scope.Follow()
	w.follower = follower
	w.marks = []revMark{{seq, w.lastRev}}
	var opens []openAt
	for _, name := range names {
		opens = w.holdLocked(opens, name, w.lastRev)
	}
	w.heard = time.Now()
	w.wg.Add(4)
	go w.readSentinel(sentinel)
	go w.followScope()
	go w.monitor()
	go w.watchdog()
	w.start(opens)
	return w, nil
}

// holdLocked adds to opens the watch of a service now held, unless one
// of its keys is open or refused.
func (w *clientScoped) holdLocked(opens []openAt, name string, rev int64) []openAt {
	if !watchable(name) {
		return opens
	}
	p := watchPrefix(name)
	if cw := w.byPrefix[p]; cw != nil {
		cw.names[name] = struct{}{}
		return opens
	}
	if r := w.refused[p]; r != nil {
		r.names[name] = struct{}{}
		return opens
	}
	cw := &clientWatch{prefix: p, names: map[string]struct{}{name: {}}}
	w.byPrefix[p] = cw
	return append(opens, openAt{cw, rev + 1})
}

// openAt is a watch to ask etcd's client for, from start.
type openAt struct {
	cw    *clientWatch
	start int64
}

// start asks etcd's client for the watches, outside the lock.
func (w *clientScoped) start(opens []openAt) {
	for _, o := range opens {
		cw, start := o.cw, o.start
		wctx, cancel := context.WithCancel(w.ctx)
		w.mu.Lock()
		if w.byPrefix[cw.prefix] != cw {
			w.mu.Unlock()
			cancel()
			continue
		}
		cw.cancel = cancel
		w.mu.Unlock()
		ch := w.watcher.Watch(wctx, cw.prefix, clientv3.WithPrefix(), clientv3.WithRev(start),
			clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
		w.wg.Add(1)
		go w.forward(wctx, cw, ch)
	}
}

// forward passes the responses of cw's watch on until it ends.
func (w *clientScoped) forward(wctx context.Context, cw *clientWatch, ch clientv3.WatchChan) {
	defer w.wg.Done()
	for resp := range ch {
		if wctx.Err() != nil {
			continue // cancelled: drain
		}
		w.mu.Lock()
		w.noteRevisionLocked(resp.Header.Revision)
		w.mu.Unlock()
		switch {
		case resp.CompactRevision != 0:
			w.mu.Lock()
			var opens []openAt
			if w.byPrefix[cw.prefix] == cw {
				nw := &clientWatch{prefix: cw.prefix, names: cw.names, revalidate: true}
				w.byPrefix[cw.prefix] = nw
				opens = append(opens, openAt{nw, resp.CompactRevision})
			}
			w.mu.Unlock()
			cw.cancel()
			w.start(opens)
			return
		case resp.Canceled:
			reason := resp.Err()
			w.mu.Lock()
			open := w.byPrefix[cw.prefix] == cw
			var names []string
			// Before its creation: etcd refused it.
			if open && !cw.created {
				names = w.refuseLocked(cw, fmt.Sprint(reason))
				open = false
			}
			w.mu.Unlock()
			for _, name := range names {
				w.scope.Revalidate(name)
			}
			if open {
				w.deliver(scopedItem{err: fmt.Errorf("etcd: watch of %s cancelled: %v", cw.prefix, reason)})
			}
			return
		case resp.Created:
			cw.created = true
			w.mu.Lock()
			var names []string
			if cw.refusal != nil {
				w.log.Logf(logger.InfoLevel, "etcd: the watch of %s is accepted after %d refusals: its events are delivered again", cw.prefix, cw.refusal.failures)
				cw.refusal = nil
			}
			if cw.revalidate {
				cw.revalidate = false
				for name := range cw.names {
					names = append(names, name)
				}
			}
			w.mu.Unlock()
			for _, name := range names {
				w.scope.Revalidate(name)
			}
		case len(resp.Events) > 0:
			if !w.deliver(scopedItem{events: toPB(resp.Events)}) {
				return
			}
		}
	}
	if wctx.Err() == nil && w.ctx.Err() == nil {
		w.deliver(scopedItem{err: fmt.Errorf("etcd: the watch of %s closed", cw.prefix)})
	}
}

func toPB(evs []*clientv3.Event) []*mvccpb.Event {
	out := make([]*mvccpb.Event, len(evs))
	for i, ev := range evs {
		out[i] = (*mvccpb.Event)(ev)
	}
	return out
}

// refuseLocked is scopedWatcher.refuseLocked for a client watch.
func (w *clientScoped) refuseLocked(cw *clientWatch, reason string) (revalidate []string) {
	delete(w.byPrefix, cw.prefix)
	r := cw.refusal
	if r == nil {
		r = &refusedWatch{prefix: cw.prefix}
	}
	r.names = cw.names
	r.failures++
	if r.failures == 1 || r.reason != reason {
		w.log.Logf(logger.ErrorLevel, "etcd: the watch of %s (%s) was refused: %s; its changes reach the cache at its refreshes, and the watch is asked for again on a backoff",
			cw.prefix, strings.Join(sortedNames(r.names), ", "), reason)
	}
	r.reason = reason
	r.retry = time.Now().Add(policy.Backoff(r.failures, rand.Float64()))
	w.refused[cw.prefix] = r
	for name := range r.names {
		revalidate = append(revalidate, name)
	}
	return revalidate
}

// readSentinel notes the revisions of the sentinel's progress, and ends
// the stream when it ends.
func (w *clientScoped) readSentinel(ch clientv3.WatchChan) {
	defer w.wg.Done()
	for resp := range ch {
		if err := resp.Err(); err != nil {
			w.deliver(scopedItem{err: fmt.Errorf("etcd: watch of %s: %w", prefix, err)})
			return
		}
		w.mu.Lock()
		w.noteRevisionLocked(resp.Header.Revision)
		w.mu.Unlock()
	}
	if w.ctx.Err() == nil {
		w.deliver(scopedItem{err: errors.New("etcd: the watch channel closed")})
	}
}

// followScope opens and cancels watches as the services held change.
func (w *clientScoped) followScope() {
	defer w.wg.Done()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.follower.Changed():
		}
		var opens []openAt
		var cancels []context.CancelFunc
		w.mu.Lock()
		for _, ch := range w.follower.Changes() {
			p := watchPrefix(ch.Service)
			if ch.Held {
				opens = w.holdLocked(opens, ch.Service, w.revBeforeLocked(ch.Seq))
				continue
			}
			if r := w.refused[p]; r != nil {
				delete(r.names, ch.Service)
				if len(r.names) == 0 {
					delete(w.refused, p)
				}
				continue
			}
			if cw := w.byPrefix[p]; cw != nil {
				delete(cw.names, ch.Service)
				if len(cw.names) == 0 {
					delete(w.byPrefix, p)
					if cw.cancel != nil {
						cancels = append(cancels, cw.cancel)
					}
				}
			}
		}
		w.mu.Unlock()
		for _, c := range cancels {
			c()
		}
		w.start(opens)
	}
}

// watchdog asks etcd for its revision while the stream is quiet, and asks
// again for the refused watches once due.
func (w *clientScoped) watchdog() {
	defer w.wg.Done()
	t := time.NewTimer(quietAfter)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var opens []openAt
		next := now.Add(quietAfter)
		w.mu.Lock()
		for p, r := range w.refused {
			if now.Before(r.retry) {
				if r.retry.Before(next) {
					next = r.retry
				}
				continue
			}
			delete(w.refused, p)
			cw := &clientWatch{prefix: p, names: r.names, revalidate: true, refusal: r}
			w.byPrefix[p] = cw
			opens = append(opens, openAt{cw, w.lastRev + 1})
		}
		ask := !now.Before(w.heard.Add(quietAfter)) && !now.Before(w.asked.Add(quietAfter))
		if ask {
			w.asked = now
		}
		w.mu.Unlock()
		if ask {
			w.watcher.RequestProgress(w.ctx)
		}
		w.start(opens)
		t.Reset(time.Until(next))
	}
}

// monitor tells Next when the connection to etcd is lost.
func (w *clientScoped) monitor() {
	defer w.wg.Done()
	if err := watchConnection(w.ctx, w.conn, grace); err != nil {
		w.deliver(scopedItem{err: err})
	}
}

// noteRevisionLocked and revBeforeLocked are scopedWatcher's.
func (w *clientScoped) noteRevisionLocked(rev int64) {
	w.heard = time.Now()
	if rev <= w.lastRev {
		return
	}
	w.lastRev = rev
	seq := w.scope.Seq()
	if n := len(w.marks); n > 0 && w.marks[n-1].seq == seq {
		w.marks[n-1].rev = rev
	} else {
		w.marks = append(w.marks, revMark{seq, rev})
	}
}

func (w *clientScoped) revBeforeLocked(seq uint64) int64 {
	i := len(w.marks) - 1
	for i > 0 && w.marks[i].seq >= seq {
		i--
	}
	if i > 0 {
		w.marks = append(w.marks[:0], w.marks[i:]...)
	}
	return w.marks[0].rev
}

func (w *clientScoped) deliver(it scopedItem) bool {
	select {
	case w.items <- it:
		return true
	case <-w.ctx.Done():
		return false
	}
}

var _ registry.Watcher = (*clientScoped)(nil)

// Next is scopedWatcher's Next.
func (w *clientScoped) Next() (*registry.Result, error) {
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
		select {
		case <-w.stopped:
			return nil, registry.ErrWatcherStopped
		case it := <-w.items:
			if it.err != nil {
				w.err = it.err
				continue
			}
			w.pending = it.events
		}
	}
}

// Stop ends the watches and waits for the goroutines.
func (w *clientScoped) Stop() {
	w.stopOnce.Do(func() {
		close(w.stopped)
		if w.follower != nil {
			w.follower.Stop()
		}
		w.cancel()
		w.watcher.Close()
		w.wg.Wait()
		if w.own != nil {
			w.own.Close()
		}
	})
}
