package eject

import (
	"sort"
	"time"
)

// Stats is a view of passive health at one moment, which the selector
// shows its users as its SelectorStats, whose fields say what each counts.
// The counters are cumulative.
type Stats struct {
	// Failures counts the failures to reach a node reported to Mark.
	Failures uint64
	// Ejections counts the ejections of listed nodes.
	Ejections uint64
	// Refused counts the listed nodes kept in rotation by the share of
	// ejected nodes, once per node and run of failures.
	Refused uint64
	// Readmitted counts the listed nodes reached again after their
	// ejection ended.
	Readmitted uint64
	// Ignored counts the picks of an ejected node made because no other
	// node could be picked.
	Ignored uint64
	// LimboNodes is the number of nodes in limbo now.
	LimboNodes int
	// MassLosses counts the mass losses that put nodes in limbo, one
	// per service and loss.
	MassLosses uint64
	// Limbo has one row per node in limbo now, sorted as Ejected; nil
	// when there is none.
	Limbo []LimboNode
	// Ejected has one row per listed node ejected now, sorted by
	// service, Id and address; nil when there is none.
	Ejected []EjectedNode
}

// EjectedNode describes one ejected node. Its fields are those of the
// selector's own EjectedNode, in the same order, so that one converts to
// the other.
type EjectedNode struct {
	Service string
	Id      string // the node's Id, or its address if it has none
	Address string
	// Ejections is the number of ejections in a row, this one included.
	Ejections int
	// Remaining is the time left until the node is readmitted on trial.
	Remaining time.Duration
	// Reason is the error of the failure that ejected it, cut at 256
	// bytes.
	Reason string
}

// LimboNode describes one node in limbo, with the fields of the
// selector's own LimboNode, in the same order.
type LimboNode struct {
	Service string
	Id      string
	Address string
	// Age is how long it has been in limbo.
	Age time.Duration
	// Remaining is the time left until the limbo's bound ends it.
	Remaining time.Duration
	// Reached is set once an attempt reached it in limbo.
	Reached bool
	// Reason names the loss that put it in limbo.
	Reason string
}

// Stats returns the view of p now. The rows are those of the lists the
// cache holds now, whether or not a Select has met them.
func (p *Health) Stats() Stats {
	return p.stats(p.now())
}

// stats returns the view of p at now.
func (p *Health) stats(now time.Time) Stats {
	st := Stats{
		Failures:   p.failures.Load(),
		Ejections:  p.ejections.Load(),
		Refused:    p.refused.Load(),
		Readmitted: p.readmitted.Load(),
		Ignored:    p.ignored.Load(),
		MassLosses: p.massLosses.Load(),
	}
	t := p.nanos(now)
	p.each(func(h *serviceHealth) {
		if p.held != nil {
			h.observe(p.held(h.name)) // rows for the list as it is now
		}
		h.mu.Lock()
		if !h.gone.Load() {
			h.expireLimboLocked(now)
			st.LimboNodes += h.inLimbo
		}
		h.nodes.Range(func(_, v any) bool {
			for _, nh := range v.(*nodeSet).nodes {
				if l := nh.limbo; l != nil {
					st.Limbo = append(st.Limbo, LimboNode{
						Service: h.name, Id: nh.key, Address: nh.address,
						Age: now.Sub(l.since), Remaining: time.Duration(nh.limboEnd.Load() - t),
						Reached: nh.state() == stateLimboReached, Reason: l.reason,
					})
				}
				if nh.listed && nh.ejectedAt(t) {
					st.Ejected = append(st.Ejected, EjectedNode{
						Service: h.name, Id: nh.key, Address: nh.address,
						Ejections: nh.streak, Remaining: time.Duration(nh.until.Load() - t),
						Reason: nh.reason,
					})
				}
			}
			return true
		})
		h.unlock()
	})
	sort.Slice(st.Ejected, func(i, j int) bool {
		a, b := st.Ejected[i], st.Ejected[j]
		return less(a.Service, a.Id, a.Address, b.Service, b.Id, b.Address)
	})
	sort.Slice(st.Limbo, func(i, j int) bool {
		a, b := st.Limbo[i], st.Limbo[j]
		return less(a.Service, a.Id, a.Address, b.Service, b.Id, b.Address)
	})
	return st
}

// less orders rows by service, Id and address.
func less(s1, id1, a1, s2, id2, a2 string) bool {
	if s1 != s2 {
		return s1 < s2
	}
	if id1 != id2 {
		return id1 < id2
	}
	return a1 < a2
}
