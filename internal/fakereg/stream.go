package fakereg

import (
	"slices"
	"sync"

	"go-micro.dev/v4/registry"
)

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
