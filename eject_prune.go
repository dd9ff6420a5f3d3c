package cache

import (
	"time"

	"go-micro.dev/v4/registry"
)

// How passive health state stays bounded: it is pruned against the cached
// node list when that changes, and swept when idle. (It is also dropped
// when a node has nothing left to remember; see reached.)

// observe prunes the state against svcs, the service's cached node list,
// when the list is a new one: nodes that left it are forgotten, those that
// stay keep their state.
func (h *serviceHealth) observe(svcs []*registry.Service) {
	if len(svcs) == 0 || h.seen.Load() == &svcs[0] {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone || h.seen.Load() == &svcs[0] {
		return
	}
	total := 0
	for _, s := range svcs {
		total += len(s.Nodes)
	}
	h.listed = total
	h.seen.Store(&svcs[0])
	var left []string
	for key := range *h.nodes.Load() {
		if !listed(svcs, key) {
			left = append(left, key)
		}
	}
	if len(left) > 0 {
		h.forget(left...)
		h.publish(h.p.now())
	}
}

// listed reports whether a node of svcs has the key.
func listed(svcs []*registry.Service, key string) bool {
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if nodeKey(n) == key {
				return true
			}
		}
	}
	return false
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
	if h.gone {
		return
	}
	var idle []string
	for key, nh := range *h.nodes.Load() {
		last := nh.lastFail
		if nh.until.After(last) {
			last = nh.until
		}
		if now.Sub(last) >= cfg.maxEjection {
			idle = append(idle, key)
		}
	}
	if len(idle) > 0 {
		h.forget(idle...)
	}
}
