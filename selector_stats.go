package cache

import (
	"sort"
	"time"
)

// SelectorStats is a view of the passive health of a selector made by
// NewSelector, at one moment. The counters are cumulative.
//
// The selector returned by NewSelector has a Stats method; reach it from a
// selector.Selector with a type assertion:
//
//	if s, ok := sel.(interface{ Stats() cache.SelectorStats }); ok {
//		fmt.Printf("%+v\n", s.Stats())
//	}
type SelectorStats struct {
	// Failures counts the attempts reported to Mark that failed to reach
	// their node: the client could not connect, the connection broke, or
	// the attempt timed out.
	Failures uint64
	// Ejections counts the ejections of nodes on their service's cached
	// list, each ejection in a row included (a node ejected while off the
	// list counts when it joins it). Failures of nodes off the list
	// (client.WithAddress calls) change only what Next would skip.
	Ejections uint64
	// Refused counts the nodes kept in rotation because the service had
	// its maximum share of nodes ejected already: once per node and run
	// of failures, however many failures the run has.
	Refused uint64
	// Readmitted counts the listed nodes that were reached again after
	// their ejection ended.
	Readmitted uint64
	// Ignored counts the picks that handed out an ejected node because
	// every node the caller could pick was ejected.
	Ignored uint64

	// Ejected has one row per node ejected now, by service and node, for
	// the nodes of each service's cached list; nodes that failed off the
	// list (client.WithAddress calls) are not shown.
	Ejected []EjectedNode

	// Cache is the Stats of the Cache the selector reads.
	Cache Stats
}

// EjectedNode describes one ejected node.
type EjectedNode struct {
	Service string
	Id      string // the node's Id, or its address if it has none
	Address string
	// Ejections is the number of ejections in a row, this one included;
	// each adds the base ejection time, up to the maximum.
	Ejections int
	// Remaining is the time left until the node is readmitted on trial.
	Remaining time.Duration
	// Reason is the error of the failure that ejected it, as go-micro's
	// client reported it to Mark, cut at 256 bytes.
	Reason string
}

// stats returns the view of p at now, with cs as the cache's.
func (p *passive) stats(now time.Time, cs Stats) SelectorStats {
	st := SelectorStats{
		Failures:   p.failures.Load(),
		Ejections:  p.ejections.Load(),
		Refused:    p.refused.Load(),
		Readmitted: p.readmitted.Load(),
		Ignored:    p.ignored.Load(),
		Cache:      cs,
	}
	t := p.nanos(now)
	p.each(func(h *serviceHealth) {
		if p.held != nil {
			h.observe(p.held(h.name)) // rows for the list as it is now
		}
		h.mu.Lock()
		h.nodes.Range(func(_, v any) bool {
			for _, nh := range v.(*nodeSet).nodes {
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
		h.mu.Unlock()
	})
	sort.Slice(st.Ejected, func(i, j int) bool {
		a, b := st.Ejected[i], st.Ejected[j]
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		if a.Id != b.Id {
			return a.Id < b.Id
		}
		return a.Address < b.Address
	})
	return st
}
