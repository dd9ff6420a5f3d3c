package eject

import "time"

// How passive health state stays bounded: the states off the list are
// capped, and idle state is swept. (A node is also forgotten when it has
// nothing left to remember; see reached.)

// offListLocked records nh as off the list, and forgets the oldest state
// off the list beyond maxOffList. h.mu is held.
func (h *serviceHealth) offListLocked(nh *nodeHealth) {
	q := &h.offList[0]
	if nh.wasListed {
		q = &h.offList[1]
	}
	q.push(nh)
	for q.len > maxOffList {
		h.dropNodeLocked(q.head, inPushedOut)
	}
}

// maybeSweep sweeps every service's idle state if the time has come: at
// most once per base ejection time, by the failure Mark that finds it due.
func (p *Health) maybeSweep(now time.Time) {
	cfg := p.cfg.Load()
	next := p.nextSweep.Load()
	if p.nanos(now) < next || !p.nextSweep.CompareAndSwap(next, p.nanos(now.Add(cfg.BaseEjection))) {
		return
	}
	p.each(func(h *serviceHealth) { h.sweep(now, cfg) })
}

// sweep forgets the nodes that have been neither ejected nor failing for
// the maximum ejection time, but for the nodes on trial of a service
// selected since the last sweep: such a node stays on trial until an
// attempt answers, however long its trial waits for a first pick.
// Forgotten, it would go to every caller at once and take as many
// failures to eject as a node never ejected. The state of a service no
// longer selected is forgotten, so that it stays bounded by the services
// in use, and in each by its list and maxOffList.
func (h *serviceHealth) sweep(now time.Time, cfg *Config) {
	h.mu.Lock()
	defer h.unlock()
	if h.gone.Load() {
		return
	}
	h.expireLimboLocked(now)
	inUse := h.selected.Swap(false)
	var idle []*nodeHealth
	h.nodes.Range(func(_, v any) bool {
		for _, nh := range v.(*nodeSet).nodes {
			h.settleLocked(nh, h.p.nanos(now))
			if s := nh.state(); s == stateEjected || s == stateLimbo || s == stateLimboReached || inUse && s == stateTrial {
				continue
			}
			last := nh.lastFail
			if until := h.p.at(nh.until.Load()); until.After(last) {
				last = until
			}
			if now.Sub(last) >= cfg.MaxEjection {
				idle = append(idle, nh)
			}
		}
		return true
	})
	for _, nh := range idle {
		h.dropNodeLocked(nh, inIdle)
	}
	if h.count == 0 {
		h.dropLocked()
	}
}
