package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/regcache/cache/watchscope"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watch watches the registry, or the service that registry.WatchService
// names, through an etcd client of the watcher's own, made from the
// registry's options as the plugin makes its client (clientConfig), and
// closed by Stop. The plugin does not export its client; a client per
// watcher also leaves nothing open once the watcher stops, and takes the
// options of the plugin's latest Init.
//
// It returns once etcd has acknowledged the watch, within the registry's
// Timeout (5 s by default) and before the context of registry.WatchContext
// is done, and fails otherwise: a Watch that succeeds proves etcd
// answers, so a cache that redials after an error learns from it when etcd
// is back. While it waits, a connection in TRANSIENT_FAILURE has gRPC's
// connect backoff reset, at once and then every 250 ms, so that a Watch
// that waits through etcd's return succeeds within about 250 ms of it. The
// context, when given, also ends the watch when it is done; and when it
// carries a watch filter (watchscope.Filter), as a regcache cache's does,
// the events of the services the filter does not keep are skipped before
// their values are decoded.
//
// When the context carries a scope (watchscope.Scope), the watch is of the
// services the cache holds (scopedWatcher), where etcd numbers watches as
// its client asks; where it does not (etcd's gRPC proxy, a server older
// than 3.4), it is the watch of the whole registry, which the registry's
// logger is told of once.
func (r *etcdRegistry) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var wo registry.WatchOptions
	for _, o := range opts {
		o(&wo)
	}
	ro := r.plugin.Options()
	timeout := ro.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	client, err := clientv3.New(clientConfig(ro))
	if err != nil {
		return nil, fmt.Errorf("etcd: a client for the watch: %w", err)
	}
	log := ro.Logger
	if log == nil {
		log = logger.DefaultLogger
	}
	if scope := watchscope.FromContext(wo.Context); scope != nil && wo.Service == "" {
		w, err := newScopedWatcher(client, scope, wo.Context, timeout, log)
		switch {
		case err == nil:
			w.client = client
			w.keep = watchscope.Filter(wo.Context)
			return w, nil
		case !errors.Is(err, errNoClientIDs):
			client.Close()
			return nil, err
		}
		if r.toldFallback.CompareAndSwap(false, true) {
			log.Logf(logger.WarnLevel, "etcd: %v (a gRPC proxy, or etcd older than 3.4): the cache's watch is of the whole registry, and each client receives every change of every service", err)
		}
	}
	w, err := newWatcher(client, watchPrefix(wo.Service), wo.Context, timeout)
	if err != nil {
		client.Close()
		return nil, err
	}
	w.client = client
	w.keep = watchscope.Filter(wo.Context)
	return w, nil
}

// errAckTimeout ends a Watch that etcd did not acknowledge in time.
var errAckTimeout = errors.New("no answer from etcd")

// watcher is one etcd watch, as a registry.Watcher.
type watcher struct {
	ctx    context.Context // the etcd watch's
	events clientv3.WatchChan

	// pending and err are Next's, which only one goroutine calls at a
	// time: the rest of the response being delivered, and the error that
	// ended the stream, returned from then on.
	pending []*clientv3.Event
	err     error

	// keep is the watch filter of Watch's context, or nil: asked about
	// each event as Next comes to it, for its answer holds for the moment
	// it is given.
	keep func(service string) bool

	// lost has the connection monitor's verdict, sent once.
	lost chan error

	cancel   context.CancelFunc // ends the etcd watch and the monitor
	monitor  sync.WaitGroup
	client   *clientv3.Client // the watcher's own, closed by Stop; nil in tests that keep theirs
	stopped  chan struct{}
	stopOnce sync.Once
}

var _ registry.Watcher = (*watcher)(nil)

// newWatcher opens a watch of the keys under prefix and waits for etcd's
// acknowledgement, for at most timeout and while parent (if not nil) is
// not done.
func newWatcher(client *clientv3.Client, prefix string, parent context.Context, timeout time.Duration) (*watcher, error) {
	if parent == nil {
		parent = context.Background()
	}
	conn := client.ActiveConnection()

	var events clientv3.WatchChan
	var first clientv3.WatchResponse
	ctx, end, err := awaitAck(parent, conn, prefix, timeout, func(ctx context.Context) error {
		// WithRequireLeader: a member that loses its leader cancels the
		// watch rather than keeping it open, silent, on a member that can
		// no longer tell what changes.
		events = client.Watch(clientv3.WithRequireLeader(ctx), prefix,
			clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
		// clientv3's Watch returns once etcd has created the watch or ctx
		// is done; the acknowledgement is the first response.
		var ok bool
		first, ok = <-events
		if !ok {
			return errors.New("the watch channel closed before etcd acknowledged the watch")
		}
		return first.Err()
	})
	if err != nil {
		return nil, err
	}

	w := &watcher{
		ctx:     ctx,
		events:  events,
		lost:    make(chan error, 1),
		cancel:  end,
		stopped: make(chan struct{}),
	}
	if !first.Created {
		w.pending = first.Events
	}
	w.monitorConnection(conn, grace)
	return w, nil
}

// awaitAck calls wait, which opens a watch of the keys under p on the
// context it is given and waits for etcd's acknowledgement, and gives it
// at most timeout, while parent is not done. While it waits, conn, when
// not nil, has its connect backoff reset whenever it cannot connect, so
// that the client dials again soon (a first Watch; a resumption leaves
// the connection to its monitor). On success it returns wait's context,
// which lasts until end is called or parent is done; on a timeout, parent
// done or wait's error, the context is ended and the error says which.
func awaitAck(parent context.Context, conn backoffConn, p string, timeout time.Duration,
	wait func(ctx context.Context) error) (ctx context.Context, end context.CancelFunc, err error) {
	ctx, cancel := context.WithCancelCause(parent)
	timer := time.AfterFunc(timeout, func() { cancel(errAckTimeout) })
	endResets := func() {}
	if conn != nil {
		resetting, stop := context.WithCancel(ctx)
		var resets sync.WaitGroup
		resets.Add(1)
		go func() {
			defer resets.Done()
			resetBackoffWhileFailing(resetting, conn, resetEvery)
		}()
		endResets = func() { stop(); resets.Wait() }
	}
	err = wait(ctx)
	endResets()
	if !timer.Stop() {
		// The timer has fired, and its cancel may not have run yet.
		cancel(errAckTimeout)
	}
	if ctx.Err() != nil {
		cancel(nil)
		if cause := context.Cause(ctx); cause != errAckTimeout {
			return nil, nil, fmt.Errorf("etcd: watch of %s not acknowledged: %w", p, cause)
		}
		return nil, nil, fmt.Errorf("etcd: watch of %s not acknowledged within %v: %w", p, timeout, errAckTimeout)
	}
	if err != nil {
		cancel(nil)
		return nil, nil, fmt.Errorf("etcd: watch of %s: %w", p, err)
	}
	return ctx, func() { cancel(nil) }, nil
}

// monitorConnection starts the goroutine that tells Next when the
// connection to etcd is lost. It ends with the watch, and Stop waits for
// it.
func (w *watcher) monitorConnection(conn connState, grace time.Duration) {
	w.monitor.Add(1)
	go func() {
		defer w.monitor.Done()
		if err := watchConnection(w.ctx, conn, grace); err != nil {
			w.lost <- err
		}
	}()
}

// Next returns the next event of the watch. It delivers every event of
// every etcd response, in order, skipping only values that are not
// services and the services that the watch filter does not keep. It fails, and keeps failing, when the stream may have missed
// something: a compaction, a watch etcd cancelled, an error from etcd, the
// channel closing, a delete without its previous value, or the connection
// to etcd lost. After Stop it returns registry.ErrWatcherStopped. It is for
// one goroutine at a time, and safe with Stop.
func (w *watcher) Next() (*registry.Result, error) {
	for {
		select {
		case <-w.stopped:
			return nil, registry.ErrWatcherStopped
		default:
		}
		if w.err != nil {
			return nil, w.err
		}
		if len(w.pending) > 0 {
			ev := w.pending[0]
			w.pending[0] = nil
			w.pending = w.pending[1:]
			res, err := result(ev, w.keep)
			if err != nil {
				w.err = err
				continue
			}
			if res != nil {
				return res, nil
			}
			continue
		}
		select {
		case <-w.stopped:
			return nil, registry.ErrWatcherStopped
		case err := <-w.lost:
			// The events etcd sent before the connection was lost
			// come first: the cache applies them, then resyncs.
			select {
			case resp, ok := <-w.events:
				w.lost <- err // (a buffer of one, emptied just now)
				if ok && resp.Err() == nil {
					w.pending = resp.Events
					continue
				}
			default:
			}
			w.err = err
		case resp, ok := <-w.events:
			switch {
			case !ok:
				// Stop closes the channel too, but returns first; the
				// context of registry.WatchContext closes it with its
				// cause.
				w.err = errors.New("etcd: the watch channel closed")
				if cause := context.Cause(w.ctx); cause != nil {
					w.err = fmt.Errorf("%w: %w", w.err, cause)
				}
			case resp.Err() != nil:
				w.err = fmt.Errorf("etcd: watch: %w", resp.Err())
			default:
				// Progress notifications and the like have no events.
				w.pending = resp.Events
			}
		}
	}
}

// Stop ends the watch: Next returns registry.ErrWatcherStopped, the etcd
// watch is cancelled, and the watcher's goroutine and etcd client are
// gone when it returns. It is idempotent, and safe with Next.
func (w *watcher) Stop() {
	w.stopOnce.Do(func() {
		close(w.stopped)
		w.cancel()
		w.monitor.Wait()
		if w.client != nil {
			w.client.Close()
		}
	})
}
