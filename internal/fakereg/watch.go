package fakereg

import (
	"slices"
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
