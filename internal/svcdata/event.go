package svcdata

import (
	"go-micro.dev/v4/registry"
)

// Prepared is a watch event made ready to apply to a service's data.
// Preparing reads the event and copies what it adds, which takes the most
// time of applying it, so a cache prepares it before it takes its lock.
type Prepared struct {
	// raw is the event as the watcher gave it; read only until the
	// caller is done with the event.
	raw *registry.Result
	// held is the data prepared against; Repeat is set when raw tells
	// nothing that held does not hold (see repeats), and ev is then nil.
	held   []*registry.Service
	Repeat bool
	// Prints are held's, for the data kept by a repeat: the snapshot's,
	// or made when the repeat was found by comparing with held.
	Prints Prints
	// ev is the cache's own copy of the event, sharing what equals held.
	ev *registry.Result
	// Change is set instead of ev for a change to the nodes alone of a
	// version held with prints (see changeNodes).
	Change Change
}

// Prepare prepares res against snap, the service's data (nil for none).
// With lastKnown (WithLastKnownNodes) the event is copied whole, never
// told a repeat nor a change by prints: the data kept then is not the
// registry's word alone. maps, which belongs to the caller's goroutine,
// prints the event's metadata maps; nil walks each.
//
// The event's memory is read only until Prepare returns, but for
// Prepared.Event, which reads it once more when the event was a repeat.
func Prepare(res *registry.Result, snap *Snapshot, lastKnown bool, maps *MapMemo) Prepared {
	p := Prepared{raw: res}
	if snap != nil && snap.Hold == Current {
		p.held, p.Prints = snap.Services, snap.Prints
	}
	if !lastKnown {
		if p.Prints == nil && p.held != nil && Announces(res) {
			// Left unprinted by a delete, or by a change to the
			// version: printed now, outside the lock, so that this
			// event, repeat or change, and the ones after it are told
			// by prints rather than copied.
			p.Prints = PrintsOf(p.held)
		}
		heard := eventPrints{maps: maps}
		repeat, told, version := p.Prints.repeats(res, &heard)
		if !told && repeats(p.held, res) {
			// Found by comparing with held: data that prints cannot
			// stand for.
			repeat = true
		}
		if repeat {
			p.Repeat = true
			return p
		}
		if version {
			var ok bool
			if p.Change, ok = changeNodes(p.held[0], res.Service, p.Prints, &heard); ok {
				return p
			}
		}
	}
	p.ev = copyEvent(res, p.held)
	return p
}

// Event returns the cache's own copy of the event, made now if it was a
// repeat: a refresh or a list in flight keeps it, to replay onto its
// answer, and merging applies it when it is neither a repeat nor a
// Change.
func (p *Prepared) Event() *registry.Result {
	if p.ev == nil {
		p.ev = copyEvent(p.raw, p.held)
	}
	return p.ev
}

// copyEvent copies res with cloneEvent, sharing what equals held; an event
// too large or malformed to copy is kept as one with no node, which
// cannot be applied and so invalidates the entry.
func copyEvent(res *registry.Result, held []*registry.Service) *registry.Result {
	ev, err := cloneEvent(res, held)
	if err != nil {
		return &registry.Result{Action: res.Action, Service: &registry.Service{Name: res.Service.Name}}
	}
	return ev
}

// Announces reports whether ev tells of nodes that exist: a create or
// update with nodes, which makes a service with nothing cached servable.
func Announces(ev *registry.Result) bool {
	return (ev.Action == "create" || ev.Action == "update") && len(ev.Service.Nodes) > 0
}
