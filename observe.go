package cache

import (
	"fmt"
	"time"

	"github.com/regcache/cache/internal/gid"
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
	// RegistryDown: refreshes of different services failed in a row; the
	// registry is held to be down, and probed once per probe interval.
	RegistryDown
	// RegistryUp: the registry answered again after RegistryDown.
	RegistryUp
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

// outbox collects log lines while cache.mu is held, to be written after it
// is released. Observer events are queued under the lock instead (see
// emitLocked), so that they keep the order of the changes they tell.
type outbox struct {
	logs []logLine
}

type logLine struct {
	level  log.Level
	format string
	args   []any
}

func (o *outbox) log(level log.Level, format string, args ...any) {
	o.logs = append(o.logs, logLine{level, format, args})
}

// logf writes one log line. Every log line of the cache goes through logf
// or flush, called from the code that logs: go-micro's logger names the
// caller two frames above its Logf (its CallerSkipCount of 2, set for its
// package function logger.Logf), which is then that code, not go-micro's
// or the runtime's.
func (c *cache) logf(level log.Level, format string, args ...any) {
	c.opts.Logger.Logf(level, format, args...)
}

// flush writes the log lines. It must be called without cache.mu held. The
// caller the logger shows is flush's: the code that made the changes.
func (c *cache) flush(o *outbox) {
	for _, line := range o.logs {
		c.opts.Logger.Logf(line.level, line.format, line.args...)
	}
	o.logs = o.logs[:0]
}

// emitLocked queues ev for the observer. It runs under cache.mu, where the
// change it tells was made, so two changes of one service reach the
// observer in the order they were made. It never blocks: an event with no
// room in the queue, or one that comes after Stop, is dropped and counted.
func (c *cache) emitLocked(ev Event) {
	if c.opts.Observer == nil {
		return
	}
	if c.stopped {
		c.stats.observerDropped.Add(1)
		return
	}
	if !c.observing {
		c.observing = true
		go c.observe()
	}
	select {
	case c.events <- ev:
	default:
		c.stats.observerDropped.Add(1)
	}
}

// observe calls the observer for each event until Stop, then for the
// events still queued. It runs apart from every lookup, so a slow observer
// only delays other events, and a panicking one is recovered and logged
// once. Stop waits for it through observerEnd rather than the WaitGroup, so
// that an observer that calls Stop does not wait for itself.
func (c *cache) observe() {
	defer close(c.observerEnd)
	c.observerGID.Store(gid.Current())
	logged := false
	call := func(ev Event) {
		if r := c.callObserver(ev); r != nil && !logged {
			logged = true
			c.logf(log.ErrorLevel, "regcache: observer panicked (logged once): %v", r)
		}
	}
	for {
		select {
		case ev := <-c.events:
			call(ev)
		case <-c.ctx.Done():
			for {
				select {
				case ev := <-c.events:
					call(ev)
				default:
					return
				}
			}
		}
	}
}

func (c *cache) callObserver(ev Event) (recovered any) {
	defer func() { recovered = recover() }()
	c.opts.Observer(ev)
	return nil
}
