package eject

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/quote"
)

// Limbo: the nodes that a registry loses in bulk stay in rotation. A
// registry that drops most of a service's nodes at once, or nodes of many
// services at once, has more often lost them (leases that expired under
// load, a restore from an old backup, a deleted prefix) than seen their
// servers stop; a rolling deployment or a small scale-down removes a few
// at a time. So the nodes of a mass loss go to limbo instead of leaving:
// Select keeps handing them out, one attempt at a time until one reaches
// the node, and each leaves limbo at its first failure, when it is listed
// again, or when the bound ends. The cache's answers are not changed:
// limbo lives in the selector only.
//
// The selector sees a service's list at each Select: what left it since
// the last list, within massWindow, is the loss measured.

const (
	// massWindow is how close together removals count as one loss, for
	// one service and across services.
	massWindow = time.Second
	// massServices is how many services losing nodes within massWindow
	// make a mass loss of every one of those losses, however small.
	massServices = 3
)

// lossTrack follows the list of one service as its Selects meet it.
type lossTrack struct {
	// last is the list the last Select met; gen, the mass loss
	// generation (Health.lossGen) it was matched against. A Select
	// that meets the same list and generation changes nothing.
	last atomic.Pointer[[]*registry.Service]
	gen  atomic.Uint64

	mu sync.Mutex
	// removed holds the nodes that left the list within massWindow of
	// the latest, oldest first, and base the nodes of the list before
	// the first of them.
	removed []removal
	base    int
}

// removal is a node that left its service's list, with the version of
// the service it was listed under.
type removal struct {
	node *registry.Node
	svc  *registry.Service
	at   time.Time
}

// limboSet is what a Select hands out of a service's limbo: the nodes
// in limbo, grouped under copies of the services they were listed under,
// and each node's state, by the node handed out.
type limboSet struct {
	svcs []*registry.Service
	of   map[*registry.Node]*nodeHealth
	// first is the earliest end of a node's limbo (Health.nanos).
	first int64
}

// limboOf is the limbo part of a node's state.
type limboOf struct {
	node   *registry.Node    // the copy handed out
	svc    *registry.Service // the version it was listed under
	since  time.Time
	reason string // the loss that put it there
}

// track follows service's list svcs, met by a Select at now, and puts the
// nodes of a mass loss in limbo. It costs a map load and two atomic loads
// while the list and the generation stay the same.
func (p *Health) track(service string, svcs []*registry.Service) {
	cfg := p.cfg.Load()
	if cfg.limboOff() {
		return
	}
	v, ok := p.tracks.Load(service)
	if ok {
		t := v.(*lossTrack)
		if last := t.last.Load(); sameList(*last, svcs) && t.gen.Load() == p.lossGen.Load() {
			return
		}
	}
	p.trackChange(service, svcs, cfg)
}

// trackChange is track for a list or a generation that changed, or a
// service met for the first time. Kept out of line: it takes the address
// of svcs, which would otherwise move every Select's list header to the
// heap.
//
//go:noinline
func (p *Health) trackChange(service string, svcs []*registry.Service, cfg *Config) {
	v, ok := p.tracks.Load(service)
	if !ok {
		if len(svcs) == 0 { // an unknown name keeps nothing
			return
		}
		t := &lossTrack{}
		t.last.Store(&svcs)
		t.gen.Store(p.lossGen.Load())
		if v, ok = p.tracks.LoadOrStore(service, t); !ok {
			return
		}
	}
	t := v.(*lossTrack)
	now := p.now()
	t.mu.Lock()
	lost, base := t.update(p, svcs, now, cfg)
	if len(svcs) == 0 && len(t.removed) == 0 {
		// Nothing left to compare with: a service that comes back
		// starts a new track, so that the tracks stay bounded by the
		// services listed.
		p.tracks.CompareAndDelete(service, t)
	}
	t.mu.Unlock()
	if len(lost) > 0 {
		p.enterLimbo(service, lost, svcs, base, now, cfg)
	}
}

// update matches t against svcs at now, and returns the nodes of a mass
// loss, if any, emptying t.removed of them, and the nodes the service had
// before them. t.mu is held.
func (t *lossTrack) update(p *Health, svcs []*registry.Service, now time.Time, cfg *Config) (lost []removal, base int) {
	prev := *t.last.Load()
	t.last.Store(&svcs)
	for len(t.removed) > 0 && now.Sub(t.removed[0].at) > massWindow {
		t.removed = t.removed[1:]
	}
	gone := leftList(prev, svcs, now)
	mass := false
	if len(gone) > 0 {
		if len(t.removed) == 0 {
			t.base = countNodes(prev)
		}
		t.removed = append(t.removed, gone...)
		mass = p.noteLoss(t, now) || countNodes(svcs) == 0 ||
			float64(len(t.removed)) > cfg.LimboShare*float64(t.base)
	}
	if gen := p.lossGen.Load(); t.gen.Swap(gen) != gen && len(t.removed) > 0 {
		mass = true // other services lost nodes meanwhile
	}
	if !mass {
		return nil, 0
	}
	lost = t.removed
	t.removed = nil
	return lost, t.base
}

// leftList returns the nodes of prev that svcs lacks, by key and address.
func leftList(prev, svcs []*registry.Service, now time.Time) []removal {
	if countNodes(prev) == 0 {
		return nil
	}
	on := make(map[nodeRef]struct{}, countNodes(svcs))
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if n != nil {
				on[nodeRef{nodeKey(n), n.Address}] = struct{}{}
			}
		}
	}
	var gone []removal
	for _, s := range prev {
		for _, n := range s.Nodes {
			if n == nil {
				continue
			}
			if _, ok := on[nodeRef{nodeKey(n), n.Address}]; !ok {
				gone = append(gone, removal{node: n, svc: s, at: now})
			}
		}
	}
	return gone
}

// noteLoss records that the service of t lost nodes at now, and reports
// whether massServices services, this one included, have within
// massWindow. The first loss that makes it so moves the generation, so
// that the others' earlier losses in the window go to limbo at their next
// Select.
func (p *Health) noteLoss(t *lossTrack, now time.Time) bool {
	p.lossMu.Lock()
	defer p.lossMu.Unlock()
	kept := p.losses[:0]
	for _, l := range p.losses {
		if now.Sub(l.at) <= massWindow && l.t != t {
			kept = append(kept, l)
		}
	}
	p.losses = append(kept, lossAt{t: t, at: now})
	if len(p.losses) < massServices {
		return false
	}
	if len(p.losses) == massServices {
		p.lossGen.Add(1)
		t.gen.Store(p.lossGen.Load())
	}
	return true
}

// lossAt is one service's latest loss of nodes.
type lossAt struct {
	t  *lossTrack
	at time.Time
}

// enterLimbo puts the nodes lost in limbo, those that are neither on svcs
// (back already) nor failing, and logs the mass loss once.
func (p *Health) enterLimbo(service string, lost []removal, svcs []*registry.Service, base int, now time.Time, cfg *Config) {
	for {
		h := p.serviceFor(service)
		h.mu.Lock()
		if h.gone.Load() {
			h.mu.Unlock()
			continue
		}
		// The list the Select met, not the cache's: a foreign cache's
		// is the last one with nodes. A node listed since is dropped
		// from limbo by the next Select that meets it.
		reason := fmt.Sprintf("the registry dropped %d of the service's %d nodes at once", len(lost), base)
		if float64(len(lost)) <= cfg.LimboShare*float64(base) && countNodes(svcs) > 0 {
			reason = fmt.Sprintf("the registry dropped %d of the service's %d nodes while %d or more services lost nodes within %v",
				len(lost), base, massServices, massWindow)
		}
		var idx *listIndex
		if len(svcs) > 0 {
			idx = indexOf(svcs)
		}
		h.matchLocked(h.indexFor(svcs), now, cfg)
		n := 0
		for _, r := range lost {
			if idx != nil && idx.has(nodeKey(r.node), r.node.Address) {
				continue
			}
			nh := h.node(r.node)
			if nh == nil {
				nh = h.addLocked(r.node, nil)
			}
			if s := nh.state(); s != stateHealthy && s != stateRecovering {
				continue // failing, ejected or on trial: it leaves, as any node
			}
			nh.queue.remove(nh)
			nh.listed = false
			nh.streak, nh.failures = 0, 0
			node := *r.node
			nh.limbo = &limboOf{node: &node, svc: r.svc, since: now, reason: reason}
			nh.limboEnd.Store(h.p.nanos(now.Add(cfg.limboBound())))
			nh.forgetAt.Store(math.MaxInt64) // a success has nothing to clear
			nh.claim.Store(nil)
			h.move(nh, inLost, stateLimbo)
			n++
		}
		if n > 0 {
			h.inLimbo += n
			h.buildLimboLocked()
			p.massLosses.Add(1)
		}
		h.mu.Unlock()
		if n > 0 {
			p.log.Log(log.WarnLevel, fmt.Sprintf("regcache: service %s lost %d of its %d nodes: %s; "+
				"the selector keeps %d in limbo, in rotation until each fails, registers again, or %v pass",
				quote.Name(service), len(lost), base, reason, n, cfg.limboBound()))
		}
		return
	}
}

// buildLimboLocked publishes the nodes in limbo for Select. h.mu is held.
func (h *serviceHealth) buildLimboLocked() {
	if h.inLimbo == 0 {
		h.limbo.Store(nil)
		return
	}
	ls := &limboSet{of: make(map[*registry.Node]*nodeHealth, h.inLimbo), first: math.MaxInt64}
	bySvc := map[*registry.Service]*registry.Service{}
	h.nodes.Range(func(_, v any) bool {
		for _, nh := range v.(*nodeSet).nodes {
			if nh.limbo == nil {
				continue
			}
			s := bySvc[nh.limbo.svc]
			if s == nil {
				c := *nh.limbo.svc
				c.Nodes = nil
				s = &c
				bySvc[nh.limbo.svc] = s
				ls.svcs = append(ls.svcs, s)
			}
			s.Nodes = append(s.Nodes, nh.limbo.node)
			ls.of[nh.limbo.node] = nh
			ls.first = min(ls.first, nh.limboEnd.Load())
		}
		return true
	})
	h.limbo.Store(ls)
}

// leaveLimboLocked records that nh left limbo for in, and when the last
// node of the service has, queues the line that says how it ended. h.mu
// is held; nh's state is dropped already.
func (h *serviceHealth) leaveLimboLocked(nh *nodeHealth, in input) {
	nh.limbo = nil
	h.inLimbo--
	switch in {
	case inListed:
		h.limboEnds.back++
	case inFail:
		h.limboEnds.failed++
	default:
		h.limboEnds.bound++
	}
	h.buildLimboLocked()
	if h.inLimbo == 0 {
		e := h.limboEnds
		h.limboEnds = limboEnds{}
		h.pending = append(h.pending, fmt.Sprintf("regcache: the limbo of service %s ended: %d nodes registered again, %d failed, %d reached the bound",
			quote.Name(h.name), e.back, e.failed, e.bound))
	}
}

// limboEnds counts how the nodes of a service's limbo left it.
type limboEnds struct{ back, failed, bound int }

// expireLimboLocked drops the nodes whose limbo's bound has ended at now.
// h.mu is held.
func (h *serviceHealth) expireLimboLocked(now time.Time) {
	ls := h.limbo.Load()
	t := h.p.nanos(now)
	if ls == nil || t < ls.first {
		return
	}
	for _, nh := range ls.of {
		if nh.limbo != nil && t >= nh.limboEnd.Load() {
			h.dropNodeLocked(nh, inBound)
		}
	}
}

// endLimboLocked ends the limbo of every node, as its bound would: limbo
// was turned off. h.mu is held.
func (h *serviceHealth) endLimboLocked() {
	if ls := h.limbo.Load(); ls != nil {
		for _, nh := range ls.of {
			if nh.limbo != nil {
				h.dropNodeLocked(nh, inBound)
			}
		}
	}
}

// unlock releases h.mu and logs what was queued under it.
func (h *serviceHealth) unlock() {
	lines := h.pending
	h.pending = nil
	h.mu.Unlock()
	for _, l := range lines {
		h.p.log.Log(log.InfoLevel, l)
	}
}

// limboNow returns the nodes in limbo to hand out now, dropping those
// whose bound has ended first; nil for none. It reads the clock only
// while there are some.
func (h *serviceHealth) limboNow() *limboSet {
	ls := h.limbo.Load()
	if ls == nil {
		return nil
	}
	now := h.p.nanos(h.p.now())
	if now < ls.first {
		return ls
	}
	h.mu.Lock()
	if !h.gone.Load() {
		h.expireLimboLocked(h.p.at(now))
	}
	h.unlock()
	return h.limbo.Load()
}

// withLimbo returns svcs and the services of ls, in a new slice.
func withLimbo(svcs []*registry.Service, ls *limboSet) []*registry.Service {
	out := make([]*registry.Service, 0, len(svcs)+len(ls.svcs))
	return append(append(out, svcs...), ls.svcs...)
}
