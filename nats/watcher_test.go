package nats

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
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
	r := newTestRegistry(t, s.Addr(), trackedOptions(t, fastReconnect()))
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
	r := newTestRegistry(t, s.Addr(), trackedOptions(t, fastReconnect()))
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
	r := newTestRegistry(t, s.Addr(), trackedOptions(t, fastReconnect()))
	w := watch(t, r)
	s.Stop()
	mustFail(t, w)

	l := watchersLink(t, r)
	if _, err := l.watch(context.Background(), defaultWatchTopic, "", 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not re-established within 100ms") {
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
	r := newTestRegistry(t, s.Addr(), trackedOptions(t, fastReconnect()))
	mustFail(t, func() registry.Watcher { w := watch(t, r); s.Stop(); return w }())

	l := watchersLink(t, r)
	// The watcher of the epoch after the loss, as Watch would have made
	// it had it seen the connection up: nats.go keeps the subscription
	// through the reconnect.
	sub, err := l.conn.SubscribeSync(defaultWatchTopic)
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

// TestCallersHandlersStayThePlugins: the connection handlers of the
// caller's nats.Options are called for the plugin's connection as before,
// the deprecated DisconnectedCB too, and never for the watchers'
// connection, which ends its watches on the same changes.
func TestCallersHandlersStayThePlugins(t *testing.T) {
	s := startNATS(t)
	var (
		mu                                                 sync.Mutex
		seen                                               = map[*nats.Conn]bool{}
		disconnected, oldDisconnected, reconnected, closed atomic.Int32
	)
	saw := func(c *nats.Conn) {
		mu.Lock()
		defer mu.Unlock()
		seen[c] = true
	}
	o := fastReconnect()
	o.DisconnectedErrCB = func(c *nats.Conn, _ error) { saw(c); disconnected.Add(1) }
	o.ReconnectedCB = func(c *nats.Conn) { saw(c); reconnected.Add(1) }
	o.ClosedCB = func(c *nats.Conn) { saw(c); closed.Add(1) }
	r := newTestRegistry(t, s.Addr(), trackedOptions(t, o))
	old := fastReconnect()
	old.DisconnectedCB = func(c *nats.Conn) { saw(c); oldDisconnected.Add(1) }
	r2 := newTestRegistry(t, s.Addr(), trackedOptions(t, old))
	// The plugins connect on their first call.
	for _, reg := range []registry.Registry{r, r2} {
		if _, err := reg.ListServices(); err != nil {
			t.Fatalf("ListServices: %v", err)
		}
	}

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

	watchers := watchersLink(t, r).conn
	watchers.Close()
	mustFail(t, w3) // nats.go tells the loss, then the close
	if _, err := r.Watch(); err != errClosed {
		t.Errorf("Watch on a closed connection: %v; want %v", err, errClosed)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[watchers] || seen[watchersLink(t, r2).conn] {
		t.Errorf("the caller's handlers were called for the watchers' connection")
	}
	if n := closed.Load(); n != 0 {
		t.Errorf("the caller's ClosedCB called %d times; the plugin's connection is open", n)
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
	r := newTestRegistry(t, s.Addr(), trackedOptions(t, quiet))
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
	if err := watchersLink(t, r).conn.Publish(defaultWatchTopic, []byte("{not json")); err != nil {
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
// keeps its nats.Options and subject where Watch finds them; a plugin
// that does not fails every Watch, loudly.
func TestThePluginsOptionKeysAreLearnt(t *testing.T) {
	if _, err := pluginKeys(); err != nil {
		t.Fatalf("the plugin's option keys: %v", err)
	}
	// A registry that reads no option, in the place of the plugin.
	if _, err := learnKeys(func(...registry.Option) registry.Registry { return registry.NewMemoryRegistry() }); err != errPluginOptions {
		t.Errorf("keys of a registry that reads no option: %v; want errPluginOptions", err)
	}
}

// TestTheWatchersConnectionIsConfiguredAsThePlugins: the watchers'
// connection has the nats.Options given to the plugin, through this
// package's Options or the plugin's own, less the caller's handlers of
// the connection's life, and the registry's addresses.
func TestTheWatchersConnectionIsConfiguredAsThePlugins(t *testing.T) {
	s := startNATS(t)
	for _, tc := range []struct {
		name string
		opt  func(nats.Options) registry.Option
	}{
		{"this package's Options", Options},
		{"the plugin's Options", plugin.Options},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := fastReconnect()
			o.Name = "regcache-test"
			o.Servers = []string{"nats://127.0.0.1:1"} // the registry's addresses win
			o.ClosedCB = func(*nats.Conn) {}
			r := newTestRegistry(t, s.Addr(), tc.opt(o))
			watch(t, r)
			got := watchersLink(t, r).conn.Opts
			if got.Name != o.Name || got.ReconnectWait != o.ReconnectWait || got.MaxReconnect != o.MaxReconnect {
				t.Errorf("the watchers' connection: name %q, reconnect every %v up to %d; want %q, %v, %d", got.Name, got.ReconnectWait, got.MaxReconnect, o.Name, o.ReconnectWait, o.MaxReconnect)
			}
			if want := []string{"nats://" + s.Addr()}; !reflect.DeepEqual(got.Servers, want) {
				t.Errorf("servers %q; want %q", got.Servers, want)
			}
		})
	}
}
