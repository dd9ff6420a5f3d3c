package storm

import (
	"errors"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
)

func svc(name, id string) *registry.Service {
	return &registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{{Id: id, Address: "127.0.0.1:1"}}}
}

// next returns the stream's next event, failing the test if it does not
// come: Next must not block while an event is queued.
func next(t *testing.T, w registry.Watcher) (*registry.Result, error) {
	t.Helper()
	type res struct {
		r   *registry.Result
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := w.Next()
		ch <- res{r, err}
	}()
	select {
	case x := <-ch:
		return x.r, x.err
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return")
		return nil, nil
	}
}

// Each stream gets every change, in the order it was made, in a copy of
// its own, and only the service it asked for.
func TestMemoryStreamsInOrder(t *testing.T) {
	m := NewMemory()
	conn, _ := m.Client()
	all, err := conn.Watch()
	if err != nil {
		t.Fatal(err)
	}
	one, err := conn.Watch(registry.WatchService("b"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ { // a busy watcher loses nothing
		must(t, m.Register(svc("a", "a-new")))
		must(t, m.Deregister(svc("a", "a-old")))
	}
	must(t, m.Register(svc("b", "b-1")))
	for i := 0; i < 100; i++ {
		for _, want := range []string{"create a-new", "delete a-old"} {
			r, err := next(t, all)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Action + " " + r.Service.Nodes[0].Id; got != want {
				t.Fatalf("event %d: %q, want %q", i, got, want)
			}
		}
	}
	r1, _ := next(t, all)
	r2, _ := next(t, one)
	if r1.Service.Name != "b" || r2.Service.Name != "b" {
		t.Fatalf("got %v and %v, want b on both", r1.Service.Name, r2.Service.Name)
	}
	if r1.Service == r2.Service || r1.Service.Nodes[0] == r2.Service.Nodes[0] {
		t.Errorf("two streams share an event's service")
	}
	one.Stop()
	if _, err := next(t, one); !errors.Is(err, errWatchStopped) {
		t.Errorf("Next after Stop: %v, want %v", err, errWatchStopped)
	}
}

// Down breaks every stream, dropping what is queued, and refuses new ones
// until Up.
func TestMemoryDownBreaksStreams(t *testing.T) {
	m := NewMemory()
	conn, _ := m.Client()
	w, err := conn.Watch()
	if err != nil {
		t.Fatal(err)
	}
	must(t, m.Register(svc("a", "a-1")))
	must(t, m.Down())
	if _, err := next(t, w); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Next after Down: %v, want %v", err, ErrUnavailable)
	}
	if _, err := conn.Watch(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Watch while down: %v, want %v", err, ErrUnavailable)
	}
	if !m.Refuses() {
		t.Errorf("Refuses is false while down")
	}
	// The demo still writes while it is down, and no one hears of it.
	must(t, m.Register(svc("a", "a-2")))
	must(t, m.Up())
	w2, err := conn.Watch()
	if err != nil {
		t.Fatalf("Watch after Up: %v", err)
	}
	must(t, m.Deregister(svc("a", "a-1")))
	if r, err := next(t, w2); err != nil || r.Action != "delete" || r.Service.Nodes[0].Id != "a-1" {
		t.Errorf("first event after Up: %+v, %v; want the delete of a-1", r, err)
	}
	got, err := conn.GetService("a")
	if err != nil || len(got) != 1 || len(got[0].Nodes) != 1 || got[0].Nodes[0].Id != "a-2" {
		t.Errorf("GetService after Up: %+v, %v; want a-2 alone", got, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// An answer is old if any of its nodes left before the lookup started; a
// node leaving later, or a node of the fleet's still registered, is not.
func TestFleetCheck(t *testing.T) {
	f := newFleet(NewMemory(), &timeline{}, 2)
	f.markGone(0, 0, 10*time.Millisecond)
	f.markGone(0, 2, 20*time.Millisecond)
	ans := func(ids ...string) []*registry.Service {
		s := &registry.Service{Name: ServiceName(0)}
		for _, id := range ids {
			s.Nodes = append(s.Nodes, &registry.Node{Id: id})
		}
		return []*registry.Service{s, nil}
	}
	for _, tc := range []struct {
		svcs  []*registry.Service
		at    time.Duration
		nodes int
		old   bool
		lag   time.Duration
	}{
		{ans(nodeID(0, 0)), 5 * time.Millisecond, 1, false, 0},
		{ans(nodeID(0, 0)), 10 * time.Millisecond, 1, true, 0},
		{ans(nodeID(0, 1), nodeID(0, 0)), 25 * time.Millisecond, 2, true, 15 * time.Millisecond},
		{ans(nodeID(0, 0), nodeID(0, 2)), 25 * time.Millisecond, 2, true, 15 * time.Millisecond},
		{ans(nodeID(0, 2), nodeID(0, 0)), 15 * time.Millisecond, 2, true, 5 * time.Millisecond},
		{ans(nodeID(0, 1), "unknown"), time.Second, 2, false, 0},
		{ans(), time.Second, 0, false, 0},
		{nil, time.Second, 0, false, 0},
	} {
		nodes, old, lag := f.check(tc.svcs, tc.at)
		if nodes != tc.nodes || old != tc.old || lag != tc.lag {
			t.Errorf("check(%v at %v) = %d, %v, %v; want %d, %v, %v", tc.svcs, tc.at, nodes, old, lag, tc.nodes, tc.old, tc.lag)
		}
	}
}
