package eject

import (
	"time"

	"go-micro.dev/v4/registry"
)

// How passive health state follows the cached node list: it is matched
// against the list when that changes, and the share of ejected nodes is
// kept within its cap, also when the configuration changes. (sweep.go
// keeps the state bounded.)

// listIndex is a service's cached list as passive health sees it: which
// nodes are on it, by key and address, and how many. It is built once per
// list, outside any lock, and never changed.
type listIndex struct {
	// svcs is the list itself. The cache never changes a list in place,
	// so a new list is a new slice; holding it keeps its backing array
	// from being reused by another list at the same address.
	svcs []*registry.Service
	refs map[nodeRef]struct{}
	size int
}

type nodeRef struct{ key, address string }

// sameList reports whether a and b are the same list: the same backing
// array and length. The cache never changes a list in place, so the same
// array is the same list, and this costs no pass over the nodes.
func sameList(a, b []*registry.Service) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func (x *listIndex) has(key, address string) bool {
	_, ok := x.refs[nodeRef{key, address}]
	return ok
}

// of reports whether x indexes svcs.
func (x *listIndex) of(svcs []*registry.Service) bool {
	return sameList(x.svcs, svcs)
}

// indexFor returns the index of the list the cache holds now, with no
// registry call, or of svcs (a caller's list) for a foreign cache;
// nil for no list. It builds one only for a list the state has not met
// yet: a pass over the list once per list, as the cache makes one to build
// it.
func (h *serviceHealth) indexFor(svcs []*registry.Service) *listIndex {
	if h.p.held != nil {
		// A caller's list may be older than the cache's: never match
		// the state back to it.
		if cur := h.p.held(h.name); len(cur) > 0 {
			svcs = cur
		}
	}
	if len(svcs) == 0 {
		return nil
	}
	if x := h.list.Load(); x != nil && x.of(svcs) {
		return x
	}
	return indexOf(svcs)
}

// indexOf returns a new index of svcs.
func indexOf(svcs []*registry.Service) *listIndex {
	x := &listIndex{svcs: svcs, refs: make(map[nodeRef]struct{}, countNodes(svcs))}
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if n != nil { // a foreign cache may leave holes
				x.refs[nodeRef{nodeKey(n), n.Address}] = struct{}{}
			}
		}
	}
	x.size = len(x.refs)
	return x
}

// observe matches the state against svcs, the service's cached list, when
// it is a new one; only then does it read the clock. Select calls it; a failure Mark matches too, so that
// the share of ejected nodes is counted on the list even before any
// Select saw it.
func (h *serviceHealth) observe(svcs []*registry.Service) {
	if len(svcs) == 0 {
		return
	}
	if x := h.list.Load(); x != nil && x.of(svcs) {
		return
	}
	idx := h.indexFor(svcs)
	h.mu.Lock()
	if !h.gone.Load() {
		h.matchLocked(idx, h.p.now(), h.p.cfg.Load())
	}
	h.unlock()
}

// matchLocked installs idx, if it is a new list, and marks each node state
// listed or not. A node that left the list keeps its state, off the list,
// so that a Next still holding the old list keeps skipping it while it is
// ejected, and a node that comes back at the same address is the same
// node. The share of ejected nodes is then brought within its cap. It
// costs a pass over the node states, once per list. h.mu is held.
func (h *serviceHealth) matchLocked(idx *listIndex, now time.Time, cfg *Config) {
	if idx == nil || h.list.Load() == idx {
		return
	}
	h.list.Store(idx)
	t := h.p.nanos(now)
	h.nodes.Range(func(_, v any) bool {
		for _, nh := range v.(*nodeSet).nodes {
			listed := idx.has(nh.key, nh.address)
			switch {
			case listed && nh.limbo != nil:
				h.dropNodeLocked(nh, inListed)
			case listed && !nh.listed:
				nh.listed, nh.wasListed = true, true
				nh.queue.remove(nh)
				if nh.ejectedAt(t) { // ejected off the list: counted now
					h.endsPut(nh)
					h.p.ejections.Add(1)
				}
			case !listed && nh.listed:
				nh.listed = false
				h.endsRemove(nh)
				h.offListLocked(nh)
			}
		}
		return true
	})
	h.capLocked(now, cfg)
}

// capLocked ends the ejections over the service's share of ejected nodes,
// those closest to their end first: a list that shrank, nodes that failed
// off it and joined it, or a lower share set with Init. Those nodes are on
// trial, one caller at a time. h.mu is held.
func (h *serviceHealth) capLocked(now time.Time, cfg *Config) {
	limit := maxEjected(cfg, h.listed())
	for h.ejectedLocked(now) > limit {
		nh := h.ends.Peek().Value
		h.endsRemove(nh)
		h.setUntil(nh, now, cfg)
		h.move(nh, inCap, stateTrial)
	}
}

// shortenLocked ends every ejection, on the list or off it, at now plus
// the maximum ejection time of cfg at the latest. h.mu is held.
func (h *serviceHealth) shortenLocked(now time.Time, cfg *Config) {
	latest := now.Add(cfg.MaxEjection)
	h.nodes.Range(func(_, v any) bool {
		for _, nh := range v.(*nodeSet).nodes {
			if nh.until.Load() > h.p.nanos(latest) {
				h.setUntil(nh, latest, cfg)
				if nh.ending.Queued() {
					h.endsPut(nh)
				}
			}
		}
		return true
	})
}
