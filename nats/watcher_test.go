package nats

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	plugin "github.com/go-micro/plugins/v4/registry/nats"
	"github.com/nats-io/nats.go"
	"go-micro.dev/v4/registry"
)

// TestAnnouncementsReachNext: what another process registers and
// deregisters comes to Next as the plugin announces it; a watch of one
// service skips the others'.
func TestAnnouncementsReachNext(t *testing.T) {
	s := startNATS(t)
	r := newTestRegistry(t, s.Addr())
	other := newWriter(t, s.Addr())

	all := watch(t, r)
	one := watch(t, r, registry.WatchService("b"))
	if err := other.Register(service("a", "1", "a1")); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := other.Register(service("b", "1", "b1")); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := other.Deregister(service("a", "1", "a1")); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	mustNext(t, all, "create", "a", "a1")
	mustNext(t, all, "create", "b", "b1")
	mustNext(t, all, "delete", "a", "a1")
	res := mustNext(t, one, "create", "b", "b1")
	// Each announcement is decoded on its own: nothing of a skipped one
	// is left in the next (the plugin's watcher decodes every one into
	// the same Result).
	if got := res.Service.Nodes[0].Metadata; len(got) != 1 || got["node"] != "b1" {
		t.Errorf("metadata %v; want node=b1 alone", got)
	}
}

// TestNextFailsWhenTheConnectionIsLost: a NATS outage ends the watch at
// once, and Next keeps failing; the plugin's watcher, on the same
// connection, goes on waiting.
func TestNextFailsWhenTheConnectionIsLost(t *testing.T) {
	s := startNATS(t)
	r := newTestRegistry(t, s.Addr(), Options(fastReconnect()))
	w := watch(t, r)
	pw, err := r.plugin.Watch()
	if err != nil {
		t.Fatalf("the plugin's Watch: %v", err)
	}
	plugin := next(pw)
	t.Cleanup(pw.Stop)

	s.Stop()
	err = mustFail(t, w)
	if !strings.Contains(err.Error(), "connection to NATS was lost") {
		t.Errorf("Next: %v; want the connection lost", err)
	}
	if again := mustFail(t, w); again != err {
		t.Errorf("Next again: %v; want %v", again, err)
	}
	select {
	case o := <-plugin:
		t.Fatalf("the plugin's Next returned (%v, %v) through the outage", o.res, o.err)
	default:
		t.Logf("the plugin's watcher said nothing of the outage")
	}
}

// TestWatchWaitsForTheConnection: a Watch called while nats.go is
// re-establishing the connection returns once it is back, and what is
// announced after it returns reaches Next.
func TestWatchWaitsForTheConnection(t *testing.T) {
	s := startNATS(t)
	r := newTestRegistry(t, s.Addr(), Options(fastReconnect()))
	w := watch(t, r)
	s.Stop()
	mustFail(t, w)

	type dialed struct {
		w   registry.Watcher
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		w, err := r.Watch()
		ch <- dialed{w, err}
	}()
	select {
	case d := <-ch:
		t.Fatalf("Watch returned (%v, %v) while NATS was down", d.w, d.err)
	case <-time.After(200 * time.Millisecond):
	}
	back := time.Now()
	s.Start()
	var d dialed
	select {
	case d = <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("Watch: still waiting 5 s after NATS is back")
	}
	if d.err != nil {
		t.Fatalf("Watch: %v", d.err)
	}
	t.Cleanup(d.w.Stop)
	t.Logf("Watch returned %v after NATS was back", time.Since(back).Round(time.Millisecond))

	other := newWriter(t, s.Addr())
	if err := other.Register(service("a", "1", "a1")); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, d.w, "create", "a", "a1")
}

// TestWatchFailsWhenTheConnectionStaysDown: a Watch gives up once its
// wait is over, and at once when its context is done.
func TestWatchFailsWhenTheConnectionStaysDown(t *testing.T) {
	s := startNATS(t)
	r := newTestRegistry(t, s.Addr(), Options(fastReconnect()))
	w := watch(t, r)
	s.Stop()
	mustFail(t, w)

	if _, err := r.link.watch(context.Background(), defaultWatchTopic, "", 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not re-established within 100ms") {
		t.Errorf("watch with a wait of 100 ms: %v; want it not re-established", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := r.Watch(registry.WatchContext(ctx))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Watch with a context cancelled after 50 ms: %v; want context.Canceled", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Watch took %v to see its context done", took)
	}
}

// TestNextFailsWhenTheConnectionIsBack: a watch made before the loss was
// told, as one can be in the moment between the two, ends when the
// connection is re-established: what was announced in between is lost.
func TestNextFailsWhenTheConnectionIsBack(t *testing.T) {
	s := startNATS(t)
	r := newTestRegistry(t, s.Addr(), Options(fastReconnect()))
	mustFail(t, func() registry.Watcher { w := watch(t, r); s.Stop(); return w }())

	l := r.link
	// The watcher of the epoch after the loss, as Watch would have made
	// it had it seen the connection up: nats.go keeps the subscription
	// through the reconnect.
	sub, err := l.connection().SubscribeSync(defaultWatchTopic)
	if err != nil {
		t.Fatalf("subscribe while reconnecting: %v", err)
	}
	w := &watcher{sub: sub}
	w.ctx, w.cancel = context.WithCancelCause(l.current())
	w.unhook = func() bool { return true }
	t.Cleanup(w.Stop)

	s.Start()
	if err := mustFail(t, w); err != errReconnected {
		t.Errorf("Next: %v; want %v", err, errReconnected)
	}
}

// TestStopEndsNext: Stop ends a Next that waits, and every Next after it,
// with registry.ErrWatcherStopped; it is idempotent.
func TestStopEndsNext(t *testing.T) {
	s := startNATS(t)
	r := newTestRegistry(t, s.Addr())
	w := watch(t, r)
	waiting := next(w)
	w.Stop()
	w.Stop()
	select {
	case o := <-waiting:
		if o.err != registry.ErrWatcherStopped {
			t.Errorf("Next: (%v, %v); want registry.ErrWatcherStopped", o.res, o.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Next still waits 5 s after Stop")
	}
	if _, err := w.Next(); err != registry.ErrWatcherStopped {
		t.Errorf("Next after Stop: %v; want registry.ErrWatcherStopped", err)
	}

	// A watch whose context is done ends too.
	ctx, cancel := context.WithCancel(context.Background())
	w2 := watch(t, r, registry.WatchContext(ctx))
	cancel()
	if err := mustFail(t, w2); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after the context is done: %v; want context.Canceled", err)
	}
}

// TestCallersHandlersStillRun: the connection handlers of the caller's
// nats.Options run as before, after this package's; the deprecated
// DisconnectedCB too, which nats.go calls only when no DisconnectedErrCB
// is set.
func TestCallersHandlersStillRun(t *testing.T) {
	s := startNATS(t)
	var disconnected, oldDisconnected, reconnected, closed atomic.Int32
	o := fastReconnect()
	o.DisconnectedErrCB = func(*nats.Conn, error) { disconnected.Add(1) }
	o.ReconnectedCB = func(*nats.Conn) { reconnected.Add(1) }
	o.ClosedCB = func(*nats.Conn) { closed.Add(1) }
	r := newTestRegistry(t, s.Addr(), Options(o))
	old := fastReconnect()
	old.DisconnectedCB = func(*nats.Conn) { oldDisconnected.Add(1) }
	r2 := newTestRegistry(t, s.Addr(), Options(old))

	w, w2 := watch(t, r), watch(t, r2)
	s.Stop()
	mustFail(t, w)
	mustFail(t, w2)
	eventually(t, "the caller's DisconnectedErrCB and DisconnectedCB called", func() bool {
		return disconnected.Load() >= 1 && oldDisconnected.Load() >= 1
	})
	s.Start()
	eventually(t, "the caller's ReconnectedCB called", func() bool { return reconnected.Load() >= 1 })
	w3 := watch(t, r)

	r.link.connection().Close()
	eventually(t, "the caller's ClosedCB called", func() bool { return closed.Load() >= 1 })
	mustFail(t, w3) // nats.go tells the loss, then the close

	if _, err := r.Watch(); err != errClosed {
		t.Errorf("Watch on a closed connection: %v; want %v", err, errClosed)
	}
}

// TestDroppedAnnouncementsEndTheWatch: announcements that nats.go drops
// because Next did not read them in time (a slow consumer) end the watch.
func TestDroppedAnnouncementsEndTheWatch(t *testing.T) {
	saved := pendingLimits
	pendingLimits = [2]int{4, -1}
	t.Cleanup(func() { pendingLimits = saved })
	s := startNATS(t)
	quiet := nats.GetDefaultOptions()
	quiet.AsyncErrorCB = func(*nats.Conn, *nats.Subscription, error) {} // not nats.go's print of the slow consumer
	r := newTestRegistry(t, s.Addr(), Options(quiet))
	w := watch(t, r).(*watcher)
	other := newWriter(t, s.Addr())
	for i := 0; i < 10; i++ {
		if err := other.Register(service("a", "1", nodeName(i))); err != nil {
			t.Fatalf("Register: %v", err)
		}
	}
	eventually(t, "announcements dropped", func() bool { n, _ := w.sub.Dropped(); return n > 0 })
	if err := mustFail(t, w); !strings.Contains(err.Error(), "slow consumer") {
		t.Errorf("Next: %v; want announcements dropped", err)
	}
}

// TestAnAnnouncementThatDoesNotDecode ends the watch: it may have been
// one of the registry's.
func TestAnAnnouncementThatDoesNotDecode(t *testing.T) {
	s := startNATS(t)
	r := newTestRegistry(t, s.Addr())
	w := watch(t, r)
	if err := r.link.connection().Publish(defaultWatchTopic, []byte("{not json")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := mustFail(t, w); !strings.Contains(err.Error(), "does not decode") {
		t.Errorf("Next: %v; want an announcement that does not decode", err)
	}
}

// TestAnotherWatchTopic: WatchTopic reaches the plugin, whose subject
// Watch reads.
func TestAnotherWatchTopic(t *testing.T) {
	s := startNATS(t)
	r := newTestRegistry(t, s.Addr(), WatchTopic("regcache.test.watch"))
	w := watch(t, r)
	defaults := newWriter(t, s.Addr())
	custom := newWriter(t, s.Addr(), WatchTopic("regcache.test.watch"))
	if err := defaults.Register(service("default", "1", "d1")); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := custom.Register(service("custom", "1", "c1")); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, w, "create", "custom", "c1")
}

// TestThePluginsOptionKeysAreLearnt: the plugin this module requires
// keeps its nats.Options and subject where this package finds them; a
// plugin that does not fails every Watch, loudly.
func TestThePluginsOptionKeysAreLearnt(t *testing.T) {
	if _, err := pluginKeys(); err != nil {
		t.Fatalf("the plugin's option keys: %v", err)
	}
	// A registry that reads no option, in the place of the plugin.
	if _, err := learnKeys(func(...registry.Option) registry.Registry { return registry.NewMemoryRegistry() }); err != errPluginOptions {
		t.Errorf("keys of a registry that reads no option: %v; want errPluginOptions", err)
	}
}

// TestTheConnectionIsFollowedWhateverGivesTheOptions: the link's handlers
// reach the plugin's connection whether the nats.Options come through this
// package's Options, the plugin's own, Init, or none; the caller's
// handlers run, those given last.
func TestTheConnectionIsFollowedWhateverGivesTheOptions(t *testing.T) {
	s := startNATS(t)
	var first, last atomic.Int32
	o1, o2 := fastReconnect(), fastReconnect()
	o1.DisconnectedErrCB = func(*nats.Conn, error) { first.Add(1) }
	o2.DisconnectedErrCB = func(*nats.Conn, error) { last.Add(1) }
	viaInit := newTestRegistry(t, s.Addr(), Options(o1))
	if err := viaInit.Init(registry.Addrs(s.Addr()), plugin.Options(o2)); err != nil {
		t.Fatalf("Init: %v", err)
	}
	var ws []registry.Watcher
	for _, r := range []*natsRegistry{
		newTestRegistry(t, s.Addr(), Options(fastReconnect())),
		newTestRegistry(t, s.Addr(), plugin.Options(fastReconnect())),
		newTestRegistry(t, s.Addr()),
		viaInit,
	} {
		ws = append(ws, watch(t, r))
	}
	s.Stop()
	for _, w := range ws {
		mustFail(t, w)
	}
	eventually(t, "the handler given last called", func() bool { return last.Load() >= 1 })
	if n := first.Load(); n != 0 {
		t.Errorf("the handler replaced by Init called %d times", n)
	}
}
