package cache

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// passive is the passive health of one selector: for each service, the
// state of the nodes that failed lately, and the nodes ejected now.
//
// The state of a node is created by its first failure and forgotten when
// it has nothing left to remember (reached again, with its ejections in a
// row decayed to none), when it leaves the service's node list, or after
// it has been idle, neither ejected nor failing, for the maximum ejection
// time. State therefore only grows with failures, and every failure Mark
// sweeps idle state, at most once per base ejection time.
type passive struct {
	cfg atomic.Pointer[healthConfig]
	// services maps a service name to its state, for the services with
	// node state only: empty, it lets Select and Mark skip the lookup
	// while every node is healthy. The map is replaced, never changed in
	// place, with a compare-and-swap, so readers take no lock and neither
	// do writers. A typed map hashes a name faster than sync.Map.
	services atomic.Pointer[map[string]*serviceHealth]
	// nextSweep is when, in Unix nanoseconds, a failure next sweeps.
	nextSweep atomic.Int64

	log log.Logger
	now func() time.Time

	failures, ejections, refused, ignored, readmitted atomic.Uint64
}

// serviceHealth is the node state of one service. Its lock is the
// service's own: Marks of different services never contend.
type serviceHealth struct {
	p    *passive
	name string
	// ejected lists the nodes ejected, for Next to skip; nil when none
	// is. It is rebuilt, never changed in place, so Next reads it without
	// a lock.
	ejected atomic.Pointer[ejectedSet]
	// nodes maps a node's key to its state. The map is replaced, never
	// changed in place, so that a success Mark reads it without the lock.
	nodes atomic.Pointer[map[string]*nodeHealth]
	// seen is the first element of the cached service list that the
	// state was last pruned against. The cache never changes a list in
	// place, so a new list has a new first element; holding it keeps the
	// old one from being reused at the same address.
	seen atomic.Pointer[*registry.Service]

	mu     sync.Mutex
	listed int  // nodes in the list seen, 0 before the first
	gone   bool // removed from passive.services; Marks find a new one
}

// nodeHealth is the state of one node that failed lately.
type nodeHealth struct {
	// bad is set while a success has something to clear or to check:
	// failures, an ejection or ejections in a row not yet decayed. A
	// success Mark of a node without it takes no lock.
	bad atomic.Bool

	// The rest is guarded by serviceHealth.mu.
	key, address string
	failures     int       // attempts in a row that failed to reach it
	streak       int       // ejections in a row
	until        time.Time // end of the current or last ejection
	trial        bool      // ejected and not reached since: a failure ejects it again
	lastFail     time.Time
	refusedTold  bool // the log heard that the share of ejections kept it in
}

// nodeKey identifies a node within its service: its Id, or its address
// for a node without one.
func nodeKey(n *registry.Node) string {
	if n.Id != "" {
		return n.Id
	}
	return n.Address
}

func newPassive(c Cache, cfg healthConfig) *passive {
	p := &passive{log: loggerOf(c), now: time.Now}
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
		if nh := (*h.nodes.Load())[nodeKey(node)]; nh != nil && nh.bad.Load() {
			h.reached(nh, p.now())
		}
	case unreachable:
		cfg := p.cfg.Load()
		if cfg.off() {
			return
		}
		p.failures.Add(1)
		now := p.now()
		for !p.serviceFor(service).failed(node, err, now, cfg) {
		}
		p.maybeSweep(now, cfg)
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
			h.nodes.Store(&map[string]*nodeHealth{})
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

// failed records a failure to reach node at now. It returns false if h was
// removed meanwhile; the caller then retries with the service's new state.
func (h *serviceHealth) failed(node *registry.Node, err error, now time.Time, cfg *healthConfig) bool {
	h.mu.Lock()
	if h.gone {
		h.mu.Unlock()
		return false
	}
	key := nodeKey(node)
	nh := (*h.nodes.Load())[key]
	if nh == nil {
		nh = &nodeHealth{key: key, address: node.Address}
		h.put(nh)
	}
	var msg string
	// A failure while the node is ejected is of an attempt that began
	// before the ejection: the node is out already.
	if !now.Before(nh.until) {
		nh.failures++
		nh.lastFail = now
		nh.bad.Store(true)
		if nh.failures >= cfg.ejectAfter || nh.trial {
			msg = h.eject(nh, err, now, cfg)
		}
	}
	h.mu.Unlock()
	if msg != "" {
		h.p.log.Log(log.WarnLevel, msg)
	}
	return true
}

// eject ejects nh if the service's share of ejected nodes allows it, and
// returns what to log. h.mu is held.
func (h *serviceHealth) eject(nh *nodeHealth, err error, now time.Time, cfg *healthConfig) string {
	ejected := 0
	for _, other := range *h.nodes.Load() {
		if now.Before(other.until) {
			ejected++
		}
	}
	nodes := h.listed
	if nodes == 0 {
		nodes = len(*h.nodes.Load())
	}
	if !mayEject(cfg, ejected, nodes) {
		h.p.refused.Add(1)
		if nh.refusedTold {
			return ""
		}
		nh.refusedTold = true
		return fmt.Sprintf("regcache: node %s of service %s keeps failing (%v) but stays in rotation: %d of its %d nodes are ejected already",
			quoteName(nh.key), quoteName(h.name), err, ejected, nodes)
	}
	streak := min(decayed(cfg, nh.streak, nh.until, now)+1, maxStreak(cfg)+1)
	d := ejectionTime(cfg, streak)
	failures := nh.failures
	nh.streak, nh.until, nh.trial, nh.failures, nh.refusedTold = streak, now.Add(d), true, 0, false
	h.publish(now)
	h.p.ejections.Add(1)
	return fmt.Sprintf("regcache: node %s (%s) of service %s ejected for %v after %d failures in a row: %v",
		quoteName(nh.key), nh.address, quoteName(h.name), d, failures, err)
}

// reached records that nh was reached at now. A node on trial is back in
// full; state with nothing left to remember is forgotten.
func (h *serviceHealth) reached(nh *nodeHealth, now time.Time) {
	h.mu.Lock()
	if h.gone || (*h.nodes.Load())[nh.key] != nh { // forgotten meanwhile
		h.mu.Unlock()
		return
	}
	cfg := h.p.cfg.Load()
	nh.failures = 0
	nh.refusedTold = false
	var msg string
	if nh.trial && !now.Before(nh.until) {
		nh.trial = false
		h.p.readmitted.Add(1)
		h.publish(now)
		msg = fmt.Sprintf("regcache: node %s (%s) of service %s is reachable again after its ejection",
			quoteName(nh.key), nh.address, quoteName(h.name))
	}
	if !nh.trial && decayed(cfg, nh.streak, nh.until, now) == 0 {
		h.forget(nh.key)
	} else {
		nh.bad.Store(true)
	}
	h.mu.Unlock()
	if msg != "" {
		h.p.log.Log(log.InfoLevel, msg)
	}
}

// put adds nh to the nodes. h.mu is held.
func (h *serviceHealth) put(nh *nodeHealth) {
	old := *h.nodes.Load()
	next := make(map[string]*nodeHealth, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[nh.key] = nh
	h.nodes.Store(&next)
}

// forget drops the state of the nodes with the given keys, and the
// service's state when no node is left. h.mu is held.
func (h *serviceHealth) forget(keys ...string) {
	old := *h.nodes.Load()
	next := make(map[string]*nodeHealth, len(old))
	for k, v := range old {
		next[k] = v
	}
	for _, k := range keys {
		delete(next, k)
	}
	h.nodes.Store(&next)
	if len(next) == 0 {
		h.drop()
	}
}

// drop removes h from the selector's services. h.mu is held.
func (h *serviceHealth) drop() {
	if h.gone {
		return
	}
	h.gone = true
	h.ejected.Store(nil)
	h.p.remove(h)
}

// reset forgets the whole service.
func (h *serviceHealth) reset() {
	h.mu.Lock()
	h.drop()
	h.mu.Unlock()
}

// publish rebuilds the list of ejected nodes that Next reads. h.mu is held.
func (h *serviceHealth) publish(now time.Time) {
	var set *ejectedSet
	for _, nh := range *h.nodes.Load() {
		if now.Before(nh.until) {
			if set == nil {
				set = &ejectedSet{}
			}
			set.keys = append(set.keys, nh.key)
			set.until = append(set.until, nh.until)
		}
	}
	h.ejected.Store(set)
}
