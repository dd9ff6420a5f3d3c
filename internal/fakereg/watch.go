package fakereg

import (
	"slices"
	"sync"
	"time"

	"go-micro.dev/v4/registry"
)

// WatchFault is what the registry does to Watch calls, to the streams they
// return and to the events of those streams. A stream reads the fault in
// force at each Next, so that a fault set later acts on the streams open
// already.
type WatchFault struct {
	// Watch itself.
	WatchErr   error // Watch fails with it
	WatchPanic any   // Watch panics with it
	WatchNil   bool  // Watch returns a nil watcher and no error
	// WatchHang blocks Watch until its WatchContext is done or the test
	// calls ReleaseHangs.
	WatchHang bool

	// The stream.
	BreakErr error // Next fails with it, once BreakAfter events were delivered
	// BreakAfter is how many events each stream delivers before it fails
	// with BreakErr; 0 fails it at the first Next.
	BreakAfter int
	NextPanic  any // Next panics with it
	// NextHang makes Next block, ignoring events, until the stream is
	// stopped or the test calls ReleaseHangs: go-micro's etcd plugin does
	// this through an etcd outage instead of failing.
	NextHang bool
	// StopPanic makes every Stop stop the stream, then panic with it, as
	// a watcher that closes a channel twice does.
	StopPanic any

	// The events: they act on the events taken from a stream's queue.
	Duplicate int // each event is delivered 1 + Duplicate times
	// Reorder holds events back and delivers them in reversed batches of
	// this size; a batch is delivered only when it is full.
	Reorder int
	// Stale replays, after each event, the event delivered Stale events
	// before it: old news, such as the create of a node deleted since.
	Stale int
	// NilEvents precedes each event with (nil, nil), an event with a nil
	// Service, one whose Service has nil Nodes, one whose nodes are all
	// nil, one with an empty service name and one with an unknown action.
	NilEvents bool
}

// SetWatchFault sets the faults of Watch, of the streams and of their
// events, for every watch without faults of its own.
func (r *Registry) SetWatchFault(w WatchFault) {
	r.mu.Lock()
	r.watch = w
	r.mu.Unlock()
}

// SetWatchFaultFor sets the faults of the watches of service name (those
// of registry.WatchService), in place of SetWatchFault's.
func (r *Registry) SetWatchFaultFor(name string, w WatchFault) {
	r.mu.Lock()
	r.watchFor[name] = w
	r.mu.Unlock()
}

// watchFaultLocked is the fault of a watch of service ("" for all).
func (r *Registry) watchFaultLocked(service string) WatchFault {
	if w, ok := r.watchFor[service]; ok && service != "" {
		return w
	}
	return r.watch
}

// WatchCall is the record of one Watch call.
type WatchCall struct {
	At      time.Time
	Options registry.WatchOptions
}

// Watch waits at a gate of HoldWatch, is recorded, applies the watch fault
// (a hang, a panic, an error, a nil watcher), and returns a new Stream of
// the service that registry.WatchService names, or of every service: with
// Wrap, one in front of a watcher of the registry wrapped.
func (r *Registry) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var o registry.WatchOptions
	for _, opt := range opts {
		opt(&o)
	}
	r.mu.Lock()
	gate := gateFor(r.watchGates, "")
	r.mu.Unlock()
	if gate != nil {
		<-gate.ch
	}
	r.mu.Lock()
	r.watchCalls = append(r.watchCalls, WatchCall{At: time.Now(), Options: o})
	wf := r.watchFaultLocked(o.Service)
	var release chan struct{}
	if wf.WatchHang {
		release = r.releaseLocked()
	}
	r.mu.Unlock()
	if wf.WatchHang {
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
	if wf.WatchPanic != nil {
		panic(wf.WatchPanic)
	}
	if wf.WatchErr != nil {
		return nil, wf.WatchErr
	}
	if wf.WatchNil {
		return nil, nil
	}
	var inner registry.Watcher
	if r.inner != nil {
		w, err := r.inner.Watch(opts...)
		if err != nil {
			return nil, err
		}
		inner = w
	}
	s := &Stream{
		r:       r,
		inner:   inner,
		service: o.Service,
		signal:  make(chan struct{}, 1),
		stopped: make(chan struct{}),
		cut:     make(chan struct{}),
		broken:  make(chan struct{}),
	}
	r.mu.Lock()
	s.reuse = r.reuse
	r.streams = append(r.streams, s)
	r.watchers[s] = struct{}{}
	r.open++
	r.mu.Unlock()
	return s, nil
}

// WatchCalls returns the record of every Watch call, in order.
func (r *Registry) WatchCalls() []WatchCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.watchCalls)
}

// WatchTimes returns when each Watch call was made, in order.
func (r *Registry) WatchTimes() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := make([]time.Time, len(r.watchCalls))
	for i, w := range r.watchCalls {
		ts[i] = w.At
	}
	return ts
}

// Stream returns the newest stream handed out, or nil.
func (r *Registry) Stream() *Stream {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.streams) == 0 {
		return nil
	}
	return r.streams[len(r.streams)-1]
}

// Streams returns every stream handed out, in order.
func (r *Registry) Streams() []*Stream {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.streams)
}

// OpenStreams counts the streams neither stopped nor broken (Break).
func (r *Registry) OpenStreams() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.streams {
		if !s.Stopped() && !s.isBroken() {
			n++
		}
	}
	return n
}

// Cut ends every stream that receives the registry's events, as a lost
// connection does (see Stream.Cut).
func (r *Registry) Cut() {
	r.mu.Lock()
	live := make([]*Stream, 0, len(r.watchers))
	for s := range r.watchers {
		live = append(live, s)
	}
	r.mu.Unlock()
	for _, s := range live {
		s.Cut()
	}
}

// Stream is one watch stream: a registry.Watcher whose events come from
// Register, Deregister and Emit, queued without bound, and from the test
// (Send, Offer), or with Wrap from a watcher of the registry wrapped, with
// the registry's WatchFault applied. Only one goroutine at a time calls
// Next, as the cache's watcher does.
type Stream struct {
	r       *Registry
	inner   registry.Watcher // with Wrap: where the events come from
	service string           // the service watched; "": every service
	reuse   bool             // see SetReuseEvents
	signal  chan struct{}
	stopped chan struct{} // closed by the first Stop
	cut     chan struct{} // closed by Cut
	broken  chan struct{} // closed by Break

	stopOnce, cutOnce, breakOnce sync.Once

	mu        sync.Mutex
	queue     []queued
	failWith  error // set by Break
	panicWith any
	empty     bool
	stops     int

	// Read by Next only.
	read      bool               // Next was called: the cache reads this stream
	last      *registry.Result   // the event returned last, for reuse
	delivered int                // events taken from the queue
	pending   []*registry.Result // ready to deliver, in order
	held      []*registry.Result // held back by Reorder
	history   []*registry.Result // events taken, newest last, for Stale
}

// queued is an event waiting in a stream; taken, if not nil, is closed
// when Next takes it.
type queued struct {
	res   *registry.Result
	taken chan struct{}
}

var _ registry.Watcher = (*Stream)(nil)

// Service is the service the stream watches, "" for every service.
func (s *Stream) Service() string { return s.service }

func (s *Stream) push(res *registry.Result, taken chan struct{}) {
	s.mu.Lock()
	s.queue = append(s.queue, queued{res, taken})
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// Send hands the stream an event, as it is, and returns once the cache's
// watcher has taken it (Next returned it, or held it back for a fault); in
// a synctest bubble, synctest.Wait then means it is applied. It panics if
// the stream ends first: with the old fakes such a test hung.
func (s *Stream) Send(action string, service *registry.Service) {
	if !s.Offer(&registry.Result{Action: action, Service: service}) {
		panic("fakereg: Send: the stream ended before its watcher took the event")
	}
}

// Offer hands the stream res, as it is, and waits until the watcher takes
// it or the stream ends (stopped, cut or broken); it reports whether the
// watcher took it.
func (s *Stream) Offer(res *registry.Result) bool {
	s.r.own("Offer")
	taken := make(chan struct{})
	s.push(res, taken)
	select {
	case <-taken:
		return true
	case <-s.stopped:
	case <-s.cut:
	case <-s.broken:
	}
	select {
	case <-taken:
		return true
	default:
		return false
	}
}

// Break makes the stream fail, as a broken connection: a Next in progress
// returns ErrWatcherStopped at once, and every later Next err. A broken
// stream no longer counts as open, nor receives the registry's events.
func (s *Stream) Break(err error) {
	s.mu.Lock()
	s.failWith = err
	s.mu.Unlock()
	s.breakOnce.Do(func() { close(s.broken) })
	s.stopInner()
	s.r.mu.Lock()
	delete(s.r.watchers, s)
	s.r.mu.Unlock()
}

// Cut ends the stream as a lost connection does: Next fails with
// ErrWatcherStopped once the events already handed to the fault (pending,
// duplicated or stale ones) are out. It still counts as open until the
// cache stops it, but receives no more of the registry's events.
func (s *Stream) Cut() {
	s.cutOnce.Do(func() { close(s.cut) })
	s.stopInner()
	s.r.mu.Lock()
	delete(s.r.watchers, s)
	s.r.mu.Unlock()
}

// PanicWith makes every later Next panic with v.
func (s *Stream) PanicWith(v any) {
	s.mu.Lock()
	s.panicWith = v
	s.mu.Unlock()
}

// SetEmpty makes every later Next return neither an event nor an error,
// at once, as a watcher that would spin.
func (s *Stream) SetEmpty(on bool) {
	s.mu.Lock()
	s.empty = on
	s.mu.Unlock()
}

// Stops counts the calls of Stop.
func (s *Stream) Stops() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stops
}

// Stopped reports whether Stop was called.
func (s *Stream) Stopped() bool {
	select {
	case <-s.stopped:
		return true
	default:
		return false
	}
}

// ended reports whether the stream was stopped, cut or broken.
func (s *Stream) ended() bool {
	select {
	case <-s.stopped:
	case <-s.cut:
	case <-s.broken:
	default:
		return false
	}
	return true
}

func (s *Stream) isBroken() bool {
	select {
	case <-s.broken:
		return true
	default:
		return false
	}
}

// Stop stops the stream: a Next in progress returns ErrWatcherStopped, and
// so does every later one. With WatchFault.StopPanic it then panics.
func (s *Stream) Stop() {
	s.mu.Lock()
	s.stops++
	s.mu.Unlock()
	s.stopOnce.Do(func() {
		// Counted as stopped before anyone can see it stopped.
		r := s.r
		r.mu.Lock()
		delete(r.watchers, s)
		r.open--
		if s.read {
			r.reading--
		}
		r.mu.Unlock()
		close(s.stopped)
	})
	s.stopInner()
	s.r.mu.Lock()
	p := s.r.watch.StopPanic
	s.r.mu.Unlock()
	if p != nil {
		panic(p)
	}
}

// Next returns the stream's next event, with the faults applied.
func (s *Stream) Next() (*registry.Result, error) {
	if s.reuse && s.last != nil {
		Scramble(s.last.Service)
		s.last = nil
	}
	s.checkReading()
	for {
		s.r.mu.Lock()
		wf := s.r.watchFaultLocked(s.service)
		var release chan struct{}
		if wf.NextHang {
			release = s.r.releaseLocked()
		}
		s.r.mu.Unlock()
		s.mu.Lock()
		empty, p, err := s.empty, s.panicWith, s.failWith
		s.mu.Unlock()
		switch {
		case empty:
			return nil, nil
		case p != nil:
			panic(p)
		case err != nil:
			return nil, err
		case wf.NextPanic != nil:
			panic(wf.NextPanic)
		}
		if wf.NextHang {
			select {
			case <-s.stopped:
				return nil, registry.ErrWatcherStopped
			case <-release:
				continue
			}
		}
		if len(s.pending) > 0 {
			res := s.pending[0]
			s.pending = s.pending[1:]
			s.last = res
			return res, nil
		}
		if wf.BreakErr != nil && s.delivered >= wf.BreakAfter {
			return nil, wf.BreakErr
		}
		res, err := s.take()
		if err != nil {
			return nil, err
		}
		s.delivered++
		s.r.mu.Lock()
		s.r.received++
		s.r.mu.Unlock()
		if wf.Reorder > 1 {
			s.held = append(s.held, res)
			if len(s.held) < wf.Reorder {
				continue
			}
			slices.Reverse(s.held)
			for _, h := range s.held {
				s.deliver(h, wf)
			}
			s.held = nil
			continue
		}
		s.deliver(res, wf)
	}
}

// checkReading records a violation if the stream, one of every service,
// is read while another such stream is open and read.
func (s *Stream) checkReading() {
	if s.read || s.service != "" {
		return
	}
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.Stopped() {
		return
	}
	s.read = true
	if r.reading > 0 {
		r.violatedLocked("a watch stream was read while %d other(s) were open and read", r.reading)
	}
	r.reading++
	r.maxOpen = max(r.maxOpen, r.reading)
}

// stopInner stops the watcher of the registry wrapped, if any, so that a
// Next in progress returns.
func (s *Stream) stopInner() {
	if s.inner != nil {
		s.inner.Stop()
	}
}

// take waits for the next queued event, or the wrapped watcher's.
func (s *Stream) take() (*registry.Result, error) {
	if s.inner != nil {
		return s.inner.Next()
	}
	for {
		if s.ended() {
			return nil, registry.ErrWatcherStopped
		}
		s.mu.Lock()
		if len(s.queue) > 0 {
			q := s.queue[0]
			s.queue[0] = queued{}
			s.queue = s.queue[1:]
			s.mu.Unlock()
			if q.taken != nil {
				close(q.taken)
			}
			return q.res, nil
		}
		s.mu.Unlock()
		select {
		case <-s.signal:
		case <-s.stopped:
			return nil, registry.ErrWatcherStopped
		case <-s.cut:
			return nil, registry.ErrWatcherStopped
		case <-s.broken:
			return nil, registry.ErrWatcherStopped
		}
	}
}

// deliver makes res ready for delivery with the event faults of wf.
func (s *Stream) deliver(res *registry.Result, wf WatchFault) {
	if wf.NilEvents {
		name := "svc-0"
		if res != nil && res.Service != nil {
			name = res.Service.Name
		}
		s.pending = append(s.pending,
			nil, // Next returns (nil, nil)
			&registry.Result{Action: "update"},
			&registry.Result{Action: "update", Service: &registry.Service{Name: name, Version: "1"}},
			&registry.Result{Action: "create", Service: &registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{nil}}},
			&registry.Result{Action: "delete", Service: &registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{nil, nil}}},
			&registry.Result{Action: "update", Service: &registry.Service{Version: "1", Nodes: []*registry.Node{{Id: "ghost"}}}},
			&registry.Result{Action: "expire", Service: &registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{{Id: "ghost"}}}},
		)
	}
	for i := 0; i <= wf.Duplicate; i++ {
		s.pending = append(s.pending, res)
	}
	if wf.Stale > 0 && len(s.history) >= wf.Stale {
		s.pending = append(s.pending, s.history[len(s.history)-wf.Stale])
	}
	s.history = append(s.history, res)
	if len(s.history) > 64 {
		s.history = slices.Clone(s.history[len(s.history)-32:])
	}
}
