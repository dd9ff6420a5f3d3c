package cache

import (
	"math/rand/v2"
	"time"

	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
)

// ejectedSet lists a service's ejected nodes and when each ejection ends.
// It is immutable: Next reads it without a lock, and a change builds a new
// one.
type ejectedSet struct {
	keys  []string
	until []time.Time
}

// find returns the index of n in s, or -1.
func (s *ejectedSet) find(n *registry.Node) int {
	key := nodeKey(n)
	for i, k := range s.keys {
		if k == key {
			return i
		}
	}
	return -1
}

// admits reports whether n may be picked at now: it is not in s, or its
// ejection is over and it is on trial.
func (s *ejectedSet) admits(n *registry.Node, now time.Time) bool {
	i := s.find(n)
	return i < 0 || !now.Before(s.until[i])
}

// extraDraws is how many more times than it has nodes skipEjected asks a
// strategy for a node.
const extraDraws = 16

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

// healthRef is a service's health as a Next sees it: the state the selector
// had at Select, or, if it had none, whatever state the service has since.
type healthRef struct {
	p       *passive
	service string
	h       *serviceHealth
}

// ejected returns the service's health and its ejected nodes now, if any.
func (r healthRef) ejected() (*serviceHealth, *ejectedSet) {
	h := r.h
	if h == nil {
		if h = r.p.lookup(r.service); h == nil {
			return nil, nil
		}
	}
	return h, h.ejected.Load()
}

// randomAvoiding is the default strategy with passive health: each Next
// picks uniformly among the nodes not ejected at the time of the pick. It draws
// among all total nodes, and only when the draw lands on an ejected node
// does it read the clock and draw again, so a pick costs one draw and a
// look at the short list of ejected nodes. It allocates only its closure,
// as random does.
func randomAvoiding(svcs []*registry.Service, total int, ref healthRef) selector.Next {
	return func() (*registry.Node, error) {
		n := nodeAt(svcs, rand.IntN(total))
		if h, set := ref.ejected(); set != nil {
			if i := set.find(n); i >= 0 {
				return h.instead(svcs, total, n, set, i), nil
			}
		}
		return n, nil
	}
}

// redraws is how many more draws instead makes before it counts the nodes
// it may pick. With at most half the nodes ejected, it counts in one pick
// out of 16 that land on an ejected node, or fewer.
const redraws = 4

// instead returns the node to hand out when a draw landed on n, at index i
// of set: n itself if its ejection is over (it is on trial), otherwise a
// node drawn uniformly from those not ejected, or n if every node is.
// Drawing again until a node may be picked is uniform over those nodes; so
// is counting them and drawing one, which it falls back to.
func (h *serviceHealth) instead(svcs []*registry.Service, total int, n *registry.Node, set *ejectedSet, i int) *registry.Node {
	now := h.p.now()
	if !now.Before(set.until[i]) {
		return n
	}
	for try := 0; try < redraws; try++ {
		if m := nodeAt(svcs, rand.IntN(total)); set.admits(m, now) {
			return m
		}
	}
	admitted := 0
	for _, s := range svcs {
		for _, m := range s.Nodes {
			if set.admits(m, now) {
				admitted++
			}
		}
	}
	if admitted == 0 {
		h.p.ignored.Add(1)
		return n
	}
	k := rand.IntN(admitted)
	for _, s := range svcs {
		for _, m := range s.Nodes {
			if set.admits(m, now) {
				if k == 0 {
					return m
				}
				k--
			}
		}
	}
	return n // unreachable: k is below the count
}

// skipEjected wraps the Next of a strategy given with selector.SetStrategy
// or selector.WithStrategy: while the node it gets is ejected at the time
// of the pick, it asks next again, then hands out the first node it got.
// RoundRobin thus moves on to the following node; Random draws again. It
// asks total+extraDraws times at most: enough for RoundRobin to visit every
// node, and for Random to find one not ejected, with half of them ejected,
// but for one pick in 2^extraDraws.
func skipEjected(next selector.Next, total int, ref healthRef) selector.Next {
	return func() (*registry.Node, error) {
		var first *registry.Node
		var now time.Time
		var h *serviceHealth
		for tries := 0; tries < total+extraDraws; tries++ {
			n, err := next()
			if err != nil || n == nil {
				if first != nil {
					break
				}
				return n, err
			}
			var set *ejectedSet
			h, set = ref.ejected()
			if set == nil {
				return n, nil
			}
			i := set.find(n)
			if i < 0 {
				return n, nil
			}
			if now.IsZero() {
				now = h.p.now()
			}
			if !now.Before(set.until[i]) {
				return n, nil
			}
			if first == nil {
				first = n
			}
		}
		ref.p.ignored.Add(1)
		return first, nil
	}
}
