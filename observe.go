package cache

import (
	"fmt"
	"time"

	log "go-micro.dev/v4/logger"
)

// EventKind names a state change that a WithObserver callback is told of.
type EventKind int

const (
	// ServiceStale: a service's data turned stale and was served as such,
	// or an event invalidated it.
	ServiceStale EventKind = iota + 1
	// RefreshFailed: a service's refreshes started failing.
	RefreshFailed
	// RefreshRecovered: a failing service's refresh got an answer again.
	RefreshRecovered
	// ThrottleStarted: a lookup of a service was first held back by the
	// retry interval, with nothing usable to serve.
	ThrottleStarted
	// WatchDisconnected: the watch stream was lost.
	WatchDisconnected
	// WatchReconnected: the watch stream is back after a loss.
	WatchReconnected
	// LastKnownNodesKept: WithLastKnownNodes kept a service's nodes after
	// the registry showed none.
	LastKnownNodesKept
	// LastKnownNodesReleased: the registry shows nodes again.
	LastKnownNodesReleased
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
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one state change of the cache.
type Event struct {
	Kind EventKind
	// Service is the service concerned; empty for watch events.
	Service string
	// Err is the failure behind RefreshFailed and WatchDisconnected.
	Err error
	// Time is when the cache saw the change.
	Time time.Time
}

// observerQueue bounds the events waiting for a slow observer; more are
// dropped and counted in Stats.ObserverDropped.
const observerQueue = 256

// outbox collects log lines and events while cache.mu is held, to be
// written and delivered after it is released.
type outbox struct {
	logs   []logLine
	events []Event
}

type logLine struct {
	level  log.Level
	format string
	args   []any
}

func (o *outbox) log(level log.Level, format string, args ...any) {
	o.logs = append(o.logs, logLine{level, format, args})
}

func (o *outbox) event(kind EventKind, service string, err error, at time.Time) {
	o.events = append(o.events, Event{Kind: kind, Service: service, Err: err, Time: at})
}

// flush writes the log lines and hands the events to the observer. It must
// be called without cache.mu held.
func (c *cache) flush(o *outbox) {
	for _, line := range o.logs {
		c.opts.Logger.Logf(line.level, line.format, line.args...)
	}
	if c.opts.Observer == nil || len(o.events) == 0 {
		return
	}
	c.startObserver()
	for _, ev := range o.events {
		select {
		case c.events <- ev:
		default:
			c.stats.observerDropped.Add(1)
		}
	}
}

// startObserver starts the goroutine that calls the observer, once, and
// never after Stop. Events sent before it starts wait in the queue.
func (c *cache) startObserver() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.observing || c.stopped {
		return
	}
	c.observing = true
	c.wg.Add(1)
	go c.observe()
}

// observe calls the observer for each event until Stop. It runs apart from
// every lookup, so a slow observer only delays other events, and a
// panicking one is recovered and logged once.
func (c *cache) observe() {
	defer c.wg.Done()
	logged := false
	for {
		select {
		case <-c.ctx.Done():
			return
		case ev := <-c.events:
			if r := c.callObserver(ev); r != nil && !logged {
				logged = true
				c.opts.Logger.Logf(log.ErrorLevel, "regcache: observer panicked (logged once): %v", r)
			}
		}
	}
}

func (c *cache) callObserver(ev Event) (recovered any) {
	defer func() { recovered = recover() }()
	c.opts.Observer(ev)
	return nil
}
