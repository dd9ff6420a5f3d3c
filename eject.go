package cache

import (
	"container/heap"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// passive is the passive health of one selector: for each service, the
// state of the nodes that failed lately.
//
// The state of a node is created by its first failure and forgotten when
// it has nothing left to remember (reached again, with its ejections in a
// row decayed to none), or after it has been idle, neither ejected nor
// failing, for the maximum ejection time. Nodes off the service's cached
// list (a client.WithAddress call, a call in flight to a node that left)
// keep their state too, in case they appear, but at most maxOffList of
// them, and they never count towards the share of ejected nodes. State
// therefore only grows with the failures of listed nodes, and every
// failure Mark sweeps idle state, at most once per base ejection time.
//
// Every pick reads the state as it is then, through the service's current
// state, so a Next handed out earlier sees what happened since.
type passive struct {
	c   Cache
	cfg atomic.Pointer[healthConfig]
	// services maps a service name to its state, for the services with
	// node state only: empty, it lets Select, Next and Mark skip the
	// lookup while every node is healthy. The map is replaced, never
	// changed in place, with a compare-and-swap, so readers take no lock
	// and neither do writers. A typed map hashes a name faster than
	// sync.Map.
	services atomic.Pointer[map[string]*serviceHealth]
	// nextSweep is when, in Unix nanoseconds, a failure next sweeps.
	nextSweep atomic.Int64

	log log.Logger
	now func() time.Time

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
	// nodes maps a node's key (nodeKey) to its *nodeHealth. Picks and
	// successful Marks read it without a lock; it is written with mu
	// held, one node at a time.
	nodes sync.Map
	// seen is the first element of the cached list that the state was
	// last matched against. The cache never changes a list in place, so
	// a new list has a new first element; holding it keeps the old one
	// from being reused at the same address.
	seen atomic.Pointer[*registry.Service]

	// gone is set, with mu held, once h is removed from
	// passive.services: Marks and picks then find the service's new
	// state, if any.
	gone atomic.Bool

	mu    sync.Mutex
	count int // node states
	// index holds the keys and addresses of the nodes of the list seen,
	// and listed their number (0 before the first list).
	index  map[string]string
	listed int
	// ends holds the listed nodes ejected, by the end of their ejection:
	// popped as they end, so that its length is the number ejected.
	ends ejections
	// offList holds the keys of the node states off the list, oldest
	// first.
	offList []string
}

// nodeHealth is the state of one node that failed lately: one address
// under one key. A node that re-registers at another address under the
// same Id starts a new state.
type nodeHealth struct {
	key, address string

	// The fields Next and a successful Mark read without the lock.
	// until is the end of the current or last ejection, in Unix
	// nanoseconds. onTrial is set from an ejection until the node is
	// reached: once the ejection is over, one caller at a time may take
	// it, and claimed is when one did (0: nobody has).
	until   atomic.Int64
	onTrial atomic.Bool
	claimed atomic.Int64
	// bad is set while a success has something to clear or to check:
	// failures, an ejection or ejections in a row not yet decayed. A
	// success Mark of a node without it takes no lock.
	bad atomic.Bool

	// The rest is guarded by serviceHealth.mu.
	failures    int // attempts in a row that failed to reach it
	streak      int // ejections in a row
	lastFail    time.Time
	listed      bool   // on the service's cached list
	refusedTold bool   // the log heard that the share of ejections kept it in
	reason      string // the error that ejected it last, capped
	heapIndex   int    // in serviceHealth.ends; -1 when not there
}

// nodeKey identifies a node within its service: its Id, or its address
// for a node without one.
func nodeKey(n *registry.Node) string {
	if n.Id != "" {
		return n.Id
	}
	return n.Address
}

// ejectedAt reports whether nh is ejected at now, in Unix nanoseconds.
func (nh *nodeHealth) ejectedAt(now int64) bool { return now < nh.until.Load() }

func newPassive(c Cache, cfg healthConfig) *passive {
	p := &passive{c: c, log: loggerOf(c), now: time.Now}
	p.cfg.Store(&cfg)
	p.services.Store(&map[string]*serviceHealth{})
	return p
}

// each calls fn for every service with state.
func (p *passive) each(fn func(*serviceHealth)) {
	for _, h := range *p.services.Load() {
		fn(h)
	}
}

// tracked returns the number of services with state.
func (p *passive) tracked() int { return len(*p.services.Load()) }

// loggerOf returns the logger of c, or go-micro's default logger for a
// Cache of another kind.
func loggerOf(c Cache) log.Logger {
	if cc, ok := c.(*cache); ok && cc.opts.Logger != nil {
		return cc.opts.Logger
	}
	return log.DefaultLogger
}

// configure installs cfg; turning passive health off forgets every state.
func (p *passive) configure(cfg healthConfig) {
	p.cfg.Store(&cfg)
	if cfg.off() {
		p.each((*serviceHealth).reset)
	}
}

// lookup returns the state of service, or nil. It costs one atomic load
// while no service has state.
func (p *passive) lookup(service string) *serviceHealth {
	m := *p.services.Load()
	if len(m) == 0 {
		return nil
	}
	return m[service]
}

// node returns the state of n, or nil: a state of its key at another
// address is another node's.
func (h *serviceHealth) node(n *registry.Node) *nodeHealth {
	v, ok := h.nodes.Load(nodeKey(n))
	if !ok {
		return nil
	}
	if nh := v.(*nodeHealth); nh.address == n.Address {
		return nh
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
		h := p.lookup(service)
		if h == nil {
			return
		}
		if nh := h.node(node); nh != nil && (nh.bad.Load() || nh.claimed.Load() != 0) {
			h.reached(nh, p.now())
		}
	case unreachable:
		cfg := p.cfg.Load()
		if cfg.off() {
			return
		}
		p.failures.Add(1)
		now := p.now()
		// The cached list, to count the share among its nodes; read
		// before the service's lock, which is never held across a call
		// into the cache.
		var svcs []*registry.Service
		if p.c != nil {
			svcs, _ = p.c.Lookup(service)
		}
		for !p.serviceFor(service).failed(node, err, svcs, now, cfg) {
		}
		p.maybeSweep(now, cfg)
	default:
		// Unrelated to the node: its trial, if it had one, goes on, but
		// another caller may take it.
		if h := p.lookup(service); h != nil {
			if nh := h.node(node); nh != nil {
				nh.claimed.Store(0)
			}
		}
	}
}

// serviceFor returns the state of service, creating it.
func (p *passive) serviceFor(service string) *serviceHealth {
	var h *serviceHealth
	for {
		cur := p.services.Load()
		if found := (*cur)[service]; found != nil {
			return found
		}
		if h == nil {
			h = &serviceHealth{p: p, name: service}
		}
		next := make(map[string]*serviceHealth, len(*cur)+1)
		for k, v := range *cur {
			next[k] = v
		}
		next[service] = h
		if p.services.CompareAndSwap(cur, &next) {
			return h
		}
	}
}

// remove takes h out of the services, if it is still there.
func (p *passive) remove(h *serviceHealth) {
	for {
		cur := p.services.Load()
		if (*cur)[h.name] != h {
			return
		}
		next := make(map[string]*serviceHealth, len(*cur))
		for k, v := range *cur {
			if k != h.name {
				next[k] = v
			}
		}
		if p.services.CompareAndSwap(cur, &next) {
			return
		}
	}
}

// failed records a failure to reach node at now, svcs being the cached
// list. It returns false if h was removed meanwhile; the caller then
// retries with the service's new state.
func (h *serviceHealth) failed(node *registry.Node, err error, svcs []*registry.Service, now time.Time, cfg *healthConfig) bool {
	h.mu.Lock()
	if h.gone.Load() {
		h.mu.Unlock()
		return false
	}
	h.matchLocked(svcs, now)
	nh := h.node(node)
	if nh == nil {
		nh = h.addLocked(node)
	}
	var msg string
	// A failure while the node is ejected is of an attempt that began
	// before the ejection: the node is out already.
	if !nh.ejectedAt(now.UnixNano()) {
		nh.failures++
		nh.lastFail = now
		nh.bad.Store(true)
		if nh.failures >= cfg.ejectAfter || nh.onTrial.Load() {
			msg = h.ejectLocked(nh, err, now, cfg)
		}
	}
	nh.claimed.Store(0)
	h.mu.Unlock()
	if msg != "" {
		h.p.log.Log(log.WarnLevel, msg)
	}
	return true
}

// addLocked creates the state of node, replacing that of another address
// under the same key. h.mu is held.
func (h *serviceHealth) addLocked(node *registry.Node) *nodeHealth {
	key := nodeKey(node)
	if v, ok := h.nodes.Load(key); ok {
		h.dropNodeLocked(v.(*nodeHealth))
	}
	nh := &nodeHealth{key: key, address: node.Address, heapIndex: -1}
	addr, ok := h.index[key]
	nh.listed = ok && addr == node.Address
	h.nodes.Store(key, nh)
	h.count++
	if !nh.listed {
		h.offListLocked(nh)
	}
	return nh
}

// offListLocked records nh as off the list, and forgets the oldest state
// off the list beyond maxOffList. h.mu is held.
func (h *serviceHealth) offListLocked(nh *nodeHealth) {
	h.offList = append(h.offList, nh.key)
	for len(h.offList) > maxOffList {
		key := h.offList[0]
		h.offList = h.offList[1:]
		if v, ok := h.nodes.Load(key); ok {
			if old := v.(*nodeHealth); !old.listed {
				h.dropNodeLocked(old)
			}
		}
	}
	if len(h.offList) > 0 && cap(h.offList) > 4*maxOffList {
		h.offList = append([]string(nil), h.offList...)
	}
}

// ejectLocked ejects nh if the service's share of ejected nodes allows
// it, and returns what to log. h.mu is held.
func (h *serviceHealth) ejectLocked(nh *nodeHealth, err error, now time.Time, cfg *healthConfig) string {
	if nh.listed {
		ejected := h.ejectedLocked(now)
		if !mayEject(cfg, ejected, h.listed) {
			h.p.refused.Add(1)
			if nh.refusedTold {
				return ""
			}
			nh.refusedTold = true
			return fmt.Sprintf("regcache: node %s of service %s keeps failing (%v) but stays in rotation: %d of its %d nodes are ejected already",
				quoteName(nh.key), quoteName(h.name), err, ejected, h.listed)
		}
	}
	streak := min(decayed(cfg, nh.streak, time.Unix(0, nh.until.Load()), now)+1, maxStreak(cfg)+1)
	d := ejectionTime(cfg, streak)
	failures := nh.failures
	nh.streak, nh.failures, nh.refusedTold = streak, 0, false
	nh.reason = capReason(err)
	nh.until.Store(now.Add(d).UnixNano())
	nh.onTrial.Store(true)
	if nh.listed {
		h.ends.put(nh)
	}
	h.p.ejections.Add(1)
	return fmt.Sprintf("regcache: node %s (%s) of service %s ejected for %v after %d failures in a row: %v",
		quoteName(nh.key), nh.address, quoteName(h.name), d, failures, err)
}

// ejectedLocked returns how many listed nodes are ejected at now. h.mu is
// held.
func (h *serviceHealth) ejectedLocked(now time.Time) int {
	t := now.UnixNano()
	for len(h.ends) > 0 && !h.ends[0].ejectedAt(t) {
		heap.Pop(&h.ends)
	}
	return len(h.ends)
}

// reached records that nh was reached at now. A node on trial is back in
// full; state with nothing left to remember is forgotten.
func (h *serviceHealth) reached(nh *nodeHealth, now time.Time) {
	h.mu.Lock()
	if h.gone.Load() || h.loadLocked(nh.key) != nh { // forgotten meanwhile
		h.mu.Unlock()
		return
	}
	cfg := h.p.cfg.Load()
	nh.failures = 0
	nh.refusedTold = false
	nh.claimed.Store(0)
	until := time.Unix(0, nh.until.Load())
	var msg string
	if nh.onTrial.Load() && !now.Before(until) {
		nh.onTrial.Store(false)
		h.p.readmitted.Add(1)
		msg = fmt.Sprintf("regcache: node %s (%s) of service %s is reachable again after its ejection",
			quoteName(nh.key), nh.address, quoteName(h.name))
	}
	if !nh.onTrial.Load() && decayed(cfg, nh.streak, until, now) == 0 {
		h.dropNodeLocked(nh)
		if h.count == 0 {
			h.dropLocked()
		}
	} else {
		nh.bad.Store(true)
	}
	h.mu.Unlock()
	if msg != "" {
		h.p.log.Log(log.InfoLevel, msg)
	}
}

// loadLocked returns the state under key, or nil.
func (h *serviceHealth) loadLocked(key string) *nodeHealth {
	if v, ok := h.nodes.Load(key); ok {
		return v.(*nodeHealth)
	}
	return nil
}

// dropNodeLocked forgets nh. h.mu is held.
func (h *serviceHealth) dropNodeLocked(nh *nodeHealth) {
	if h.loadLocked(nh.key) != nh {
		return
	}
	h.nodes.Delete(nh.key)
	h.count--
	if nh.heapIndex >= 0 {
		heap.Remove(&h.ends, nh.heapIndex)
	}
	// (A key left in offList is skipped when its turn comes: it no
	// longer names a state off the list, or names a newer one, which
	// then goes a little early.)
}

// dropLocked removes h from the selector's services. h.mu is held.
func (h *serviceHealth) dropLocked() {
	if h.gone.Load() {
		return
	}
	h.gone.Store(true)
	h.p.remove(h)
}

// reset forgets the whole service.
func (h *serviceHealth) reset() {
	h.mu.Lock()
	h.dropLocked()
	h.mu.Unlock()
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
