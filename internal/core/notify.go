package core

import "time"

// EventKind names a state change that the cache's observer is told of. The
// values are those of the root package's EventKind.
type EventKind int

const (
	ServiceStale EventKind = iota + 1
	RefreshFailed
	RefreshRecovered
	ThrottleStarted
	WatchDisconnected
	WatchReconnected
	LastKnownNodesKept
	LastKnownNodesReleased
	RegistryDown
	RegistryUp
)

// Event is one state change, for the observer.
type Event struct {
	Kind    EventKind
	Service string
	Err     error
	Time    time.Time
}

// emit queues ev for the observer, in the order of the changes. After
// Stop it is dropped and counted.
func (k *Core) emit(ev Event) {
	if !k.cfg.Observe {
		return
	}
	if k.stopped {
		k.Stats.ObserverDropped.Add(1)
		return
	}
	k.rd.Events = append(k.rd.Events, ev)
}
