package cache_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
)

// The scale benchmarks (bench_scale_test.go, bench_revalidate_test.go,
// bench_events_test.go) share the fake registry and the helpers in this
// file.

// Modes of scaleReg.ListServices.
const (
	listNone  int32 = iota // nothing, as benchReg
	listNames              // every service by name, without nodes, as mdns lists
	listNodes              // every service with its nodes, as etcd lists
)

// scaleReg is a benchReg with what the scale benchmarks need on top: a
// latency that may change while calls are out, a count of the calls in
// flight, a ListServices that lists names or whole services, and watch
// streams that the benchmark feeds and breaks. Several scaleRegs may wrap
// one benchReg, so that a large set of services is built once and each
// cache gets watch streams of its own.
//
// A watch with registry.WatchService gets the events of that service only,
// as go-micro's cache asks for, one watch per service; a watch without it
// gets every event, as regcache asks for.
//
// Like benchReg, it is kept apart from the tests' one fake registry
// (internal/fakereg), which would change what the scale benchmarks
// measure: they drive thousands of services and many concurrent callers
// through it, and the fake's one mutex and its record of every call would
// serialize and allocate on that path. scaleReg counts with atomics.
type scaleReg struct {
	*benchReg

	latency    atomic.Int64 // added to each GetService of a registered service, in ns
	inflight   atomic.Int64 // GetService calls not yet returned
	absent     atomic.Int64 // GetService calls for services not registered
	list       atomic.Int32 // the ListServices mode
	lists      atomic.Int64 // ListServices calls
	watchCalls atomic.Int64 // Watch calls
	// watchedAt is when Watch was last called, in Unix ns.
	watchedAt atomic.Int64
	// applied counts the events the caches are done with: a watcher that
	// asks for the next event has applied the one before. A watcher that
	// brings it to target signals reached, so that waitApplied does not
	// poll.
	applied atomic.Int64
	target  atomic.Int64
	reached chan struct{}

	wmu sync.Mutex
	// perCap is the buffer of each per-service watch's channel.
	perCap int
	all    chan *registry.Result            // events for the whole-registry streams
	per    map[string]chan *registry.Result // events for the watch of one service
	// open are the whole-registry streams not yet stopped, for breakAll.
	open map[*scaleWatcher]bool
}

func newScaleReg(base *benchReg) *scaleReg {
	return &scaleReg{
		benchReg: base,
		all:      make(chan *registry.Result),
		per:      map[string]chan *registry.Result{},
		open:     map[*scaleWatcher]bool{},
		reached:  make(chan struct{}, 1),
	}
}

// newBufferedScaleReg is newScaleReg with watch channels that hold events
// until the watcher asks for them, as a registry's client buffers what the
// network brought: a whole-registry stream holds up to n, a per-service
// watch one, enough for one event per service and pass.
func newBufferedScaleReg(base *benchReg, n int) *scaleReg {
	r := newScaleReg(base)
	r.all, r.perCap = make(chan *registry.Result, n), 1
	return r
}

// scaleServices builds a registry of n services of the given node count,
// named svc000000 and so on, and returns it with the names.
func scaleServices(n, nodes int) (*benchReg, []string) {
	r := newBenchReg()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("svc%06d", i)
		r.svcs[names[i]] = []*registry.Service{benchService(names[i], nodes)}
	}
	return r, names
}

func (r *scaleReg) has(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.svcs[name]) > 0
}

// GetService is benchReg's, after the latency. A service that is not
// registered is answered at once: the latency stands for fetching and
// decoding a service's data.
func (r *scaleReg) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	registered := r.has(name)
	if !registered {
		r.absent.Add(1)
	}
	if d := time.Duration(r.latency.Load()); d > 0 && registered {
		var o registry.GetOptions
		for _, opt := range opts {
			opt(&o)
		}
		ctx := o.Context
		if ctx == nil {
			ctx = context.Background()
		}
		if !benchWait(ctx, d) {
			return nil, ctx.Err()
		}
	}
	return r.benchReg.GetService(name, opts...)
}

func (r *scaleReg) ListServices(...registry.ListOption) ([]*registry.Service, error) {
	r.lists.Add(1)
	mode := r.list.Load()
	if mode == listNone {
		return nil, nil
	}
	// Copied outside the lock, which GetService takes: a registry does
	// not hold up other calls while it encodes a list.
	r.mu.Lock()
	out := make([]*registry.Service, 0, len(r.svcs))
	for _, svcs := range r.svcs {
		out = append(out, svcs...)
	}
	r.mu.Unlock()
	for i, s := range out {
		if mode == listNames {
			out[i] = &registry.Service{Name: s.Name, Version: s.Version}
		} else {
			out[i] = benchCopy(s)
		}
	}
	return out, nil
}

func (r *scaleReg) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var o registry.WatchOptions
	for _, opt := range opts {
		opt(&o)
	}
	r.watchCalls.Add(1)
	r.watchedAt.Store(time.Now().UnixNano())
	w := &scaleWatcher{r: r, stop: make(chan struct{})}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if o.Service == "" {
		w.events = r.all
		r.open[w] = true
		return w, nil
	}
	w.events = r.channel(o.Service)
	return w, nil
}

// channel returns the events channel of the watch of service name; wmu is
// held.
func (r *scaleReg) channel(name string) chan *registry.Result {
	ch, ok := r.per[name]
	if !ok {
		ch = make(chan *registry.Result, r.perCap)
		r.per[name] = ch
	}
	return ch
}

// prepareWatches makes the channels of the watches of names ahead of
// time, so that they are not counted in a cache's memory.
func (r *scaleReg) prepareWatches(names []string) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	for _, name := range names {
		r.channel(name)
	}
}

// targets returns the channel that feeds the events of each service in
// names to a cache: the watch of that service if the cache watches services
// one by one, else the whole-registry stream. A send returns once a watcher
// has taken the event.
func (r *scaleReg) targets(names []string, perService bool) []chan *registry.Result {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	out := make([]chan *registry.Result, len(names))
	for i, name := range names {
		out[i] = r.all
		if perService {
			out[i] = r.channel(name)
		}
	}
	return out
}

// waitApplied waits until the watchers are done with n events, counted
// since applied read base.
func (r *scaleReg) waitApplied(base, n int64) {
	select {
	case <-r.reached: // left by a wait that returned without it
	default:
	}
	r.target.Store(base + n)
	// The watcher that brings applied to the target signals after it
	// does, so a wait that finds applied short always gets a signal; a
	// signal left from before only makes it look again.
	for r.applied.Load()-base < n {
		<-r.reached
	}
}

// breakAll ends every open whole-registry stream, as a network blip or a
// registry restart does; the cache reconnects.
func (r *scaleReg) breakAll() {
	r.wmu.Lock()
	open := r.open
	r.open = map[*scaleWatcher]bool{}
	r.wmu.Unlock()
	for w := range open {
		w.Stop()
	}
}

// quiet waits until no GetService call has been in flight, and none has
// started, for 20 ms, and returns when it first saw that state: the end of
// the last call, to within a poll. A cache may start its next background
// call just after one returns, so a single look is not enough.
func (r *scaleReg) quiet() time.Time {
	const poll, window = 200 * time.Microsecond, 20 * time.Millisecond
	var since time.Time
	last := int64(-1)
	for {
		now := time.Now()
		n := r.calls.Load()
		if r.inflight.Load() != 0 || n != last {
			last, since = n, time.Time{}
			if r.inflight.Load() == 0 {
				since = now
			}
		} else if since.IsZero() {
			since = now
		} else if now.Sub(since) >= window {
			return since
		}
		time.Sleep(poll)
	}
}

// waitWatches waits until Watch has been called n times.
func (r *scaleReg) waitWatches(b *testing.B, n int64) {
	deadline := time.Now().Add(time.Minute)
	for r.watchCalls.Load() < n {
		if time.Now().After(deadline) {
			b.Fatalf("%d watches opened of %d", r.watchCalls.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

type scaleWatcher struct {
	r      *scaleReg
	events <-chan *registry.Result
	stop   chan struct{}
	once   sync.Once
	// got is set while the caller holds an event: its next call to Next
	// means it has applied it. Only the caller of Next touches it.
	got bool
}

func (w *scaleWatcher) Next() (*registry.Result, error) {
	if w.got {
		w.got = false
		if w.r.applied.Add(1) == w.r.target.Load() {
			select {
			case w.r.reached <- struct{}{}:
			default:
			}
		}
	}
	select {
	case ev := <-w.events:
		w.got = true
		return ev, nil
	case <-w.stop:
		return nil, registry.ErrWatcherStopped
	}
}

func (w *scaleWatcher) Stop() { w.once.Do(func() { close(w.stop) }) }

// scaleFill looks up every name once, from GOMAXPROCS×4 goroutines, as the
// clients of a large system do after a cold start, and returns how many
// lookups failed.
func scaleFill(c registry.Registry, names []string) int {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) * 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(names) {
					return
				}
				if svcs, err := c.GetService(names[i]); err != nil || len(svcs) == 0 {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return int(failed.Load())
}

// scaleSettle waits until no more than g goroutines are left, for at most
// a minute: go-micro's cache leaves two per service, which end after Stop
// without Stop waiting for them.
func scaleSettle(b *testing.B, g int) {
	deadline := time.Now().Add(time.Minute)
	for runtime.NumGoroutine() > g {
		if time.Now().After(deadline) {
			b.Fatalf("%d goroutines left, want %d", runtime.NumGoroutine(), g)
		}
		time.Sleep(time.Millisecond)
	}
}
