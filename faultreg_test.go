package cache_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
)

// This file holds the registries that the fault tests (faults_test.go) and
// the soak test (soak_test.go) put behind a cache: memReg, an in-memory
// registry with no goroutine of its own, and faultRegistry, a wrapper around
// any registry that injects faults on command and checks, on every registry
// call, that the cache stays within its call bound.

// memReg is an in-memory registry.Registry that starts no goroutine, so that
// it can live inside a testing/synctest bubble: go-micro's memory registry
// starts a pruning goroutine that never exits, which a bubble reports as a
// leak. Register and Deregister send one event to every open watcher, in
// order and without loss, like a well-behaved plugin; faultRegistry adds the
// misbehaviour.
type memReg struct {
	mu       sync.Mutex
	services map[string][]*registry.Service // by name; each version's nodes in order of registration
	watchers map[*memWatcher]struct{}
	// listNodes makes ListServices return every service with its nodes,
	// as go-micro's etcd plugin and memory registry do; otherwise it lists
	// names and versions only, as mdns does.
	listNodes bool
}

var _ registry.Registry = (*memReg)(nil)

func newMemReg() *memReg {
	return &memReg{services: map[string][]*registry.Service{}, watchers: map[*memWatcher]struct{}{}}
}

// Register adds s's nodes to its version, replacing nodes of the same Id,
// and sends a "create" event for a new version, "update" otherwise. The
// event names only s's nodes, as go-micro's registries do.
func (r *memReg) Register(s *registry.Service, _ ...registry.RegisterOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.services[s.Name]
	action := "create"
	next := make([]*registry.Service, 0, len(cur)+1)
	found := false
	for _, v := range cur {
		if v.Version != s.Version {
			next = append(next, v)
			continue
		}
		found, action = true, "update"
		merged := benchCopy(v)
		index := make(map[string]int, len(merged.Nodes))
		for i, o := range merged.Nodes {
			index[o.Id] = i
		}
		for _, n := range s.Nodes {
			cn := *n
			cn.Metadata = benchCopyMap(n.Metadata)
			if i, ok := index[n.Id]; ok {
				merged.Nodes[i] = &cn
				continue
			}
			index[n.Id] = len(merged.Nodes)
			merged.Nodes = append(merged.Nodes, &cn)
		}
		next = append(next, merged)
	}
	if !found {
		next = append(next, benchCopy(s))
	}
	r.services[s.Name] = next
	r.sendLocked(action, s)
	return nil
}

// Deregister removes s's nodes, drops a version left without nodes and a
// service left without versions, and sends a "delete" event naming s's
// nodes.
func (r *memReg) Deregister(s *registry.Service, _ ...registry.DeregisterOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	gone := make(map[string]bool, len(s.Nodes))
	for _, n := range s.Nodes {
		gone[n.Id] = true
	}
	var next []*registry.Service
	for _, v := range r.services[s.Name] {
		if v.Version != s.Version {
			next = append(next, v)
			continue
		}
		trimmed := benchCopy(v)
		trimmed.Nodes = slices.DeleteFunc(trimmed.Nodes, func(o *registry.Node) bool { return gone[o.Id] })
		if len(trimmed.Nodes) > 0 {
			next = append(next, trimmed)
		}
	}
	if len(next) == 0 {
		delete(r.services, s.Name)
	} else {
		r.services[s.Name] = next
	}
	r.sendLocked("delete", s)
	return nil
}

// send sends res, as it is, to every watcher of its service: an event
// that no change made, such as one of an action the cache does not know.
func (r *memReg) send(res *registry.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.watchers {
		if w.service == "" || w.service == res.Service.Name {
			w.push(res)
		}
	}
}

func (r *memReg) sendLocked(action string, s *registry.Service) {
	for w := range r.watchers {
		if w.service != "" && w.service != s.Name {
			continue
		}
		w.push(&registry.Result{Action: action, Service: benchCopy(s)})
	}
}

// GetService answers with fresh copies, as a registry that decodes its
// answer anew each time.
func (r *memReg) GetService(name string, _ ...registry.GetOption) ([]*registry.Service, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.services[name]
	if !ok {
		return nil, registry.ErrNotFound
	}
	out := make([]*registry.Service, len(cur))
	for i, s := range cur {
		out[i] = benchCopy(s)
	}
	return out, nil
}

func (r *memReg) ListServices(...registry.ListOption) ([]*registry.Service, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*registry.Service
	for _, cur := range r.services {
		for _, s := range cur {
			if r.listNodes {
				out = append(out, benchCopy(s))
				continue
			}
			out = append(out, &registry.Service{Name: s.Name, Version: s.Version})
		}
	}
	return out, nil
}

// replaceSilently makes name's only version hold the given node ids, and
// sends no event: a change that a stream broken or blocked at the time
// never tells.
func (r *memReg) replaceSilently(name string, ids ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.services[name] = []*registry.Service{faultService(name, ids...)}
}

// Watch watches every service, or the one that registry.WatchService names.
func (r *memReg) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var o registry.WatchOptions
	for _, opt := range opts {
		opt(&o)
	}
	w := &memWatcher{r: r, service: o.Service, signal: make(chan struct{}, 1), stop: make(chan struct{})}
	r.mu.Lock()
	r.watchers[w] = struct{}{}
	r.mu.Unlock()
	return w, nil
}

func (r *memReg) Init(...registry.Option) error { return nil }
func (r *memReg) Options() registry.Options     { return registry.Options{} }
func (r *memReg) String() string                { return "memreg" }

// nodeSet is the ids of every node of name in the registry, sorted.
func (r *memReg) nodeSet(name string) []string {
	svcs, _ := r.GetService(name)
	return nodeSetOf(svcs)
}

// nodeSetOf is the ids of every node of svcs, sorted.
func nodeSetOf(svcs []*registry.Service) []string {
	ids := []string{}
	for _, s := range svcs {
		if s == nil {
			continue
		}
		for _, n := range s.Nodes {
			if n != nil {
				ids = append(ids, n.Id)
			}
		}
	}
	sort.Strings(ids)
	return ids
}

// memWatcher queues its events without bound, so that the registry never
// blocks on a slow watcher and never drops an event.
type memWatcher struct {
	r       *memReg
	service string        // the one service watched; empty: all
	signal  chan struct{} // buffer of one: a push never blocks
	stop    chan struct{}
	once    sync.Once

	mu    sync.Mutex
	queue []*registry.Result
}

func (w *memWatcher) push(res *registry.Result) {
	w.mu.Lock()
	w.queue = append(w.queue, res)
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *memWatcher) Next() (*registry.Result, error) {
	for {
		select {
		case <-w.stop:
			return nil, registry.ErrWatcherStopped
		default:
		}
		w.mu.Lock()
		if len(w.queue) > 0 {
			res := w.queue[0]
			w.queue[0] = nil
			w.queue = w.queue[1:]
			w.mu.Unlock()
			return res, nil
		}
		w.mu.Unlock()
		select {
		case <-w.signal:
		case <-w.stop:
			return nil, registry.ErrWatcherStopped
		}
	}
}

func (w *memWatcher) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.r.mu.Lock()
		delete(w.r.watchers, w)
		w.r.mu.Unlock()
	})
}

// getFault is what faultRegistry does to GetService calls. Faults combine:
// latency comes first, then a hang, a panic or an error; nilEntries spoils
// the answers that get through.
type getFault struct {
	// latency delays every call, or ends it early with the context's error
	// when the caller's context is done first.
	latency time.Duration
	// hang blocks every call until its context is done or the test
	// releases the hangs (releaseHangs); then it fails with errHung.
	hang bool
	// ignoreCtx makes a hang ignore the caller's context, as go-micro's
	// etcd plugin does: it uses a timeout of its own instead.
	ignoreCtx bool
	// panicVal, when set, is what every call panics with.
	panicVal any
	// err, when set, is what every call fails with.
	err error
	// nilEntries adds a nil Service, a version with nil Nodes and a version
	// whose nodes are all nil to every answer.
	nilEntries bool
	// late reads the answer at the start of the call and returns it late
	// after that, whatever changed meanwhile: an answer older than the
	// events that arrive while it is out.
	late time.Duration
	// unheard answers every call with no service and no error, as the
	// NATS plugin and mdns do when no peer answers within their query
	// timeout, whether the service is gone or the registry unreachable.
	unheard bool
}

// watchFault is what faultRegistry does to Watch, and to the streams it
// returns. Event faults act on the events that the wrapped registry's
// stream delivers.
type watchFault struct {
	// Watch itself.
	watchErr   error // Watch fails with it
	watchPanic any   // Watch panics with it
	watchNil   bool  // Watch returns a nil watcher and no error
	// watchHang blocks Watch until its WatchContext is done or the hangs
	// are released.
	watchHang bool

	// The stream.
	breakErr error // Next fails with it, once breakAfter events were delivered
	// breakAfter is how many events each stream delivers before it
	// breaks with breakErr; 0 breaks it at the first Next.
	breakAfter int
	nextPanic  any // Next panics with it
	// nextHang makes Next block, ignoring events, until the stream is
	// stopped or the hangs are released: go-micro's etcd plugin does this
	// through an etcd outage instead of failing.
	nextHang  bool
	stopPanic any // Stop stops the stream, then panics with it

	// The events.
	duplicate int // each event is delivered 1 + duplicate times
	// reorder holds events back and delivers them in reversed batches of
	// this size; a batch is delivered only when it is full.
	reorder int
	// stale replays, after each event, the event delivered stale events
	// before it: old news, such as the create of a node deleted since.
	stale int
	// nilEvents precedes each event with (nil, nil), an event with a nil
	// Service, one whose Service has nil Nodes, one whose nodes are all
	// nil, one with an empty service name and one with an unknown action.
	nilEvents bool
}

// errHung is what a hung call fails with once it is released, as a
// registry client fails once its own timeout passes.
var errHung = errors.New("fault registry: call hung until its timeout")

// callStats is the record of one service's GetService calls.
type callStats struct {
	calls    int
	inflight int
	lastEnd  time.Time
	// lastEarly is when the last call that came within the interval of
	// the one before started: a resync (a stream established, the
	// registry back) lets one such call through, and only one an
	// interval.
	lastEarly time.Time
	// minGap is the shortest time seen between the end of one call and
	// the start of the next; zero until there are two calls.
	minGap time.Duration
}

// faultRegistry wraps a registry and injects faults on command: latency,
// errors, panics and hangs in GetService; errors, panics, hangs and nil
// watchers from Watch; broken, panicking and hanging streams; duplicate,
// out-of-order, stale and malformed events; and nil entries in answers.
//
// It also checks the cache's promise about registry calls as they happen:
// for each service, at most one GetService call at a time, and at least
// interval between the end of one call and the start of the next, but for
// one early call an interval, which a resync may make. The
// cache records an attempt when the registry has answered, reading its
// clock after the call returns, and starts the next attempt only once the
// interval has passed since then, so the gap seen here is never shorter,
// in fake time or in real time.
type faultRegistry struct {
	registry.Registry // Register, Deregister, ListServices, Init, Options

	mu     sync.Mutex
	get    getFault            // for every service without an entry in getFor
	getFor map[string]getFault // per-service faults
	list   *getFault           // for ListServices; nil: the get fault
	watch  watchFault
	// watchFor are the faults of the watches of single services
	// (registry.WatchService), in place of watch.
	watchFor map[string]watchFault
	release  chan struct{} // closed by releaseHangs
	interval time.Duration // the bound checked on every call; 0: none

	calls      map[string]*callStats
	totalCalls int
	watches    int // Watch calls
	lists      int // ListServices calls
	// starts are the times GetService calls started, and watchStarts
	// those of Watch calls, in order.
	starts, watchStarts []time.Time
	live                map[*faultWatcher]struct{}
	received            int // events received from the wrapped registry's streams
	streams             int // streams handed out
	open                int // streams not yet stopped
	// maxOpen is the most streams of every service read at once: the
	// cache reads one stream at a time. (A stream that a Watch call given
	// up on opens late is closed unread.)
	maxOpen, reading int
	violations       int
	// earlyRetries are the calls that came within the interval, as a
	// resync allows.
	earlyRetries int
	firstFaults  []string // the first few violations, for the failure message
}

func newFaultRegistry(inner registry.Registry, interval time.Duration) *faultRegistry {
	return &faultRegistry{
		Registry: inner,
		getFor:   map[string]getFault{},
		watchFor: map[string]watchFault{},
		release:  make(chan struct{}),
		interval: interval,
		calls:    map[string]*callStats{},
		live:     map[*faultWatcher]struct{}{},
	}
}

// cutStreams ends every open stream at once, as a lost connection does:
// each stream's Next fails.
func (f *faultRegistry) cutStreams() {
	f.mu.Lock()
	live := make([]*faultWatcher, 0, len(f.live))
	for w := range f.live {
		live = append(live, w)
	}
	f.mu.Unlock()
	for _, w := range live {
		w.inner.Stop()
	}
}

func (f *faultRegistry) String() string { return "fault(" + f.Registry.String() + ")" }

// setGet sets the GetService fault for every service without one of its own.
func (f *faultRegistry) setGet(g getFault) {
	f.mu.Lock()
	f.get = g
	f.mu.Unlock()
}

// setGetFor sets the GetService fault of one service.
func (f *faultRegistry) setGetFor(name string, g getFault) {
	f.mu.Lock()
	f.getFor[name] = g
	f.mu.Unlock()
}

// setList sets the ListServices fault, in place of the one for every
// service.
func (f *faultRegistry) setList(g getFault) {
	f.mu.Lock()
	f.list = &g
	f.mu.Unlock()
}

// setWatchFor sets the faults of the watches of one service.
func (f *faultRegistry) setWatchFor(name string, w watchFault) {
	f.mu.Lock()
	f.watchFor[name] = w
	f.mu.Unlock()
}

// startsSince returns the start times of the GetService calls, and of the
// Watch calls, made at or after t.
func (f *faultRegistry) startsSince(t time.Time) (gets, watches []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	after := func(ts []time.Time) []time.Time {
		i, _ := slices.BinarySearchFunc(ts, t, func(a, b time.Time) int { return a.Compare(b) })
		return slices.Clone(ts[i:])
	}
	return after(f.starts), after(f.watchStarts)
}

// setWatch sets the Watch, stream and event faults. Streams already open
// see the new faults at their next Next.
func (f *faultRegistry) setWatch(w watchFault) {
	f.mu.Lock()
	f.watch = w
	f.mu.Unlock()
}

// clear removes every fault and ends every hang in progress.
func (f *faultRegistry) clear() {
	f.mu.Lock()
	f.get, f.watch, f.list = getFault{}, watchFault{}, nil
	clear(f.getFor)
	clear(f.watchFor)
	f.mu.Unlock()
	f.releaseHangs()
}

// releaseHangs ends every hang in progress; later calls may hang again.
func (f *faultRegistry) releaseHangs() {
	f.mu.Lock()
	close(f.release)
	f.release = make(chan struct{})
	f.mu.Unlock()
}

func (f *faultRegistry) violatedLocked(format string, args ...any) {
	f.violations++
	if len(f.firstFaults) < 10 {
		f.firstFaults = append(f.firstFaults, fmt.Sprintf(format, args...))
	}
}

func (f *faultRegistry) GetService(name string, opts ...registry.GetOption) (svcs []*registry.Service, err error) {
	var o registry.GetOptions
	for _, opt := range opts {
		opt(&o)
	}
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	start := time.Now()
	f.mu.Lock()
	st := f.calls[name]
	if st == nil {
		st = &callStats{}
		f.calls[name] = st
	}
	if st.inflight > 0 {
		f.violatedLocked("service %q: a second registry call while one is in flight", name)
	}
	if !st.lastEnd.IsZero() {
		gap := start.Sub(st.lastEnd)
		if st.calls == 1 || gap < st.minGap {
			st.minGap = gap
		}
		if gap < f.interval {
			if !st.lastEarly.IsZero() && start.Sub(st.lastEarly) < f.interval {
				f.violatedLocked("service %q: registry call %d started %v after the previous one ended, within the interval %v, and %v after the last early call",
					name, st.calls+1, gap, f.interval, start.Sub(st.lastEarly))
			}
			st.lastEarly = start
			f.earlyRetries++
		}
	}
	st.calls++
	st.inflight++
	f.totalCalls++
	f.starts = append(f.starts, start)
	g, ok := f.getFor[name]
	if !ok {
		g = f.get
	}
	release := f.release
	f.mu.Unlock()
	// Deferred, so that a panicking call is recorded as ended too, before
	// the cache recovers the panic and reads its clock.
	defer func() {
		f.mu.Lock()
		st.inflight--
		st.lastEnd = time.Now()
		f.mu.Unlock()
	}()
	return f.answer(ctx, g, release, name, opts)
}

// answer applies the fault g to one GetService call.
func (f *faultRegistry) answer(ctx context.Context, g getFault, release chan struct{}, name string, opts []registry.GetOption) ([]*registry.Service, error) {
	if g.latency > 0 {
		t := time.NewTimer(g.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	if g.hang {
		done := ctx.Done()
		if g.ignoreCtx {
			done = nil
		}
		select {
		case <-release:
			return nil, errHung
		case <-done:
			return nil, ctx.Err()
		}
	}
	if g.panicVal != nil {
		panic(g.panicVal)
	}
	if g.err != nil {
		return nil, g.err
	}
	if g.unheard {
		return nil, nil
	}
	svcs, err := f.Registry.GetService(name, opts...)
	if g.late > 0 {
		time.Sleep(g.late)
	}
	if err == nil && g.nilEntries {
		svcs = append([]*registry.Service{nil}, svcs...)
		svcs = append(svcs,
			&registry.Service{Name: name, Version: "nil-nodes"},
			&registry.Service{Name: name, Version: "nil-node-entries", Nodes: []*registry.Node{nil, nil}})
	}
	return svcs, err
}

// ListServices fails as GetService does under the fault for every service
// (latency, then a hang, a panic or an error), and counts the calls.
func (f *faultRegistry) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	f.mu.Lock()
	f.lists++
	g, release := f.get, f.release
	if f.list != nil {
		g = *f.list
	}
	f.mu.Unlock()
	if g.latency > 0 {
		time.Sleep(g.latency)
	}
	if g.hang {
		<-release
		return nil, errHung
	}
	if g.panicVal != nil {
		panic(g.panicVal)
	}
	if g.err != nil {
		return nil, g.err
	}
	list, err := f.Registry.ListServices(opts...)
	if g.late > 0 {
		time.Sleep(g.late)
	}
	return list, err
}

// listCalls counts the ListServices calls.
func (f *faultRegistry) listCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

// Watch opens a stream of the wrapped registry behind the watch faults. It
// records a violation if a stream is still open: the cache holds one stream
// at a time.
func (f *faultRegistry) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var o registry.WatchOptions
	for _, opt := range opts {
		opt(&o)
	}
	f.mu.Lock()
	f.watches++
	f.watchStarts = append(f.watchStarts, time.Now())
	wf, release := f.watch, f.release
	if w, ok := f.watchFor[o.Service]; ok && o.Service != "" {
		wf = w
	}
	f.mu.Unlock()
	if wf.watchHang {
		var done <-chan struct{}
		if o.Context != nil {
			done = o.Context.Done()
		}
		select {
		case <-release:
		case <-done:
			return nil, o.Context.Err()
		}
	}
	if wf.watchPanic != nil {
		panic(wf.watchPanic)
	}
	if wf.watchErr != nil {
		return nil, wf.watchErr
	}
	if wf.watchNil {
		return nil, nil
	}
	inner, err := f.Registry.Watch(opts...)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.streams++
	f.open++
	w := &faultWatcher{f: f, inner: inner, service: o.Service, stopped: make(chan struct{})}
	f.live[w] = struct{}{}
	f.mu.Unlock()
	return w, nil
}

// faultWatcher is one stream behind the watch faults. Next is called by one
// goroutine at a time (the cache's watcher), so its own fields need no lock.
type faultWatcher struct {
	f       *faultRegistry
	inner   registry.Watcher
	service string // the service watched, or "" for all
	read    bool   // Next was called: the cache reads this stream
	stopped chan struct{}
	once    sync.Once

	delivered int                // real events delivered
	pending   []*registry.Result // ready to deliver, in order
	held      []*registry.Result // held back by reorder
	history   []*registry.Result // real events delivered, newest last, for stale replays
}

func (w *faultWatcher) Next() (*registry.Result, error) {
	f := w.f
	if !w.read && w.service == "" {
		f.mu.Lock()
		select {
		case <-w.stopped:
		default:
			w.read = true
			if f.reading > 0 {
				f.violatedLocked("a watch stream was read while %d other(s) were open and read", f.reading)
			}
			f.reading++
			f.maxOpen = max(f.maxOpen, f.reading)
		}
		f.mu.Unlock()
	}
	for {
		f.mu.Lock()
		wf, release := f.watch, f.release
		if sf, ok := f.watchFor[w.service]; ok && w.service != "" {
			wf = sf
		}
		f.mu.Unlock()
		if wf.nextPanic != nil {
			panic(wf.nextPanic)
		}
		if wf.nextHang {
			select {
			case <-w.stopped:
				return nil, registry.ErrWatcherStopped
			case <-release:
				continue
			}
		}
		if len(w.pending) > 0 {
			res := w.pending[0]
			w.pending = w.pending[1:]
			return res, nil
		}
		if wf.breakErr != nil && w.delivered >= wf.breakAfter {
			return nil, wf.breakErr
		}
		res, err := w.inner.Next()
		if err != nil {
			return nil, err
		}
		w.delivered++
		f.mu.Lock()
		f.received++
		f.mu.Unlock()
		if wf.reorder > 1 {
			w.held = append(w.held, res)
			if len(w.held) < wf.reorder {
				continue
			}
			slices.Reverse(w.held)
			for _, h := range w.held {
				w.queue(h, wf)
			}
			w.held = nil
			continue
		}
		w.queue(res, wf)
	}
}

// queue makes res ready for delivery with the event faults of wf.
func (w *faultWatcher) queue(res *registry.Result, wf watchFault) {
	if wf.nilEvents {
		name := "svc-0"
		if res != nil && res.Service != nil {
			name = res.Service.Name
		}
		w.pending = append(w.pending,
			nil, // Next returns (nil, nil)
			&registry.Result{Action: "update"},
			&registry.Result{Action: "update", Service: &registry.Service{Name: name, Version: "1"}},
			&registry.Result{Action: "create", Service: &registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{nil}}},
			&registry.Result{Action: "delete", Service: &registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{nil, nil}}},
			&registry.Result{Action: "update", Service: &registry.Service{Version: "1", Nodes: []*registry.Node{{Id: "ghost"}}}},
			&registry.Result{Action: "expire", Service: &registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{{Id: "ghost"}}}},
		)
	}
	for i := 0; i <= wf.duplicate; i++ {
		w.pending = append(w.pending, res)
	}
	if wf.stale > 0 && len(w.history) >= wf.stale {
		w.pending = append(w.pending, w.history[len(w.history)-wf.stale])
	}
	w.history = append(w.history, res)
	if len(w.history) > 64 {
		w.history = slices.Clone(w.history[len(w.history)-32:])
	}
}

// Stop stops the wrapped stream; with stopPanic it then panics, as a
// watcher that closes a channel twice does.
func (w *faultWatcher) Stop() {
	first := false
	w.once.Do(func() {
		first = true
		close(w.stopped)
		w.f.mu.Lock()
		delete(w.f.live, w)
		w.f.open--
		if w.read {
			w.f.reading--
		}
		w.f.mu.Unlock()
	})
	w.inner.Stop()
	w.f.mu.Lock()
	p := w.f.watch.stopPanic
	w.f.mu.Unlock()
	if first && p != nil {
		panic(p)
	}
}

// faultReport is a snapshot of what the registry saw.
type faultReport struct {
	totalCalls int
	maxCalls   int // the most GetService calls for one service
	maxService string
	minGap     time.Duration // the shortest gap between two calls for one service; -1 if none
	watches    int
	received   int
	streams    int
	maxOpen    int
	open       int
	violations int
	first      []string
}

func (f *faultRegistry) report() faultReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := faultReport{
		totalCalls: f.totalCalls, minGap: -1, watches: f.watches, received: f.received, streams: f.streams,
		maxOpen: f.maxOpen, open: f.open, violations: f.violations, first: slices.Clone(f.firstFaults),
	}
	for name, st := range f.calls {
		if st.calls > r.maxCalls || (st.calls == r.maxCalls && name < r.maxService) {
			r.maxCalls, r.maxService = st.calls, name
		}
		if st.calls > 1 && (r.minGap < 0 || st.minGap < r.minGap) {
			r.minGap = st.minGap
		}
	}
	return r
}

func (f *faultRegistry) callsFor(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.calls[name]; st != nil {
		return st.calls
	}
	return 0
}

// checkBound fails t unless every service saw at most
// 1 + elapsed/interval registry calls, never two at once and never two
// within the interval, and the cache never held two streams at once.
func (f *faultRegistry) checkBound(t testing.TB, elapsed time.Duration) {
	t.Helper()
	r := f.report()
	f.mu.Lock()
	interval := f.interval
	f.mu.Unlock()
	if r.violations > 0 {
		t.Errorf("%d registry-call violations; the first: %q", r.violations, r.first)
	}
	if interval > 0 {
		bound := 2 * (1 + int(elapsed/interval))
		if r.maxCalls > bound {
			t.Errorf("service %q: %d registry calls in %v, over the bound 2·(1 + elapsed/interval) = %d",
				r.maxService, r.maxCalls, elapsed, bound)
		}
	}
	if r.maxOpen > 1 {
		t.Errorf("%d watch streams were open at once", r.maxOpen)
	}
}
