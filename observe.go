package cache

import (
	"fmt"
	"reflect"
	"runtime"
	"sync/atomic"
	"time"

	log "go-micro.dev/v4/logger"

	"github.com/regcache/cache/internal/core"
)

// EventKind names a state change that a WithObserver callback is told of.
type EventKind int

const (
	// ServiceStale: a service's data turned stale and was served as such,
	// or an event invalidated it.
	ServiceStale = EventKind(core.ServiceStale)
	// RefreshFailed: a service's refreshes started failing.
	RefreshFailed = EventKind(core.RefreshFailed)
	// RefreshRecovered: a failing service's refresh got an answer again.
	RefreshRecovered = EventKind(core.RefreshRecovered)
	// ThrottleStarted: a lookup of a service was first held back by the
	// retry interval, with nothing usable to serve.
	ThrottleStarted = EventKind(core.ThrottleStarted)
	// WatchDisconnected: the watch stream was lost.
	WatchDisconnected = EventKind(core.WatchDisconnected)
	// WatchReconnected: the watch stream is back after a loss.
	WatchReconnected = EventKind(core.WatchReconnected)
	// LastKnownNodesKept: WithLastKnownNodes kept a service's nodes after
	// the registry showed none.
	LastKnownNodesKept = EventKind(core.LastKnownNodesKept)
	// LastKnownNodesReleased: the registry shows nodes again.
	LastKnownNodesReleased = EventKind(core.LastKnownNodesReleased)
	// RegistryDown: refreshes of different services failed in a row; the
	// registry is held to be down, and probed once per probe interval.
	RegistryDown = EventKind(core.RegistryDown)
	// RegistryUp: the registry answered again after RegistryDown.
	RegistryUp = EventKind(core.RegistryUp)
)

func (k EventKind) String() string {
	switch k {
	case ServiceStale:
		return "ServiceStale"
	case RefreshFailed:
		return "RefreshFailed"
	case RefreshRecovered:
		return "RefreshRecovered"
	case ThrottleStarted:
		return "ThrottleStarted"
	case WatchDisconnected:
		return "WatchDisconnected"
	case WatchReconnected:
		return "WatchReconnected"
	case LastKnownNodesKept:
		return "LastKnownNodesKept"
	case LastKnownNodesReleased:
		return "LastKnownNodesReleased"
	case RegistryDown:
		return "RegistryDown"
	case RegistryUp:
		return "RegistryUp"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one state change of the cache.
type Event struct {
	Kind EventKind
	// Service is the service concerned; empty for the watch stream and
	// the registry as a whole.
	Service string
	// Err is the failure behind RefreshFailed, RegistryDown and
	// WatchDisconnected.
	Err error
	// Time is when the cache saw the change.
	Time time.Time
}

// observerQueue bounds the events waiting for a slow observer; more are
// dropped and counted in Stats.ObserverDropped.
const observerQueue = 256

// observer delivers the core's events to a WithObserver callback, on a
// goroutine of its own, started with the first event: a slow callback
// only delays other events, and a panicking one is recovered and logged
// once.
type observer struct {
	f      func(Event)
	events chan Event
	// started is set, under the cache's mu, once the goroutine is; end is
	// closed when it returns. calling is set while the callback runs.
	started bool
	end     chan struct{}
	calling atomic.Bool
}

func (o *observer) init(f func(Event)) {
	if f != nil {
		o.f, o.events, o.end = f, make(chan Event, observerQueue), make(chan struct{})
	}
}

// queue queues ev, starting the goroutine with the first event. It runs
// under the cache's mu, where the change it tells was made, so two changes
// of one service reach the observer in the order they were made. It never
// blocks: an event with no room is dropped and counted.
func (o *observer) queue(c *cache, ev core.Event) {
	if !o.started {
		o.started = true
		go c.observe()
	}
	select {
	case o.events <- Event{Kind: EventKind(ev.Kind), Service: ev.Service, Err: ev.Err, Time: ev.Time}:
	default:
		c.stats.ObserverDropped.Add(1)
	}
}

// observe runs the observer's goroutine: one of the cache's.
func (c *cache) observe() { c.obs.run(c) }

// run calls the callback for each event until Stop, then for the events
// still queued.
func (o *observer) run(c *cache) {
	defer close(o.end)
	logged := false
	call := func(ev Event) {
		if r := o.call(ev); r != nil && !logged {
			logged = true
			c.logf(log.ErrorLevel, "regcache: observer panicked (logged once): %v", r)
		}
	}
	for {
		select {
		case ev := <-o.events:
			call(ev)
		case <-c.ctx.Done():
			for {
				select {
				case ev := <-o.events:
					call(ev)
				default:
					return
				}
			}
		}
	}
}

// call runs the callback for ev, and returns what it panicked with.
func (o *observer) call(ev Event) (recovered any) {
	o.calling.Store(true)
	defer func() {
		o.calling.Store(false)
		recovered = recover()
	}()
	o.f(ev)
	return nil
}

// self reports whether the calling goroutine runs this observer's
// callback: its stack holds call's frame while the observer is in a
// call. That is how Stop, called from the callback, tells that it must not
// wait for the observer's goroutine, without a goroutine's identity.
func (o *observer) self() bool {
	return o.calling.Load() && inObserverCall()
}

// observerCall names the frame of observer.call, in this module.
var observerCall = runtime.FuncForPC(reflect.ValueOf((*observer).call).Pointer()).Name()

// inObserverCall reports whether the calling goroutine runs an observer's
// callback.
func inObserverCall() bool {
	pcs := make([]uintptr, 512)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if f.Function == observerCall {
			return true
		}
		if !more {
			return false
		}
	}
}
