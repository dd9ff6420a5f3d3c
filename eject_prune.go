package cache

import (
	"container/heap"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// How passive health state follows the cached node list and stays
// bounded: it is matched against the list when that changes, the share of
// ejected nodes is kept within its cap, the states off the list are
// capped, and idle state is swept. (A node is also forgotten when it has
// nothing left to remember; see reached.)

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

func (x *listIndex) has(key, address string) bool {
	_, ok := x.refs[nodeRef{key, address}]
	return ok
}

// of reports whether x indexes svcs.
func (x *listIndex) of(svcs []*registry.Service) bool {
	return svcdata.SameArray(x.svcs, svcs)
}

// indexFor returns the index of the list the cache holds now, with no
// registry call, or of svcs (a caller's list) for a Cache of another kind;
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
	x := &listIndex{svcs: svcs, refs: make(map[nodeRef]struct{}, countNodes(svcs))}
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if n != nil { // a Cache of another kind may leave holes
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
	h.mu.Unlock()
}

// matchLocked installs idx, if it is a new list, and marks each node state
// listed or not. A node that left the list keeps its state, off the list,
// so that a Next still holding the old list keeps skipping it while it is
// ejected, and a node that comes back at the same address is the same
// node. The share of ejected nodes is then brought within its cap. It
// costs a pass over the node states, once per list. h.mu is held.
func (h *serviceHealth) matchLocked(idx *listIndex, now time.Time, cfg *healthConfig) {
	if idx == nil || h.list.Load() == idx {
		return
	}
	h.list.Store(idx)
	t := h.p.nanos(now)
	h.nodes.Range(func(_, v any) bool {
		for _, nh := range v.(*nodeSet).nodes {
			listed := idx.has(nh.key, nh.address)
			switch {
			case listed && !nh.listed:
				nh.listed, nh.wasListed = true, true
				nh.queue.remove(nh)
				if nh.ejectedAt(t) { // ejected off the list: counted now
					h.ends.put(nh)
					h.p.ejections.Add(1)
				}
			case !listed && nh.listed:
				nh.listed = false
				h.ends.remove(nh)
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
func (h *serviceHealth) capLocked(now time.Time, cfg *healthConfig) {
	limit := maxEjected(cfg, h.listed())
	for h.ejectedLocked(now) > limit {
		nh := h.ends[0]
		h.ends.remove(nh)
		h.setUntil(nh, now, cfg)
	}
}

// shortenLocked ends every ejection, on the list or off it, at now plus
// the maximum ejection time of cfg at the latest. h.mu is held.
func (h *serviceHealth) shortenLocked(now time.Time, cfg *healthConfig) {
	latest := now.Add(cfg.maxEjection)
	h.nodes.Range(func(_, v any) bool {
		for _, nh := range v.(*nodeSet).nodes {
			if nh.until.Load() > h.p.nanos(latest) {
				h.setUntil(nh, latest, cfg)
				if nh.heapIndex >= 0 {
					h.ends.put(nh)
				}
			}
		}
		return true
	})
}

// offListLocked records nh as off the list, and forgets the oldest state
// off the list beyond maxOffList. h.mu is held.
func (h *serviceHealth) offListLocked(nh *nodeHealth) {
	q := &h.offList[0]
	if nh.wasListed {
		q = &h.offList[1]
	}
	q.push(nh)
	for q.len > maxOffList {
		h.dropNodeLocked(q.head)
	}
}

// maybeSweep sweeps every service's idle state if the time has come: at
// most once per base ejection time, by the failure Mark that finds it due.
func (p *passive) maybeSweep(now time.Time) {
	cfg := p.cfg.Load()
	next := p.nextSweep.Load()
	if p.nanos(now) < next || !p.nextSweep.CompareAndSwap(next, p.nanos(now.Add(cfg.baseEjection))) {
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
func (h *serviceHealth) sweep(now time.Time, cfg *healthConfig) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone.Load() {
		return
	}
	inUse := h.selected.Swap(false)
	var idle []*nodeHealth
	h.nodes.Range(func(_, v any) bool {
		for _, nh := range v.(*nodeSet).nodes {
			if inUse && nh.onTrial.Load() {
				continue
			}
			last := nh.lastFail
			if until := h.p.at(nh.until.Load()); until.After(last) {
				last = until
			}
			if now.Sub(last) >= cfg.maxEjection {
				idle = append(idle, nh)
			}
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

// nodeQueue is a queue of node states, linked through the states, so that
// one leaves it in constant time.
type nodeQueue struct {
	head, tail *nodeHealth
	len        int
}

func (q *nodeQueue) push(nh *nodeHealth) {
	if nh.queue != nil {
		return
	}
	nh.queue, nh.prev, nh.next = q, q.tail, nil
	if q.tail != nil {
		q.tail.next = nh
	} else {
		q.head = nh
	}
	q.tail = nh
	q.len++
}

// remove takes nh out of q; q is nh.queue, nil if nh is in none.
func (q *nodeQueue) remove(nh *nodeHealth) {
	if q == nil || nh.queue != q {
		return
	}
	if nh.prev != nil {
		nh.prev.next = nh.next
	} else {
		q.head = nh.next
	}
	if nh.next != nil {
		nh.next.prev = nh.prev
	} else {
		q.tail = nh.prev
	}
	nh.queue, nh.prev, nh.next = nil, nil, nil
	q.len--
}

// ejections is a heap of nodes by the end of their ejection.
type ejections []*nodeHealth

func (q ejections) Len() int           { return len(q) }
func (q ejections) Less(i, j int) bool { return q[i].until.Load() < q[j].until.Load() }
func (q ejections) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].heapIndex, q[j].heapIndex = i, j
}
func (q *ejections) Push(x any) {
	nh := x.(*nodeHealth)
	nh.heapIndex = len(*q)
	*q = append(*q, nh)
}
func (q *ejections) Pop() any {
	old := *q
	nh := old[len(old)-1]
	old[len(old)-1] = nil
	nh.heapIndex = -1
	*q = old[:len(old)-1]
	return nh
}

// put adds nh, or moves it to its new end.
func (q *ejections) put(nh *nodeHealth) {
	if nh.heapIndex >= 0 {
		heap.Fix(q, nh.heapIndex)
		return
	}
	heap.Push(q, nh)
}

// remove takes nh out, if it is in.
func (q *ejections) remove(nh *nodeHealth) {
	if nh.heapIndex >= 0 {
		heap.Remove(q, nh.heapIndex)
	}
}
