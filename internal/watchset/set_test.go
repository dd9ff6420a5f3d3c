package watchset

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/policy"
)

// fakeHost is a Host whose lock, mu, stands for the cache's. The methods
// that take the cache's lock take mu, and ask the set whether a watch is
// failing with mu held, as the cache may: a set that called one of them
// with its own lock held would deadlock there, and the test would hang.
// The test too tells the set of changes with mu held.
type fakeHost struct {
	wg  sync.WaitGroup
	set *Set
	// cached holds the services cached, read without mu as the cache
	// reads its map of entries.
	cached sync.Map

	mu       sync.Mutex
	down     bool
	fail     map[string]error // Watch fails for these services
	watchers map[string][]*fakeWatcher
	failed   []string // the suspects of the failures, in order
	reconns  int
	// failingSet holds the services whose watch the notices tell failing,
	// as the cache's core keeps them.
	failingSet map[string]bool
}

// failing reports whether the notices tell a watch failing.
func (h *fakeHost) failing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.failingSet) > 0
}

func newFakeHost(cached ...string) *fakeHost {
	h := &fakeHost{fail: map[string]error{}, watchers: map[string][]*fakeWatcher{}, failingSet: map[string]bool{}}
	for _, name := range cached {
		h.cached.Store(name, true)
	}
	return h
}

func (h *fakeHost) Now() time.Time { return time.Now() }

func (h *fakeHost) Go(f func()) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f()
	}()
}

func (h *fakeHost) Cached(service string) bool {
	_, ok := h.cached.Load(service)
	return ok
}

func (h *fakeHost) Watch(ctx context.Context, service string) (registry.Watcher, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.fail[service]; err != nil {
		return nil, err
	}
	w := &fakeWatcher{events: make(chan *registry.Result), lost: make(chan error, 1), stop: make(chan struct{})}
	h.watchers[service] = append(h.watchers[service], w)
	return w, nil
}

func (h *fakeHost) Next(w registry.Watcher, _ *int) (*registry.Result, error) { return w.Next() }

// Tell takes mu, as the cache takes its lock, and checks that the set's
// lock is free: a set that told the host with its own lock held would
// deadlock against a cache that tells the set of changes with its lock
// held.
func (h *fakeHost) Tell(n Notice) Reply {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.set.mu.Lock()
	h.set.mu.Unlock()
	var r Reply
	switch n.Kind {
	case Opened:
		if n.Reopened {
			h.reconns++
		}
		delete(h.failingSet, n.Service)
		r.Unproven = h.down
	case Proven:
		h.down = false
	case Failed:
		h.failed = append(h.failed, n.Suspect)
		h.failingSet[n.Service] = true
		r.Told = n.Tell
	}
	r.Down, r.Interval = h.down, time.Second
	return r
}

// open returns the newest watcher of service and whether it is open.
func (h *fakeHost) open(service string) (*fakeWatcher, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.watchers[service]
	if len(ws) == 0 {
		return nil, false
	}
	w := ws[len(ws)-1]
	select {
	case <-w.stop:
		return w, false
	default:
		return w, true
	}
}

// change tells s of a service cached or dropped, with the host's lock
// held, as the cache does.
func (h *fakeHost) change(s *Set, service string, cached bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cached {
		h.cached.Store(service, true)
	} else {
		h.cached.Delete(service)
	}
	s.Changed(service)
}

// fakeWatcher is a watch that passes events on, fails with the error sent
// on lost, and ends with Stop.
type fakeWatcher struct {
	events   chan *registry.Result
	lost     chan error
	stop     chan struct{}
	stopOnce sync.Once
}

func (w *fakeWatcher) Next() (*registry.Result, error) {
	select {
	case res := <-w.events:
		return res, nil
	case err := <-w.lost:
		return nil, err
	case <-w.stop:
		return nil, registry.ErrWatcherStopped
	}
}

func (w *fakeWatcher) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

// start runs a set over h, as the cache does, for the services cached.
func start(h *fakeHost) *Set {
	s := New(context.Background(), h, 4)
	h.set = s
	var cached []string
	h.cached.Range(func(name, _ any) bool {
		cached = append(cached, name.(string))
		return true
	})
	h.Go(func() { s.Run(cached) })
	return s
}

// stop stops s and waits for every goroutine it started.
func stop(h *fakeHost, s *Set) {
	s.Stop()
	h.wg.Wait()
}

// The set opens one watch per cached service, passes its events on,
// closes the watch of a service dropped, and ends every goroutine with
// Stop.
func TestSetWatchesTheCachedServices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost("a", "b")
		s := start(h)
		synctest.Wait()
		_, okA := h.open("a")
		_, okB := h.open("b")
		if !okA || !okB {
			t.Fatalf("watches open: a %v, b %v; want both", okA, okB)
		}

		w, _ := h.open("b")
		ev := &registry.Result{Action: "create", Service: &registry.Service{Name: "b"}}
		go func() { w.events <- ev }()
		if got, err := s.Next(); err != nil || got != ev {
			t.Fatalf("Next = %v, %v; want b's event", got, err)
		}

		h.change(s, "a", false)
		h.change(s, "c", true)
		synctest.Wait()
		time.Sleep(minWatchAge) // a watch is stopped once that old
		synctest.Wait()
		if _, ok := h.open("a"); ok {
			t.Error("the watch of a service dropped is still open")
		}
		if _, ok := h.open("c"); !ok {
			t.Error("a service cached later has no watch")
		}
		stop(h, s)
		if _, err := s.Next(); !errors.Is(err, registry.ErrWatcherStopped) {
			t.Errorf("Next after Stop: %v, want ErrWatcherStopped", err)
		}
		if _, ok := h.open("b"); ok {
			t.Error("Stop left a watch open")
		}
	})
}

// A watch lost counts towards the registry's health as the loss of a
// watch while another is open, and is redialled on its own backoff until
// Watch answers: the redial is counted as a reconnect, and the other watch
// is left alone.
func TestSetRedialsTheWatchLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost("a", "b")
		s := start(h)
		defer stop(h, s)
		synctest.Wait()
		wa, _ := h.open("a")
		wb, _ := h.open("b")
		h.mu.Lock()
		h.fail["a"] = errors.New("refused")
		h.mu.Unlock()
		wa.lost <- errors.New("lost")
		time.Sleep(time.Second)
		synctest.Wait()
		if _, ok := h.open("a"); ok {
			t.Fatal("the watch lost is still open")
		}
		h.mu.Lock()
		failed := slices.Clone(h.failed)
		delete(h.fail, "a")
		h.mu.Unlock()
		if len(failed) < 2 {
			t.Errorf("failures %q, want the loss and a failed redial", failed)
		}
		for _, key := range failed {
			if key != policy.StreamSuspect+" a" {
				t.Errorf("failure suspect %q, want a's loss: another watch is open", key)
			}
		}
		if !h.failing() {
			t.Error("the notices tell no watch failing while one waits for a redial")
		}

		time.Sleep(policy.BackoffCap + time.Second)
		synctest.Wait()
		if _, ok := h.open("a"); !ok {
			t.Fatal("the watch lost was not redialled")
		}
		if w, _ := h.open("b"); w != wb {
			t.Error("the other watch was redialled")
		}
		h.mu.Lock()
		reconns := h.reconns
		h.mu.Unlock()
		if reconns != 1 {
			t.Errorf("%d reconnects counted, want 1", reconns)
		}
		if h.failing() {
			t.Error("the notices tell a watch failing with every watch open")
		}
	})
}

// A watch is stopped no sooner than minWatchAge after it opened: go-micro's
// Consul plugin starts a plan in a goroutine of its own, and consul's api
// panics, ending the process, when a plan is stopped just as its first
// query begins.
func TestAYoungWatchIsStoppedOnceItIsOldEnough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost("a")
		s := start(h)
		synctest.Wait()
		if _, ok := h.open("a"); !ok {
			t.Fatal("a's watch is not open")
		}
		h.change(s, "a", false)
		synctest.Wait()
		if _, ok := h.open("a"); !ok {
			t.Fatal("a's watch, a moment old, stopped at once")
		}
		time.Sleep(minWatchAge)
		synctest.Wait()
		if _, ok := h.open("a"); ok {
			t.Fatal("a's watch still open once old enough")
		}
		s.Stop()
	})
}
