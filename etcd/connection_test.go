package etcd

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
)

// fakeConn is a gRPC connection whose state the test sets. Each
// WaitForStateChange that blocks reports its source state on waits.
type fakeConn struct {
	mu      sync.Mutex
	state   connectivity.State
	changed chan struct{} // closed and replaced at each change
	waits   chan connectivity.State

	// If slow is set, a wait whose context is done closes exiting, then
	// returns only once slow is closed.
	slow, exiting chan struct{}

	// resets has the time of each ResetConnectBackoff.
	resets chan time.Time
}

func (f *fakeConn) ResetConnectBackoff() { f.resets <- time.Now() }

func newFakeConn(s connectivity.State) *fakeConn {
	return &fakeConn{state: s, changed: make(chan struct{}), waits: make(chan connectivity.State, 100), resets: make(chan time.Time, 100)}
}

func (f *fakeConn) GetState() connectivity.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

func (f *fakeConn) WaitForStateChange(ctx context.Context, source connectivity.State) bool {
	f.mu.Lock()
	if f.state != source {
		f.mu.Unlock()
		return true
	}
	ch := f.changed
	f.mu.Unlock()
	f.waits <- source
	select {
	case <-ctx.Done():
		if f.slow != nil {
			close(f.exiting)
			<-f.slow
		}
		return false
	case <-ch:
		return true
	}
}

func (f *fakeConn) set(s connectivity.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = s
	close(f.changed)
	f.changed = make(chan struct{})
}

// waitFor waits until the monitor waits for conn to leave state.
func (f *fakeConn) waitFor(t *testing.T, state connectivity.State) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case s := <-f.waits:
			if s == state {
				return
			}
		case <-timeout:
			t.Fatalf("the monitor does not wait on %v", state)
		}
	}
}

// monitor runs watchConnection on conn with grace g, and returns its
// result and how long after the call it came.
func monitor(ctx context.Context, conn connState, g time.Duration) <-chan monitored {
	ch := make(chan monitored, 1)
	start := time.Now()
	go func() {
		err := watchConnection(ctx, conn, g)
		ch <- monitored{err, time.Since(start)}
	}()
	return ch
}

type monitored struct {
	err     error
	elapsed time.Duration
}

func result5s(t *testing.T, ch <-chan monitored) monitored {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("watchConnection has not returned within 5s")
		return monitored{}
	}
}

// TestWatchConnection: the connection monitor reports a failure at once,
// a connection away from READY after the grace, and nothing for a
// connection that is READY again within it.
func TestWatchConnection(t *testing.T) {
	const g = 200 * time.Millisecond

	for _, failed := range []connectivity.State{connectivity.TransientFailure, connectivity.Shutdown} {
		t.Run(failed.String()+" is reported at once", func(t *testing.T) {
			conn := newFakeConn(connectivity.Ready)
			ch := monitor(context.Background(), conn, time.Hour)
			conn.waitFor(t, connectivity.Ready)
			conn.set(failed)
			m := result5s(t, ch)
			if m.err == nil || !strings.Contains(m.err.Error(), failed.String()) {
				t.Fatalf("error %v; want one naming %v", m.err, failed)
			}
		})
	}

	t.Run("away from READY for the grace is reported then", func(t *testing.T) {
		conn := newFakeConn(connectivity.Ready)
		ch := monitor(context.Background(), conn, g)
		conn.waitFor(t, connectivity.Ready)
		left := time.Now()
		conn.set(connectivity.Idle)
		m := result5s(t, ch)
		if m.err == nil || !strings.Contains(m.err.Error(), "IDLE") {
			t.Fatalf("error %v; want one naming IDLE", m.err)
		}
		if d := time.Since(left); d < g {
			t.Fatalf("reported %v after leaving READY; the grace is %v", d, g)
		}
	})

	t.Run("the grace counts from leaving READY, not from the last change", func(t *testing.T) {
		conn := newFakeConn(connectivity.Ready)
		ch := monitor(context.Background(), conn, g)
		conn.waitFor(t, connectivity.Ready)
		left := time.Now()
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for states := []connectivity.State{connectivity.Connecting, connectivity.Idle}; ; {
				for _, s := range states {
					conn.set(s)
					select {
					case <-stop:
						return
					case <-time.After(g / 4):
					}
				}
			}
		}()
		m := result5s(t, ch)
		if m.err == nil {
			t.Fatal("no error")
		}
		if d := time.Since(left); d > 3*g {
			t.Fatalf("reported %v after leaving READY; the grace is %v", d, g)
		}
	})

	t.Run("READY again within the grace is no error", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		conn := newFakeConn(connectivity.Ready)
		ch := monitor(ctx, conn, time.Hour)
		conn.waitFor(t, connectivity.Ready)
		conn.set(connectivity.Idle)
		conn.waitFor(t, connectivity.Idle)
		conn.set(connectivity.Connecting)
		conn.waitFor(t, connectivity.Connecting)
		conn.set(connectivity.Ready)
		conn.waitFor(t, connectivity.Ready) // watching again
		cancel()
		if m := result5s(t, ch); m.err != nil {
			t.Fatalf("error %v", m.err)
		}
	})

	t.Run("a grace that starts over after READY", func(t *testing.T) {
		conn := newFakeConn(connectivity.Ready)
		ch := monitor(context.Background(), conn, g)
		conn.waitFor(t, connectivity.Ready)
		conn.set(connectivity.Connecting)
		conn.waitFor(t, connectivity.Connecting)
		conn.set(connectivity.Ready)
		conn.waitFor(t, connectivity.Ready)
		// Longer than the grace since the first time it left READY.
		time.Sleep(g)
		left := time.Now()
		conn.set(connectivity.Connecting)
		m := result5s(t, ch)
		if m.err == nil {
			t.Fatal("no error")
		}
		if d := time.Since(left); d < g {
			t.Fatalf("reported %v after leaving READY the second time; the grace is %v", d, g)
		}
	})

	t.Run("a done context ends it without an error", func(t *testing.T) {
		for _, state := range []connectivity.State{connectivity.Ready, connectivity.Connecting} {
			ctx, cancel := context.WithCancel(context.Background())
			conn := newFakeConn(state)
			ch := monitor(ctx, conn, time.Hour)
			conn.waitFor(t, state)
			cancel()
			if m := result5s(t, ch); m.err != nil {
				t.Fatalf("in %v: error %v", state, m.err)
			}
		}
	})
}

// TestWatcherConnectionLost: the monitor's verdict reaches Next, after
// the events already received.
func TestWatcherConnectionLost(t *testing.T) {
	ch := make(chan clientv3.WatchResponse, 1)
	ch <- clientv3.WatchResponse{Events: []*clientv3.Event{putEvent("a", true)}}
	w := fakeWatcher(ch)
	defer w.Stop()
	conn := newFakeConn(connectivity.Ready)
	w.monitorConnection(conn, time.Hour)
	conn.waitFor(t, connectivity.Ready)
	conn.set(connectivity.TransientFailure)
	for _, want := range []string{"a", "TRANSIENT_FAILURE", "TRANSIENT_FAILURE"} {
		res, err := next(t, w, 5*time.Second)
		switch {
		case want == "a":
			if err != nil || res.Service.Nodes[0].Id != "a" {
				t.Fatalf("Next: %v, %v; want a", res, err)
			}
		case err == nil || !strings.Contains(err.Error(), want):
			t.Fatalf("Next: %v, %v; want an error naming %s", res, err, want)
		}
	}
}

// TestStopWaitsForTheMonitor: Stop returns only once the watcher's
// goroutine has ended.
func TestStopWaitsForTheMonitor(t *testing.T) {
	w := fakeWatcher(make(chan clientv3.WatchResponse))
	conn := newFakeConn(connectivity.Ready)
	conn.slow, conn.exiting = make(chan struct{}), make(chan struct{})
	w.monitorConnection(conn, time.Hour)
	conn.waitFor(t, connectivity.Ready)
	stopped := make(chan struct{})
	go func() {
		w.Stop()
		close(stopped)
	}()
	select {
	case <-conn.exiting:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not end the watch's context")
	}
	select {
	case <-stopped:
		t.Fatal("Stop returned while the watcher's goroutine runs")
	case <-time.After(100 * time.Millisecond): // a Stop that does not wait returns at once
	}
	close(conn.slow)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop has not returned after the watcher's goroutine ended")
	}
}

// TestResetBackoffWhileFailing: the connect backoff is reset as soon as
// the connection is in TRANSIENT_FAILURE, then every period while it stays
// there, never while it is in another state, and not after the context is
// done.
func TestResetBackoffWhileFailing(t *testing.T) {
	const every = 100 * time.Millisecond
	reset := func(t *testing.T, conn *fakeConn) time.Time {
		t.Helper()
		select {
		case at := <-conn.resets:
			return at
		case <-time.After(5 * time.Second):
			t.Fatal("no reset within 5s")
			return time.Time{}
		}
	}
	noReset := func(t *testing.T, conn *fakeConn, d time.Duration, why string) {
		t.Helper()
		select {
		case <-conn.resets:
			t.Fatalf("a reset %s", why)
		case <-time.After(d):
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	conn := newFakeConn(connectivity.TransientFailure)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		resetBackoffWhileFailing(ctx, conn, every)
	}()
	if d := reset(t, conn).Sub(start); d > every/2 {
		t.Errorf("first reset %v after the start in TRANSIENT_FAILURE; want at once", d)
	}
	prev := time.Now()
	for i := 0; i < 3; i++ {
		at := reset(t, conn)
		if d := at.Sub(prev); d < every*9/10 || d > 3*every {
			t.Errorf("reset %d came %v after the one before; the period is %v", i+2, d, every)
		}
		prev = at
	}

	conn.set(connectivity.Connecting)
	conn.waitFor(t, connectivity.Connecting)
	for len(conn.resets) > 0 { // one may have come before the change
		<-conn.resets
	}
	noReset(t, conn, 3*every, "while CONNECTING")
	conn.set(connectivity.Ready)
	conn.waitFor(t, connectivity.Ready)
	noReset(t, conn, 2*every, "while READY")

	left := time.Now()
	conn.set(connectivity.TransientFailure)
	if d := reset(t, conn).Sub(left); d > every/2 {
		t.Errorf("reset %v after the connection went TRANSIENT_FAILURE; want at once", d)
	}

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("resetBackoffWhileFailing has not returned within 5s of its context's end")
	}
	for len(conn.resets) > 0 {
		<-conn.resets
	}
	noReset(t, conn, 2*every, "after the context's end")
}
