package cache

import (
	"math/rand/v2"

	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
)

// Picks with passive health. Every pick looks at the service's state as it
// is then, whatever Next makes it: one Next serves every retry of a
// go-micro call, and the state may have been dropped, or a node ejected,
// since its Select.

// availability is what a node's state allows a pick at one moment.
type availability int

const (
	// free: no ejection holds it.
	free availability = iota
	// onTrial: its ejection is over and nobody has taken it on trial; a
	// pick that hands it out must claim it first.
	onTrial
	// held: ejected, or on trial with another caller.
	held
)

// availabilityAt tells what nh (nil: no state) allows a pick at now, in
// Unix nanoseconds, with hold as the longest a claim on a trial lasts.
func availabilityAt(nh *nodeHealth, now, hold int64) availability {
	switch {
	case nh == nil:
		return free
	case nh.ejectedAt(now):
		return held
	case !nh.onTrial.Load():
		return free
	}
	if c := nh.claimed.Load(); c != 0 && now-c < hold {
		return held
	}
	return onTrial
}

// picker is a service's health as one Next sees it: the state it had at
// Select, or the one it has since, if that was dropped or there was none.
type picker struct {
	p       *passive
	service string
	h       *serviceHealth
}

// current returns the service's state now, or nil.
func (k picker) current() *serviceHealth {
	if h := k.h; h != nil && !h.gone.Load() {
		return h
	}
	return k.p.lookup(k.service)
}

// take reports whether n may be handed out now, and takes it if it is on
// trial: then no other caller gets it until its trial ends (its Mark) or
// the claim runs out. It reads the clock only for a node with state.
func (k picker) take(h *serviceHealth, n *registry.Node) bool {
	nh := h.node(n)
	if nh == nil {
		return true
	}
	now, hold := k.p.now().UnixNano(), int64(k.p.cfg.Load().baseEjection)
	switch availabilityAt(nh, now, hold) {
	case free:
		return true
	case onTrial:
		c := nh.claimed.Load()
		return (c == 0 || now-c >= hold) && nh.claimed.CompareAndSwap(c, now)
	}
	return false
}

// fallback returns a node drawn uniformly from those of svcs that may be
// handed out now, taking it, or n when none may: every node the caller can
// pick is ejected, and handing one out beats refusing the call locally
// (counted in Ignored).
func (k picker) fallback(h *serviceHealth, svcs []*registry.Service, n *registry.Node) *registry.Node {
	for try := 0; try < 3; try++ {
		now, hold := k.p.now().UnixNano(), int64(k.p.cfg.Load().baseEjection)
		count := 0
		for _, s := range svcs {
			for _, m := range s.Nodes {
				if availabilityAt(h.node(m), now, hold) != held {
					count++
				}
			}
		}
		if count == 0 {
			break
		}
		i := rand.IntN(count)
		for _, s := range svcs {
			for _, m := range s.Nodes {
				if availabilityAt(h.node(m), now, hold) == held {
					continue
				}
				if i--; i < 0 {
					if k.take(h, m) {
						return m
					}
					break // taken on trial meanwhile: count again
				}
			}
			if i < 0 {
				break
			}
		}
	}
	k.p.ignored.Add(1)
	return n
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
		n := nodeAt(svcs, rand.IntN(total))
		h := k.current()
		if h == nil || k.take(h, n) {
			return n, nil
		}
		for try := 0; try < redraws; try++ {
			if m := nodeAt(svcs, rand.IntN(total)); k.take(h, m) {
				return m, nil
			}
		}
		return k.fallback(h, svcs, n), nil
	}
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
// another is pickable.
func skipEjected(next selector.Next, svcs []*registry.Service, total int, k picker) selector.Next {
	return func() (*registry.Node, error) {
		var first *registry.Node
		for tries := 0; tries < total+extraDraws; tries++ {
			n, err := next()
			if err != nil || n == nil {
				if first != nil {
					break
				}
				return n, err
			}
			h := k.current()
			if h == nil || k.take(h, n) {
				return n, nil
			}
			if first == nil {
				first = n
			}
		}
		h := k.current()
		if h == nil {
			return first, nil
		}
		return k.fallback(h, svcs, first), nil
	}
}
