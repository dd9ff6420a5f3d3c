package cache

import (
	"time"

	"github.com/regcache/cache/internal/eject"
)

// SelectorStats is a view of the passive health of a selector made by
// NewSelector, at one moment, as its Stats method (see Selector) returns
// it. The counters are cumulative.
type SelectorStats struct {
	// Failures counts the attempts reported to Mark that failed to reach
	// their node: the client could not connect, the connection broke, or
	// the attempt timed out.
	Failures uint64 `json:"failures"`
	// Ejections counts the ejections of nodes on their service's cached
	// list, each ejection in a row included (a node ejected while off the
	// list counts when it joins it). Failures of nodes off the list
	// (client.WithAddress calls) change only what Next would skip.
	Ejections uint64 `json:"ejections"`
	// Refused counts the nodes kept in rotation because the service had
	// its maximum share of nodes ejected already: once per node and run
	// of failures, however many failures the run has.
	Refused uint64 `json:"refused"`
	// Readmitted counts the listed nodes that were reached again after
	// their ejection ended.
	Readmitted uint64 `json:"readmitted"`
	// Ignored counts the picks that handed out an ejected node because
	// every node the caller could pick was ejected.
	Ignored uint64 `json:"ignored"`
	// MassLosses counts the mass losses that put nodes in limbo (see
	// WithLimbo): one per service and loss, however many nodes.
	MassLosses uint64 `json:"mass_losses"`
	// LimboNodes is the number of nodes in limbo now: dropped by the
	// registry in a mass loss, still handed out by the selector.
	LimboNodes int `json:"limbo_nodes"`

	// Limbo has one row per node in limbo now, by service and node.
	Limbo []LimboNode `json:"limbo,omitempty"`

	// Ejected has one row per node ejected now, by service and node, for
	// the nodes of each service's cached list; nodes that failed off the
	// list (client.WithAddress calls) are not shown.
	Ejected []EjectedNode `json:"ejected,omitempty"`

	// Cache is the Stats of the Cache the selector reads.
	Cache Stats `json:"cache,omitzero"`
}

// EjectedNode describes one ejected node.
type EjectedNode struct {
	Service string `json:"service"`
	Id      string `json:"id"` // the node's Id, or its address if it has none
	Address string `json:"address"`
	// Ejections is the number of ejections in a row, this one included;
	// each adds the base ejection time, up to the maximum.
	Ejections int `json:"ejections"`
	// Remaining is the time left until the node is readmitted on trial.
	Remaining time.Duration `json:"remaining_seconds"`
	// Reason is the error of the failure that ejected it, as go-micro's
	// client reported it to Mark, cut at 256 bytes.
	Reason string `json:"reason"`
}

// LimboNode describes one node in limbo: dropped by the registry in a mass
// loss, still handed out by the selector (see WithLimbo).
type LimboNode struct {
	Service string `json:"service"`
	Id      string `json:"id"` // the node's Id, or its address if it has none
	Address string `json:"address"`
	// Age is how long it has been in limbo.
	Age time.Duration `json:"age_seconds"`
	// Remaining is the time left until the limbo's bound ends it.
	Remaining time.Duration `json:"remaining_seconds"`
	// Reached is set once an attempt reached it in limbo: every call may
	// take it since, where before one call at a time did.
	Reached bool `json:"reached"`
	// Reason names the loss that put it in limbo.
	Reason string `json:"reason"`
}

// selectorStats returns the view of the passive health figures h, with
// cs as the Stats of the cache.
func selectorStats(h eject.Stats, cs Stats) SelectorStats {
	st := SelectorStats{
		Failures:   h.Failures,
		Ejections:  h.Ejections,
		Refused:    h.Refused,
		Readmitted: h.Readmitted,
		Ignored:    h.Ignored,
		MassLosses: h.MassLosses,
		LimboNodes: h.LimboNodes,
		Cache:      cs,
	}
	if len(h.Limbo) > 0 {
		st.Limbo = make([]LimboNode, len(h.Limbo))
		for i, l := range h.Limbo {
			st.Limbo[i] = LimboNode(l)
		}
	}
	if len(h.Ejected) > 0 {
		st.Ejected = make([]EjectedNode, len(h.Ejected))
		for i, e := range h.Ejected {
			st.Ejected[i] = EjectedNode(e)
		}
	}
	return st
}
