package eject

import (
	"math/rand/v2"
	"sync/atomic"

	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
)

// Picks with passive health. Every pick looks at the service's state as it
// is then, whatever Next makes it: one Next serves every retry of a
// go-micro call, and the state may have been dropped, or a node ejected,
// since its Select.

// picker is a service's passive health as the Nexts of one Select see
// it: the state it had at Select, or the one it has since, if that was
// dropped or there was none.
type picker struct {
	p       *Health
	service string
	h       *serviceHealth
	// picked records that Next has handed out a node. Select makes it
	// only for a service with state, the only kind with nodes on trial,
	// so that a healthy service's Next allocates nothing more.
	picked *atomic.Bool
	// limbo is the service's nodes in limbo that Select added to the
	// list, or nil.
	limbo *limboSet
}

// Select returns the Next of a selector's Select of service: svcs is the
// node list that the cache returned, and filters and strategy are the
// Select's, strategy nil being the default one, Random. A list with no
// node once filtered gives selector.ErrNoneAvailable.
//
// The state is matched against svcs before the filters run, when it is a
// new list, so that the share of ejected nodes counts the nodes of the
// list whatever the filters leave, and the service is marked in use for
// the sweep. While no service has state, that costs one atomic load.
//
// The default strategy avoids ejected nodes itself, with a single draw on
// a healthy service; any other strategy's Next is wrapped, so that no
// strategy hands out an ejected node while another node may be picked.
// Every pick looks at the service's state as it is then, not as it was at
// Select: go-micro's client takes every retry of an RPC from the one Next,
// so one handed out before an ejection, before the state was dropped and
// made anew, or while passive health was off, would otherwise keep
// retrying into the node ejected.
func (p *Health) Select(service string, svcs []*registry.Service, filters []selector.Filter, strategy selector.Strategy) (selector.Next, error) {
	if p.foreign {
		p.saw(service, svcs)
	}
	p.track(service, svcs)
	h := p.lookup(service)
	var ls *limboSet
	if h != nil {
		h.observe(svcs)
		if !h.selected.Load() { // read-mostly: no write per Select
			h.selected.Store(true)
		}
		if ls = h.limboNow(); ls != nil {
			svcs = withLimbo(svcs, ls)
		}
	}
	for _, f := range filters {
		svcs = f(svcs)
	}
	total := countNodes(svcs)
	if total == 0 {
		return nil, selector.ErrNoneAvailable
	}
	k := picker{p: p, service: service, h: h, limbo: ls}
	if h != nil {
		k.picked = new(atomic.Bool)
	}
	if strategy != nil {
		return skipEjected(strategy(svcs), svcs, total, k), nil
	}
	return randomAvoiding(svcs, total, k), nil
}

// retry reports whether this pick is a retry: Next has handed out a node
// before, or it cannot tell, as the service had no state at Select. A
// retry takes a node on trial only when no other node may be handed out:
// it is an attempt of a call whose attempts have failed so far, maybe its
// last, and the worst one to try a node that was dead with. A first pick
// has every retry of its call still to come.
func (k picker) retry() bool {
	return k.picked == nil || k.picked.Swap(true)
}

// current returns the service's state now, or nil.
func (k picker) current() *serviceHealth {
	if h := k.h; h != nil && !h.gone.Load() {
		return h
	}
	return k.p.lookup(k.service)
}

// availability is what a node's state allows a pick at one moment.
type availability int

const (
	// free: no ejection holds it.
	free availability = iota
	// claimable: its ejection is over, and nobody holds its trial.
	claimable
	// held: ejected, or on trial or in limbo with another caller.
	held
	// never: its limbo is over, or it was dropped from it.
	never
)

// availableAt tells what nh (nil: no state) allows a pick at now
// (Health.nanos), with hold as the longest a trial claim lasts, and for a
// claimable node the claim, if any, that a new one replaces.
func (nh *nodeHealth) availableAt(now, hold int64) (availability, *trialClaim) {
	if nh == nil {
		return free, nil
	}
	switch nh.phase(now) {
	case stateEjected:
		return held, nil
	case stateTrial:
	case stateLimbo:
		if now >= nh.limboEnd.Load() {
			return never, nil
		}
	case stateLimboReached:
		if now >= nh.limboEnd.Load() {
			return never, nil
		}
		return free, nil
	case stateGone:
		return never, nil
	default:
		return free, nil
	}
	c := nh.claim.Load()
	if c != nil && now-c.at < hold {
		return held, nil
	}
	return claimable, c
}

// take returns the node to hand out for n, or nil if n may not be handed
// out now. A node on trial is taken only if trials, and for one caller:
// it gets a copy of n, which go-micro's client passes back to Mark, and
// no other caller gets the node until that trial ends (a Mark that
// reached it or failed to) or the claim runs out, after the maximum
// ejection time: longer than any attempt should take, so that a
// readmission costs one attempt even with a short base ejection time. It
// reads the clock only for a node with state.
func (k picker) take(h *serviceHealth, n *registry.Node, trials bool) *registry.Node {
	nh := k.stateOf(h, n)
	if nh == nil {
		return n // nil for a nil node: never handed out over another
	}
	now := k.p.nanos(k.p.now())
	switch a, old := nh.availableAt(now, int64(k.p.cfg.Load().MaxEjection)); a {
	case free:
		return n
	case claimable:
		if !trials {
			return nil
		}
		claim := &trialClaim{node: *n, at: now}
		if nh.claim.CompareAndSwap(old, claim) {
			return &claim.node
		}
	}
	return nil
}

// stateOf returns the state of n, a node of the Select's list: its
// state in limbo if it is one of the limbo's nodes, or nil.
func (k picker) stateOf(h *serviceHealth, n *registry.Node) *nodeHealth {
	if k.limbo != nil {
		if nh := k.limbo.of[n]; nh != nil {
			return nh
		}
	}
	return h.node(n)
}

// pickable reports whether take could hand n out at now (Health.nanos),
// with hold as the longest a trial claim lasts.
func (k picker) pickable(h *serviceHealth, n *registry.Node, now, hold int64, trials bool) bool {
	if n == nil {
		return false
	}
	a, _ := k.stateOf(h, n).availableAt(now, hold)
	return a == free || a == claimable && trials
}

// lastResort returns n to hand out when no node may be, ignoring the
// ejections (counted in Ignored), unless n is in limbo: a node in limbo
// is never handed out over its one attempt at a time, nor after it left.
// Another node of the list, ejected, goes instead; nil if there is none.
func (k picker) lastResort(svcs []*registry.Service, n *registry.Node) *registry.Node {
	if n != nil && k.limbo != nil && k.limbo.of[n] != nil {
		n = nil
		for _, s := range svcs {
			for _, m := range s.Nodes {
				if m != nil && k.limbo.of[m] == nil {
					n = m
					break
				}
			}
			if n != nil {
				break
			}
		}
		if n == nil {
			return nil
		}
	}
	k.p.ignored.Add(1)
	return n
}

// fallback returns a node drawn uniformly from those of svcs that may be
// handed out now, taking it, or n when none may: every node the caller can
// pick is ejected, and handing one out beats refusing the call locally
// (counted in Ignored). Without trials, it draws among the nodes on trial
// too when no other node may be handed out.
func (k picker) fallback(h *serviceHealth, svcs []*registry.Service, n *registry.Node, trials bool) *registry.Node {
	// A failed take is a node that another caller took on trial
	// meanwhile: draw again, as many times as there are nodes.
	for try := 0; try <= countNodes(svcs); try++ {
		now, hold := k.p.nanos(k.p.now()), int64(k.p.cfg.Load().MaxEjection)
		// One pass, keeping each pickable node with probability one in
		// the number seen so far: uniform, whatever changes meanwhile.
		var drawn *registry.Node
		seen := 0
		for _, s := range svcs {
			for _, m := range s.Nodes {
				if k.pickable(h, m, now, hold, trials) {
					if seen++; rand.IntN(seen) == 0 {
						drawn = m
					}
				}
			}
		}
		if drawn == nil {
			if trials {
				break
			}
			trials = true
			continue
		}
		if m := k.take(h, drawn, trials); m != nil {
			return m
		}
	}
	return k.lastResort(svcs, n)
}

// nodeAt returns the i-th node of svcs, counting across the services.
func nodeAt(svcs []*registry.Service, i int) *registry.Node {
	for _, s := range svcs {
		if i < len(s.Nodes) {
			return s.Nodes[i]
		}
		i -= len(s.Nodes)
	}
	return nil // unreachable: i is below the total
}

// countNodes returns the number of nodes of svcs.
func countNodes(svcs []*registry.Service) int {
	total := 0
	for _, s := range svcs {
		total += len(s.Nodes)
	}
	return total
}

// redraws is how many more draws randomAvoiding makes before it counts the
// nodes it may pick. With at most half the nodes ejected, it counts in one
// pick out of 16 that land on an ejected node, or fewer.
const redraws = 4

// randomAvoiding is the default strategy with passive health: each Next
// picks uniformly among the nodes that may be handed out at the time of
// the pick. It draws among all total nodes, and only when the service has
// state does it look the drawn node up, so a pick of a healthy service
// costs one draw and one atomic load. Drawing again until a node may be
// picked is uniform over those nodes; so is counting them and drawing
// one, which it falls back to. It allocates only its closure, as random
// does.
func randomAvoiding(svcs []*registry.Service, total int, k picker) selector.Next {
	return func() (*registry.Node, error) {
		trials := !k.retry()
		n := nodeAt(svcs, rand.IntN(total))
		h := k.current()
		if h == nil {
			return n, nil
		}
		if m := k.take(h, n, trials); m != nil {
			return m, nil
		}
		for try := 0; try < redraws; try++ {
			if m := k.take(h, nodeAt(svcs, rand.IntN(total)), trials); m != nil {
				return m, nil
			}
		}
		return found(k.fallback(h, svcs, n, trials))
	}
}

// found returns n, or selector.ErrNoneAvailable for none.
func found(n *registry.Node) (*registry.Node, error) {
	if n == nil {
		return nil, selector.ErrNoneAvailable
	}
	return n, nil
}

// extraDraws is how many more times than it has nodes skipEjected asks a
// strategy for a node before it picks one itself.
const extraDraws = 16

// skipEjected wraps the Next of a strategy given with selector.SetStrategy
// or selector.WithStrategy: while the node it gets may not be handed out,
// it asks next again. RoundRobin thus moves on to the following node;
// Random draws again. After total+extraDraws answers (enough for
// RoundRobin to visit every node) it draws one of the nodes that may be
// handed out itself: a strategy never yields an ejected node while
// another is pickable. A strategy that ends (an error, or no node) after
// offering only ejected nodes gets the first of them handed out, as when
// every node a caller may pick is ejected: it may limit itself to a zone,
// and the selector does not send its traffic elsewhere. For the same
// reason, a retry whose strategy ends after offering no node it may take
// but one on trial takes the trial.
func skipEjected(next selector.Next, svcs []*registry.Service, total int, k picker) selector.Next {
	return func() (*registry.Node, error) {
		trials := !k.retry()
		// first is the first node offered that may not be handed out,
		// and onTrial the first that a retry did not take only because
		// it is on trial.
		var first, onTrial *registry.Node
		for tries := 0; tries < total+extraDraws; tries++ {
			n, err := next()
			if err != nil || n == nil {
				if first == nil {
					return n, err
				}
				// The strategy has nothing else to offer: a node on
				// trial, taken, beats an ejected one, and that one a
				// node it never would offer.
				if m := k.takeTrial(onTrial); m != nil {
					return m, nil
				}
				return found(k.lastResort(svcs, first))
			}
			h := k.current()
			if h == nil {
				return n, nil
			}
			if m := k.take(h, n, trials); m != nil {
				return m, nil
			}
			if first == nil {
				first = n
			}
			if onTrial == nil && !trials && k.claimable(h, n) {
				onTrial = n
			}
		}
		h := k.current()
		if h == nil {
			return first, nil
		}
		return found(k.fallback(h, svcs, first, trials))
	}
}

// claimable reports whether n is on trial, held by nobody.
func (k picker) claimable(h *serviceHealth, n *registry.Node) bool {
	a, _ := k.stateOf(h, n).availableAt(k.p.nanos(k.p.now()), int64(k.p.cfg.Load().MaxEjection))
	return a == claimable
}

// takeTrial takes n, a node on trial that a retry's strategy offered
// before it ended, nothing else it offered being free, if n still may be
// taken; nil for a nil n.
func (k picker) takeTrial(n *registry.Node) *registry.Node {
	if n == nil {
		return nil
	}
	h := k.current()
	if h == nil {
		return n // forgotten since: nothing holds it
	}
	return k.take(h, n, true)
}

// Random is the default strategy of regcache's selector, as its Options
// show it: each Next picks a node uniformly at random from all the
// services' nodes, like selector.Random. It walks the services instead of
// copying every node into a new slice, so it allocates only its closure,
// whatever the number of nodes. The selector never calls it: it hands
// Select a nil strategy instead, which makes the same draw avoiding
// ejected nodes.
func Random(svcs []*registry.Service) selector.Next {
	total := countNodes(svcs)
	switch {
	case total == 0:
		return noneAvailable
	case len(svcs) == 1:
		nodes := svcs[0].Nodes
		return func() (*registry.Node, error) {
			return nodes[rand.IntN(len(nodes))], nil
		}
	}
	return func() (*registry.Node, error) {
		return nodeAt(svcs, rand.IntN(total)), nil
	}
}

func noneAvailable() (*registry.Node, error) { return nil, selector.ErrNoneAvailable }
