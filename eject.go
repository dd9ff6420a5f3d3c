package cache

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// passive is the passive health of one selector: for each service, the
// state of the nodes that failed lately.
//
// A node's state is created by its first failure and forgotten when it has
// nothing left to remember (reached again, its ejections in a row decayed
// to none), when it has been idle for the maximum ejection time, or, off
// the service's cached list, when more recent nodes off the list push it
// out (maxOffList). Only the nodes of the list count towards, and are
// capped by, the share of ejected nodes. Every pick reads the state as it
// is then, so a Next handed out earlier sees what happened since.
//
// Nothing here is global but the map of services, a sync.Map, so that a
// service's first failure or its last forgotten state costs the same
// however many services have state; every other change takes the lock of
// one service.
type passive struct {
	cfg atomic.Pointer[healthConfig]
	// held returns the service's cached list without a registry call,
	// or nil. For a Cache of another kind, which may call the registry
	// on a Lookup, it is the list the service's last Select met, kept in
	// seen.
	held    func(string) []*registry.Service
	foreign bool
	seen    sync.Map // service name -> *[]*registry.Service

	// services maps a service name to its *serviceHealth, for the
	// services with node state only. tracked is their number: while it
	// is 0, Select, Next and Mark skip the map.
	services sync.Map
	tracked  atomic.Int64
	// nextSweep is when (passive.nanos) a failure next sweeps.
	nextSweep atomic.Int64

	log log.Logger
	now func() time.Time
	// start is when p was made: the times kept in atomics are
	// nanoseconds since, measured on the monotonic clock, so that a step
	// of the wall clock neither lengthens nor ends an ejection.
	start time.Time

	failures, ejections, refused, ignored, readmitted atomic.Uint64
}

// maxOffList bounds the node states a service keeps for nodes that are
// not on its cached list; the oldest go first.
const maxOffList = 64

// serviceHealth is the node state of one service. Its lock is the
// service's own: Marks of different services never contend.
type serviceHealth struct {
	p    *passive
	name string
	// nodes maps a node's Id (its address if it has none) to a *nodeSet:
	// the states under that key, one per address. Picks and Marks read
	// it without a lock; it is written with mu held.
	nodes sync.Map
	// list is the cached list the state was last matched against.
	list atomic.Pointer[listIndex]
	// gone is set, with mu held, once h has left passive.services:
	// Marks and picks then find the service's new state, if any.
	gone atomic.Bool
	// selected is set by a Select since the last sweep: the sweep keeps
	// the nodes on trial of a service in use.
	selected atomic.Bool

	mu    sync.Mutex
	count int // node states
	// ends holds the listed nodes ejected, by the end of their ejection:
	// popped as they end, so that its length is the number ejected.
	ends ejections
	// offList holds the states off the list, oldest first: [0] those of
	// nodes never listed (client.WithAddress targets, calls in flight to a
	// node not listed yet), [1] those of nodes that left the list, so
	// that the first never push out the second, which a Next taken before
	// they left may still pick.
	offList [2]nodeQueue
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
	// Times are nanoseconds since passive.start (see passive.nanos).
	// until is the end of the current or last ejection. onTrial is set from an ejection until the node is
	// reached: once the ejection is over, one caller at a time may take
	// it, and claim is that caller's. failing is set while failures in a
	// row are counted, and forgetAt is when the ejections in a row will
	// have decayed: a success Mark before then,
	// with nothing else to clear, takes no lock.
	until    atomic.Int64
	onTrial  atomic.Bool
	claim    atomic.Pointer[trialClaim]
	failing  atomic.Bool
	forgetAt atomic.Int64

	// The rest is guarded by serviceHealth.mu.
	failures    int // attempts in a row that failed to reach it
	streak      int // ejections in a row
	lastFail    time.Time
	listed      bool   // on the service's cached list
	refusedTold bool   // the log heard that the share of ejections kept it in
	reason      string // the error that ejected it last, capped
	heapIndex   int    // in serviceHealth.ends; -1 when not there
	wasListed   bool   // on the list once
	// queue is the serviceHealth.offList it is in while off the list,
	// and prev and next link it there.
	queue      *nodeQueue
	prev, next *nodeHealth
}

// trialClaim is a caller's hold on a node on trial: the copy of the node
// that Next handed to that caller, which go-micro's client passes back to
// Mark, and when it was taken (passive.nanos).
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

// ejectedAt reports whether nh is ejected at now (passive.nanos).
func (nh *nodeHealth) ejectedAt(now int64) bool { return now < nh.until.Load() }

func newPassive(c Cache, cfg healthConfig) *passive {
	p := &passive{log: loggerOf(c), now: time.Now, start: time.Now()}
	if cc, ok := c.(*cache); ok {
		p.held = cc.held
	} else {
		p.foreign, p.held = true, p.lastSeen
	}
	p.cfg.Store(&cfg)
	return p
}

// nanos returns t as the atomics keep it: nanoseconds since p.start.
func (p *passive) nanos(t time.Time) int64 { return int64(t.Sub(p.start)) }

// at returns the time that nanos made n of.
func (p *passive) at(n int64) time.Time { return p.start.Add(time.Duration(n)) }

// saw records svcs as the list a Select of service met, for a Cache of
// another kind.
func (p *passive) saw(service string, svcs []*registry.Service) {
	if len(svcs) == 0 {
		return
	}
	if v, ok := p.seen.Load(service); ok {
		if svcdata.SameArray(*v.(*[]*registry.Service), svcs) {
			return
		}
	}
	p.seen.Store(service, &svcs)
}

// lastSeen returns the list the last Select of service met, or nil.
func (p *passive) lastSeen(service string) []*registry.Service {
	if v, ok := p.seen.Load(service); ok {
		return *v.(*[]*registry.Service)
	}
	return nil
}

// each calls fn for every service with state.
func (p *passive) each(fn func(*serviceHealth)) {
	p.services.Range(func(_, v any) bool {
		fn(v.(*serviceHealth))
		return true
	})
}

// loggerOf returns the logger of c, or go-micro's default logger for a
// Cache of another kind.
func loggerOf(c Cache) log.Logger {
	if cc, ok := c.(*cache); ok && cc.opts.Logger != nil {
		return cc.opts.Logger
	}
	return log.DefaultLogger
}

// configure installs cfg. Turning passive health off forgets every state;
// a shorter maximum ejection ends the ejections that would outlast it
// then, and a lower share of ejected nodes readmits, on trial, the nodes
// over it.
//
// cfg is stored first: a failure Mark reads it again under its service's
// lock, so one that raced the change records nothing the change undid.
func (p *passive) configure(cfg healthConfig) {
	p.cfg.Store(&cfg)
	now := p.now()
	p.each(func(h *serviceHealth) {
		h.mu.Lock()
		if cfg.off() {
			h.dropLocked()
		} else if !h.gone.Load() {
			h.shortenLocked(now, &cfg)
			h.capLocked(now, &cfg)
		}
		h.mu.Unlock()
	})
}

// lookup returns the state of service, or nil. It costs one atomic load
// while no service has state.
func (p *passive) lookup(service string) *serviceHealth {
	if p.tracked.Load() == 0 {
		return nil
	}
	if v, ok := p.services.Load(service); ok {
		return v.(*serviceHealth)
	}
	return nil
}

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

// mark records the outcome of one attempt on node.
func (p *passive) mark(service string, node *registry.Node, err error) {
	if node == nil {
		return
	}
	switch classify(err) {
	case reached:
		if h := p.lookup(service); h != nil {
			if nh := h.node(node); nh != nil {
				if now := p.now(); nh.needsReached(p.nanos(now)) {
					h.reached(nh, now)
				}
			}
		}
	case unreachable:
		if p.cfg.Load().off() {
			return
		}
		p.failures.Add(1)
		now := p.now()
		for {
			// The cached list, to count the share among its nodes, is
			// indexed before the service's lock is taken.
			h := p.serviceFor(service)
			if done := h.failed(node, err, h.indexFor(nil), now); done {
				break
			}
		}
		p.maybeSweep(now)
	default:
		// Unrelated to the node: its trial, if this caller had it,
		// goes on, but another caller may take it.
		if h := p.lookup(service); h != nil {
			if nh := h.node(node); nh != nil {
				if c := nh.claim.Load(); c != nil && &c.node == node {
					nh.claim.CompareAndSwap(c, nil)
				}
			}
		}
	}
}

// needsReached reports whether a success of nh at now (passive.nanos) has
// anything to change: failures to clear, a trial or a
// claim to end, or a state to forget.
func (nh *nodeHealth) needsReached(now int64) bool {
	return nh.failing.Load() || nh.onTrial.Load() || nh.claim.Load() != nil || now >= nh.forgetAt.Load()
}

// serviceFor returns the state of service, creating it.
func (p *passive) serviceFor(service string) *serviceHealth {
	if v, ok := p.services.Load(service); ok {
		return v.(*serviceHealth)
	}
	v, loaded := p.services.LoadOrStore(service, &serviceHealth{p: p, name: service})
	if !loaded {
		p.tracked.Add(1)
	}
	return v.(*serviceHealth)
}

// failed records a failure to reach node at now, idx being the cached
// list. It returns false if h was dropped meanwhile; the caller then
// retries with the service's new state.
func (h *serviceHealth) failed(node *registry.Node, err error, idx *listIndex, now time.Time) bool {
	h.mu.Lock()
	if h.gone.Load() {
		h.mu.Unlock()
		return false
	}
	// Read again under the lock: a change of configuration after it
	// was read applies to this failure, and its pass over the services
	// has not reached h yet or sees what this failure does.
	cfg := h.p.cfg.Load()
	if cfg.off() {
		if h.count == 0 {
			h.dropLocked()
		}
		h.mu.Unlock()
		return true
	}
	h.matchLocked(idx, now, cfg)
	nh := h.node(node)
	if nh == nil {
		nh = h.addLocked(node, idx)
	}
	var msg string
	// A failure while the node is ejected is of an attempt that began
	// before the ejection: the node is out already.
	if !nh.ejectedAt(h.p.nanos(now)) {
		nh.failures++
		nh.lastFail = now
		nh.failing.Store(true)
		if nh.failures >= cfg.ejectAfter || nh.onTrial.Load() {
			msg = h.ejectLocked(nh, err, now, cfg)
		}
	}
	nh.claim.Store(nil)
	h.mu.Unlock()
	if msg != "" {
		h.p.log.Log(log.WarnLevel, msg)
	}
	return true
}

// addLocked creates the state of node; idx tells whether it is listed.
// h.mu is held.
func (h *serviceHealth) addLocked(node *registry.Node, idx *listIndex) *nodeHealth {
	nh := &nodeHealth{key: nodeKey(node), address: node.Address, heapIndex: -1}
	if cur := h.list.Load(); cur != nil {
		nh.listed = cur.has(nh.key, nh.address)
	} else if idx != nil {
		nh.listed = idx.has(nh.key, nh.address)
	}
	nh.wasListed = nh.listed
	var set []*nodeHealth
	if v, ok := h.nodes.Load(nh.key); ok {
		set = v.(*nodeSet).nodes
	}
	h.nodes.Store(nh.key, &nodeSet{nodes: append(set[:len(set):len(set)], nh)})
	h.count++
	if !nh.listed {
		h.offListLocked(nh)
	}
	return nh
}

// ejectLocked ejects nh if the service's share of ejected nodes allows
// it, and returns what to log. h.mu is held.
func (h *serviceHealth) ejectLocked(nh *nodeHealth, err error, now time.Time, cfg *healthConfig) string {
	if nh.listed {
		ejected := h.ejectedLocked(now)
		if !mayEject(cfg, ejected, h.listed()) {
			if nh.refusedTold {
				return ""
			}
			h.p.refused.Add(1)
			nh.refusedTold = true
			return fmt.Sprintf("regcache: node %s of service %s keeps failing (%v) but stays in rotation: %d of its %d nodes are ejected already",
				quoteName(nh.key), quoteName(h.name), err, ejected, h.listed())
		}
	}
	streak := min(decayed(cfg, nh.streak, h.p.at(nh.until.Load()), now)+1, maxStreak(cfg)+1)
	d := ejectionTime(cfg, streak)
	failures := nh.failures
	nh.streak, nh.failures, nh.refusedTold = streak, 0, false
	nh.reason = capReason(err)
	nh.failing.Store(false)
	h.setUntil(nh, now.Add(d), cfg)
	nh.onTrial.Store(true)
	if nh.listed {
		h.ends.put(nh)
		h.p.ejections.Add(1)
	}
	return fmt.Sprintf("regcache: node %s (%s) of service %s ejected for %v after %d failures in a row: %v",
		quoteName(nh.key), nh.address, quoteName(h.name), d, failures, err)
}

// setUntil sets the end of nh's ejection, and so when its ejections in a
// row will have decayed. h.mu is held.
func (h *serviceHealth) setUntil(nh *nodeHealth, until time.Time, cfg *healthConfig) {
	nh.until.Store(h.p.nanos(until))
	nh.forgetAt.Store(h.p.nanos(until.Add(time.Duration(nh.streak) * cfg.baseEjection)))
}

// ejectedLocked returns how many listed nodes are ejected at now. h.mu is
// held.
func (h *serviceHealth) ejectedLocked(now time.Time) int {
	t := h.p.nanos(now)
	for len(h.ends) > 0 && !h.ends[0].ejectedAt(t) {
		h.ends.remove(h.ends[0])
	}
	return len(h.ends)
}

// listed returns the number of nodes of the list matched, 0 before the
// first. h.mu is held.
func (h *serviceHealth) listed() int {
	if idx := h.list.Load(); idx != nil {
		return idx.size
	}
	return 0
}

// reached records that nh was reached at now. A node on trial is back in
// full; state with nothing left to remember is forgotten.
func (h *serviceHealth) reached(nh *nodeHealth, now time.Time) {
	h.mu.Lock()
	if h.gone.Load() || h.find(nh.key, nh.address) != nh { // forgotten meanwhile
		h.mu.Unlock()
		return
	}
	cfg := h.p.cfg.Load()
	nh.failures = 0
	nh.failing.Store(false)
	nh.refusedTold = false
	nh.claim.Store(nil)
	until := h.p.at(nh.until.Load())
	var msg string
	if nh.onTrial.Load() && !now.Before(until) {
		nh.onTrial.Store(false)
		if nh.listed {
			h.p.readmitted.Add(1)
		}
		msg = fmt.Sprintf("regcache: node %s (%s) of service %s is reachable again after its ejection",
			quoteName(nh.key), nh.address, quoteName(h.name))
	}
	if !nh.onTrial.Load() && decayed(cfg, nh.streak, until, now) == 0 {
		h.dropNodeLocked(nh)
		if h.count == 0 {
			h.dropLocked()
		}
	}
	h.mu.Unlock()
	if msg != "" {
		h.p.log.Log(log.InfoLevel, msg)
	}
}

// dropNodeLocked forgets nh. h.mu is held.
func (h *serviceHealth) dropNodeLocked(nh *nodeHealth) {
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
	h.ends.remove(nh)
	nh.queue.remove(nh)
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
