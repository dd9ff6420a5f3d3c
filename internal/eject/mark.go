package eject

import (
	"fmt"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/quote"
)

// Mark records the outcome of one attempt on node of service, as
// go-micro's client reports it after every attempt: a failure to reach
// the node counts towards its ejection (a refused connection ejects it
// at once), an answer (a handler's error included) clears its failures,
// and an error about the request alone says nothing of the node, so a
// trial that this attempt held goes to the next caller.
//
// Every path costs the same however many services and nodes have state,
// but for two that are amortized: the first failure after the cached list
// changed indexes the new list, once per list, and one failure per base
// ejection time sweeps idle state. A success takes no lock and writes
// nothing unless the node failed lately, so that the calls of a healthy
// service never contend.
func (p *Health) Mark(service string, node *registry.Node, err error) {
	if node == nil {
		return
	}
	switch o := classify(err); o {
	case reached:
		if h := p.lookup(service); h != nil {
			if nh := h.node(node); nh != nil {
				if now := p.now(); nh.needsReached(p.nanos(now)) {
					h.reached(nh, now)
				}
			}
		}
	case unreachable, absent:
		if p.cfg.Load().off() {
			return
		}
		p.failures.Add(1)
		now := p.now()
		for {
			// The cached list, to count the share among its nodes, is
			// indexed before the service's lock is taken.
			h := p.serviceFor(service)
			if done := h.failed(node, err, o == absent, h.indexFor(nil), now); done {
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

// needsReached reports whether a success of nh at now (Health.nanos) has
// anything to change: failures to clear, a trial or a
// claim to end, or a state to forget.
func (nh *nodeHealth) needsReached(now int64) bool {
	s := nh.state()
	return s == stateFailing || s == stateEjected || s == stateTrial || s == stateLimbo ||
		nh.claim.Load() != nil || now >= nh.forgetAt.Load()
}

// failed records a failure to reach node at now, idx being the cached
// list; absent says that its host refused the connection, which ejects
// it at once. It returns false if h was dropped meanwhile; the caller
// then retries with the service's new state.
func (h *serviceHealth) failed(node *registry.Node, err error, absent bool, idx *listIndex, now time.Time) bool {
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
	h.settleLocked(nh, h.p.nanos(now))
	if s := nh.state(); s == stateLimbo || s == stateLimboReached {
		// In limbo, the registry's word is against it already: its
		// first failure drops it.
		nh.claim.Store(nil)
		h.dropNodeLocked(nh, inFail)
		h.unlock()
		return true
	}
	// A failure while the node is ejected is of an attempt that began
	// before the ejection: the node is out already.
	if nh.state() != stateEjected {
		nh.failures++
		nh.lastFail = now
		if nh.failures >= cfg.EjectAfter || nh.state() == stateTrial || absent {
			msg = h.ejectLocked(nh, err, now, cfg)
		} else {
			h.move(nh, inFail, stateFailing)
		}
	}
	nh.claim.Store(nil)
	h.unlock()
	if msg != "" {
		h.p.log.Log(log.WarnLevel, msg)
	}
	return true
}

// addLocked creates the state of node; idx tells whether it is listed.
// h.mu is held.
func (h *serviceHealth) addLocked(node *registry.Node, idx *listIndex) *nodeHealth {
	nh := &nodeHealth{key: nodeKey(node), address: node.Address}
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
func (h *serviceHealth) ejectLocked(nh *nodeHealth, err error, now time.Time, cfg *Config) string {
	if nh.listed {
		ejected := h.ejectedLocked(now)
		if !mayEject(cfg, ejected, h.listed()) {
			if nh.refusedTold {
				if nh.state() != stateTrial {
					h.move(nh, inFail, stateFailing)
				}
				return ""
			}
			if nh.state() != stateTrial {
				h.move(nh, inFail, stateFailing)
			}
			h.p.refused.Add(1)
			nh.refusedTold = true
			return fmt.Sprintf("regcache: node %s of service %s keeps failing (%v) but stays in rotation: %d of its %d nodes are ejected already",
				quote.Name(nh.key), quote.Name(h.name), err, ejected, h.listed())
		}
	}
	streak := min(decayed(cfg, nh.streak, h.p.at(nh.until.Load()), now)+1, maxStreak(cfg)+1)
	d := ejectionTime(cfg, streak)
	failures := nh.failures
	nh.streak, nh.failures, nh.refusedTold = streak, 0, false
	nh.reason = capReason(err)
	h.setUntil(nh, now.Add(d), cfg)
	h.move(nh, inFail, stateEjected)
	if nh.listed {
		h.endsPut(nh)
		h.p.ejections.Add(1)
	}
	return fmt.Sprintf("regcache: node %s (%s) of service %s ejected for %v after %d %s in a row: %v",
		quote.Name(nh.key), nh.address, quote.Name(h.name), d, failures, plural(failures, "failure", "failures"), err)
}

// setUntil sets the end of nh's ejection, and so when its ejections in a
// row will have decayed. h.mu is held.
func (h *serviceHealth) setUntil(nh *nodeHealth, until time.Time, cfg *Config) {
	nh.until.Store(h.p.nanos(until))
	nh.forgetAt.Store(h.p.nanos(until.Add(time.Duration(nh.streak) * cfg.BaseEjection)))
}

// ejectedLocked returns how many listed nodes are ejected at now. h.mu is
// held.
func (h *serviceHealth) ejectedLocked(now time.Time) int {
	t := h.p.nanos(now)
	for it := h.ends.Peek(); it != nil && !it.Value.ejectedAt(t); it = h.ends.Peek() {
		h.endsRemove(it.Value)
	}
	return h.ends.Len()
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
	nh.claim.Store(nil)
	switch nh.state() {
	case stateLimbo:
		h.move(nh, inReached, stateLimboReached)
		fallthrough
	case stateLimboReached:
		h.mu.Unlock()
		return
	}
	nh.failures = 0
	nh.refusedTold = false
	h.settleLocked(nh, h.p.nanos(now))
	until := h.p.at(nh.until.Load())
	var msg string
	s := nh.state()
	if s == stateTrial {
		if nh.listed {
			h.p.readmitted.Add(1)
		}
		msg = fmt.Sprintf("regcache: node %s (%s) of service %s is reachable again after its ejection",
			quote.Name(nh.key), nh.address, quote.Name(h.name))
	}
	switch {
	case s == stateEjected: // an attempt from before the ejection: it holds
	case decayed(cfg, nh.streak, until, now) == 0:
		h.dropNodeLocked(nh, inReached)
		if h.count == 0 {
			h.dropLocked()
		}
	default:
		h.move(nh, inReached, stateRecovering)
	}
	h.mu.Unlock()
	if msg != "" {
		h.p.log.Log(log.InfoLevel, msg)
	}
}

// plural returns one if n is 1, and many otherwise.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
