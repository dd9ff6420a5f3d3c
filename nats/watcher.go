package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go-micro.dev/v4/registry"
)

// watchWait bounds how long Watch waits for a connection that nats.go is
// re-establishing, and for NATS to acknowledge the subscription. A cache
// that redials after a loss then gets its stream back, and resyncs, as
// soon as the connection is back, rather than at its next redial.
const watchWait = 5 * time.Second

// pollEvery is how often a Watch that waits looks at the connection
// itself, besides the changes its handlers tell.
const pollEvery = 100 * time.Millisecond

// pendingLimits are the subscription's limits (messages, bytes) on the
// announcements received and not yet read by Next, nats.go's defaults;
// beyond them nats.go drops announcements, and Next fails. Tests lower
// them.
var pendingLimits = [2]int{nats.DefaultSubPendingMsgsLimit, nats.DefaultSubPendingBytesLimit}

// Watch subscribes to the registry's announcements (of the service that
// registry.WatchService names, or of every service) on the plugin's
// connection to NATS, which it makes the plugin make if it has not yet.
// The plugin does not export its connection: the handlers this package
// adds to the plugin's nats.Options tell of it (see link.hook). On a
// plugin that does not keep its options as the version this module was
// written for, Watch fails (errPluginOptions).
//
// It returns once NATS has acknowledged the subscription, so that what is
// announced after it returns is delivered. While nats.go is
// re-establishing a lost connection, it waits for it, up to 5 s and until
// the context of registry.WatchContext is done, and fails if the
// connection is not back by then; it fails at once if the connection is
// closed. A Watch that succeeds proves NATS answers.
//
// Next fails, and keeps failing, as soon as something may have been
// missed: the connection lost, re-established or closed after Watch
// returned, announcements dropped because Next did not keep up (nats.go's
// slow consumer), an announcement that does not decode. The context, when
// given, also ends the watch when it is done.
//
// The caller's DisconnectedErrCB (or the deprecated DisconnectedCB),
// ReconnectedCB, ClosedCB and ConnectedCB of the nats.Options given to the
// plugin are still called, after this package's.
func (r *natsRegistry) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var wo registry.WatchOptions
	for _, o := range opts {
		o(&wo)
	}
	k, err := pluginKeys()
	if err != nil {
		return nil, err
	}
	if r.link.connection() == nil {
		// The plugin connects on its first call: its own Watch, stopped
		// at once, makes the connection without announcing or asking
		// anything, and nats.go then tells the link of it.
		w, err := r.plugin.Watch()
		if err != nil {
			return nil, err
		}
		w.Stop()
	}
	topic := defaultWatchTopic
	if t, ok := r.plugin.Options().Context.Value(k.watchTopic).(string); ok {
		topic = t
	}
	ctx := wo.Context
	if ctx == nil {
		ctx = context.Background()
	}
	return r.link.watch(ctx, topic, wo.Service, watchWait)
}

// watch waits until the connection is known and up, for up to wait, and
// subscribes to topic. The watcher belongs to the epoch read before the
// connection was seen up: a change that the link learns of after that
// ends it.
func (l *link) watch(ctx context.Context, topic, service string, wait time.Duration) (*watcher, error) {
	deadline := time.Now().Add(wait)
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	var tick *time.Ticker
	for {
		epoch, conn := l.current(), l.connection()
		known := l.known
		switch {
		case conn == nil:
		case conn.IsClosed():
			return nil, errClosed
		case conn.IsConnected():
			return l.subscribe(ctx, conn, epoch, topic, service, time.Until(deadline))
		default:
			known = nil // known, and not up
		}
		if tick == nil {
			tick = time.NewTicker(pollEvery)
			defer tick.Stop()
		}
		select {
		case <-known:
		case <-epoch.Done():
		case <-tick.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("nats: the watch's context is done while waiting for the connection to NATS: %w", ctx.Err())
		case <-timeout.C:
			return nil, fmt.Errorf("nats: not connected to NATS: the connection was not re-established within %v", wait)
		}
	}
}

// subscribe subscribes to topic and waits, up to wait, for NATS to
// acknowledge it.
func (l *link) subscribe(ctx context.Context, conn *nats.Conn, epoch context.Context, topic, service string, wait time.Duration) (*watcher, error) {
	sub, err := conn.SubscribeSync(topic)
	if err != nil {
		return nil, fmt.Errorf("nats: subscribe to %q: %w", topic, err)
	}
	if err := sub.SetPendingLimits(pendingLimits[0], pendingLimits[1]); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("nats: subscribe to %q: %w", topic, err)
	}
	if err := conn.FlushTimeout(max(wait, time.Millisecond)); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("nats: NATS did not acknowledge the subscription to %q: %w", topic, err)
	}
	w := &watcher{sub: sub, service: service}
	w.ctx, w.cancel = context.WithCancelCause(epoch)
	w.unhook = context.AfterFunc(ctx, func() {
		w.cancel(fmt.Errorf("nats: the watch's context is done: %w", ctx.Err()))
	})
	return w, nil
}

// watcher is one subscription to the announcements, as a
// registry.Watcher.
type watcher struct {
	sub     *nats.Subscription
	service string // "" for every service
	// ctx is done, with the reason as its cause, when the watch can no
	// longer be trusted or is stopped; cancel ends it.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// unhook stops tying ctx to the Watch's context.
	unhook func() bool

	stopOnce sync.Once
	stopped  atomic.Bool
	// err is the failure that Next keeps returning. Only Next touches it;
	// go-micro's contract is that one goroutine reads a watcher.
	err error
}

var _ registry.Watcher = (*watcher)(nil)

// Next returns the next announcement: create or update (a registration)
// or delete, with the service and the nodes it names. It returns
// registry.ErrWatcherStopped after Stop.
func (w *watcher) Next() (*registry.Result, error) {
	for w.err == nil {
		if n, _ := w.sub.Dropped(); n > 0 {
			w.err = fmt.Errorf("nats: %d announcements dropped: Next did not keep up (slow consumer)", n)
			break
		}
		m, err := w.sub.NextMsgWithContext(w.ctx)
		if err != nil {
			w.err = w.cause(err)
			break
		}
		var res registry.Result
		if err := json.Unmarshal(m.Data, &res); err != nil {
			w.err = fmt.Errorf("nats: an announcement that does not decode: %w", err)
			break
		}
		if res.Service == nil || w.service != "" && res.Service.Name != w.service {
			continue
		}
		return &res, nil
	}
	if w.stopped.Load() {
		return nil, registry.ErrWatcherStopped
	}
	return nil, w.err
}

// cause says why the subscription gave err.
func (w *watcher) cause(err error) error {
	if cause := context.Cause(w.ctx); cause != nil {
		return cause
	}
	if errors.Is(err, nats.ErrConnectionClosed) {
		return errClosed
	}
	return fmt.Errorf("nats: the subscription to the announcements: %w", err)
}

// Stop ends the watch: Next returns registry.ErrWatcherStopped. It is
// idempotent and safe to call while Next waits.
func (w *watcher) Stop() {
	w.stopOnce.Do(func() {
		w.stopped.Store(true)
		w.cancel(registry.ErrWatcherStopped)
		w.unhook()
		// On a closed connection there is nothing left to unsubscribe.
		_ = w.sub.Unsubscribe()
	})
}
