package eject

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/regcache/cache/internal/timeq"
	"go-micro.dev/v4/registry"
)

// serviceHealth is the node state of one service. Its lock is the
// service's own: Marks of different services never contend.
type serviceHealth struct {
	p    *Health
	name string
	// nodes maps a node's Id (its address if it has none) to a *nodeSet:
	// the states under that key, one per address. Picks and Marks read
	// it without a lock; it is written with mu held.
	nodes sync.Map
	// list is the cached list the state was last matched against.
	list atomic.Pointer[listIndex]
	// gone is set, with mu held, once h has left Health.services:
	// Marks and picks then find the service's new state, if any.
	gone atomic.Bool
	// selected is set by a Select since the last sweep: the sweep keeps
	// the nodes on trial of a service in use.
	selected atomic.Bool

	mu    sync.Mutex
	count int // node states
	// ends holds the listed nodes ejected, by the end of their ejection:
	// popped as they end, so that its length is the number ejected.
	ends timeq.Queue[*nodeHealth]
	// offList holds the states off the list, oldest first: [0] those of
	// nodes never listed (client.WithAddress targets, calls in flight to a
	// node not listed yet), [1] those of nodes that left the list, so
	// that the first never push out the second, which a Next taken before
	// they left may still pick.
	offList [2]nodeQueue

	// limbo is the nodes in limbo that Select hands out, nil for none;
	// inLimbo is their number and limboEnds how they left so far.
	limbo     atomic.Pointer[limboSet]
	inLimbo   int
	limboEnds limboEnds
	// pending holds the log lines to write once mu is released (unlock).
	pending []string
}

// nodeSet is the states under one key, at different addresses: usually
// one. It is never changed once stored; a change stores a new set.
type nodeSet struct{ nodes []*nodeHealth }

// nodeHealth is the state of one node that failed lately: one address
// under one key. A node that re-registers at another address under the
// same Id is another node.
type nodeHealth struct {
	key, address string

	// The fields that picks and successful Marks read without the lock.
	// Times are nanoseconds since Health.start (see Health.nanos).
	// st is its nodeState (table.go), changed by move only. until is the
	// end of the current or last ejection; on trial, one caller at a
	// time may take it, and claim is that caller's. forgetAt is when the
	// ejections in a row will have decayed: a success Mark before then,
	// with nothing else to clear, takes no lock.
	st       atomic.Uint32
	limboEnd atomic.Int64 // in limbo: the end of its bound
	until    atomic.Int64
	claim    atomic.Pointer[trialClaim]
	forgetAt atomic.Int64

	// The rest is guarded by serviceHealth.mu.
	failures    int // attempts in a row that failed to reach it
	streak      int // ejections in a row
	lastFail    time.Time
	listed      bool                     // on the service's cached list
	refusedTold bool                     // the log heard that the share of ejections kept it in
	reason      string                   // the error that ejected it last, capped
	ending      *timeq.Item[*nodeHealth] // in serviceHealth.ends; nil when not there
	wasListed   bool                     // on the list once
	limbo       *limboOf                 // in limbo: what it was lost as
	// queue is the serviceHealth.offList it is in while off the list,
	// and prev and next link it there.
	queue      *nodeQueue
	prev, next *nodeHealth
}

// trialClaim is a caller's hold on a node on trial: the copy of the node
// that Next handed to that caller, which go-micro's client passes back to
// Mark, and when it was taken (Health.nanos).
type trialClaim struct {
	node registry.Node
	at   int64
}

// nodeKey identifies a node within its service: its Id, or its address
// for a node without one.
func nodeKey(n *registry.Node) string {
	if n.Id != "" {
		return n.Id
	}
	return n.Address
}

// ejectedAt reports whether nh is ejected at now (Health.nanos).
func (nh *nodeHealth) ejectedAt(now int64) bool { return now < nh.until.Load() }

// node returns the state of n, or nil.
func (h *serviceHealth) node(n *registry.Node) *nodeHealth {
	if n == nil {
		return nil
	}
	return h.find(nodeKey(n), n.Address)
}

// find returns the state of the node at address under key, or nil.
func (h *serviceHealth) find(key, address string) *nodeHealth {
	v, ok := h.nodes.Load(key)
	if !ok {
		return nil
	}
	for _, nh := range v.(*nodeSet).nodes {
		if nh.address == address {
			return nh
		}
	}
	return nil
}

// dropNodeLocked forgets nh, for in. h.mu is held.
func (h *serviceHealth) dropNodeLocked(nh *nodeHealth, in input) {
	v, ok := h.nodes.Load(nh.key)
	if !ok {
		return
	}
	set := v.(*nodeSet).nodes
	i := 0
	for i < len(set) && set[i] != nh {
		i++
	}
	if i == len(set) {
		return
	}
	if len(set) == 1 {
		h.nodes.Delete(nh.key)
	} else {
		rest := make([]*nodeHealth, 0, len(set)-1)
		h.nodes.Store(nh.key, &nodeSet{nodes: append(append(rest, set[:i]...), set[i+1:]...)})
	}
	h.count--
	from := nh.state()
	h.move(nh, in, stateGone)
	h.endsRemove(nh)
	nh.queue.remove(nh)
	if from == stateLimbo || from == stateLimboReached {
		h.leaveLimboLocked(nh, in)
	}
}

// dropLocked removes h from the selector's services. h.mu is held.
func (h *serviceHealth) dropLocked() {
	if h.gone.Swap(true) {
		return
	}
	if h.p.services.CompareAndDelete(h.name, h) {
		h.p.tracked.Add(-1)
	}
}

// reset forgets the whole service.
func (h *serviceHealth) reset() {
	h.mu.Lock()
	h.dropLocked()
	h.mu.Unlock()
}
