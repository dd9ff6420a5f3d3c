package cache

import (
	"container/heap"
	"time"

	"go-micro.dev/v4/registry"
)

// How passive health state follows the cached node list, and stays
// bounded: it is matched against the list when that changes, the states
// off the list are capped, and idle state is swept. (It is also dropped
// when a node has nothing left to remember; see reached.)

// observe matches the state against svcs, the service's cached node list,
// when the list is a new one. Select calls it; a failure Mark matches too,
// so that the share of ejected nodes is counted on the list even before
// any Select saw it.
func (h *serviceHealth) observe(svcs []*registry.Service, now time.Time) {
	if len(svcs) == 0 || h.seen.Load() == &svcs[0] {
		return
	}
	h.mu.Lock()
	if !h.gone.Load() {
		h.matchLocked(svcs, now)
		if h.count == 0 { // every node with state left the list
			h.dropLocked()
		}
	}
	h.mu.Unlock()
}

// matchLocked indexes svcs, if it is a new list, and marks each node state
// listed or not: the state of a node that left the list goes with it (an
// instance that comes back is a new one), one that failed off the list
// and appeared on it counts from now on, and the rest stay off the list.
// It costs a pass over the list and the states, once per list. h.mu is
// held.
func (h *serviceHealth) matchLocked(svcs []*registry.Service, now time.Time) {
	if len(svcs) == 0 || h.seen.Load() == &svcs[0] {
		return
	}
	h.seen.Store(&svcs[0])
	index := make(map[string]string, len(h.index))
	for _, s := range svcs {
		for _, n := range s.Nodes {
			index[nodeKey(n)] = n.Address
		}
	}
	h.index, h.listed = index, len(index)
	for _, nh := range h.ends {
		nh.heapIndex = -1
	}
	h.ends = h.ends[:0]
	t := now.UnixNano()
	var off []string
	var left []*nodeHealth
	h.nodes.Range(func(_, v any) bool {
		nh := v.(*nodeHealth)
		addr, ok := index[nh.key]
		was := nh.listed
		nh.listed = ok && addr == nh.address
		switch {
		case was && !nh.listed:
			left = append(left, nh)
		case !nh.listed:
			off = append(off, nh.key)
		case nh.ejectedAt(t):
			h.ends = append(h.ends, nh)
		}
		return true
	})
	for _, nh := range left {
		h.dropNodeLocked(nh)
	}
	for i, nh := range h.ends {
		nh.heapIndex = i
	}
	heap.Init(&h.ends)
	h.offList = h.offList[:0]
	for _, key := range off {
		h.offListLocked(h.loadLocked(key))
	}
}

// maybeSweep sweeps every service's idle state if the time has come.
func (p *passive) maybeSweep(now time.Time, cfg *healthConfig) {
	next := p.nextSweep.Load()
	if now.UnixNano() < next || !p.nextSweep.CompareAndSwap(next, now.Add(cfg.baseEjection).UnixNano()) {
		return
	}
	p.each(func(h *serviceHealth) { h.sweep(now, cfg) })
}

// sweep forgets the nodes that have been neither ejected nor failing for
// the maximum ejection time.
func (h *serviceHealth) sweep(now time.Time, cfg *healthConfig) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone.Load() {
		return
	}
	var idle []*nodeHealth
	h.nodes.Range(func(_, v any) bool {
		nh := v.(*nodeHealth)
		last := nh.lastFail
		if until := time.Unix(0, nh.until.Load()); until.After(last) {
			last = until
		}
		if now.Sub(last) >= cfg.maxEjection {
			idle = append(idle, nh)
		}
		return true
	})
	for _, nh := range idle {
		h.dropNodeLocked(nh)
	}
	if h.count == 0 {
		h.dropLocked()
	}
}
