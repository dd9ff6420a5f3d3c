package core

import (
	"slices"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/svcdata"
)

// Resync: after a watch stream is established, and when the registry comes
// back after failures, data fetched before may have missed changes, so
// every entry holding such data is re-validated at once (advance), with
// one ListServices call where the registry lists nodes, and queued
// per-service refreshes for the rest. The maintainer runs each epoch's
// round (Tick), a chunk at a time; queued refreshes wait for the round.

const (
	// BulkMin is the number of services in doubt from which a resync
	// asks the registry for every service with one ListServices call,
	// rather than one GetService call per service (Config.BulkMin, when
	// zero).
	BulkMin = 8

	// maxListEvents bounds the watch events kept while a ListServices
	// call is out; beyond it the list is not used.
	maxListEvents = 4096

	// maxLists bounds the ListServices calls out at once. A resync lists
	// only when none is out, or when the one out has been for SlowCall: a
	// list that hangs costs the resyncs after it their list, not for
	// good.
	maxLists = 2
)

// round is one resync: the entries held when it started, whose data
// predates its epoch, are re-validated.
type round struct {
	epoch   uint64
	entries []*Entry
	// unparked is set once the entries waiting for a moment were put
	// back in line; queued counts the entries looked at for the line.
	unparked bool
	queued   int
	// list is the round's ListServices call, if any, waited for until
	// listBy or its end (listEnded).
	list      *Call
	listBy    time.Time
	listEnded bool
}

// startRound starts the round of the current epoch at now.
func (k *Core) startRound(now time.Time) {
	r := &round{epoch: k.epoch, entries: slices.Clone(k.all)}
	k.work.lastRound, k.work.round = k.epoch, r
	doubted := 0
	for _, e := range r.entries {
		if e.epoch < r.epoch && e.phase != PhaseFetching && e.Data.Load() != nil {
			doubted++
		}
	}
	// A resync while a list is out, and not yet slow, asks per service;
	// the list settles what it can when it lands. While the registry is
	// held down, the list is the probe of its probe interval, or there
	// is none. Data fetched since the epoch began needs no list.
	if !k.work.namesOnly && doubted >= k.cfg.BulkMin && k.listGate(now) {
		k.calls++
		c := &Call{ID: k.calls, List: true, Background: true, Started: now, epoch: r.epoch, startEpoch: r.epoch, list: &listCall{round: r}}
		k.work.lists = append(k.work.lists, c)
		r.list, r.listBy = c, now.Add(policy.SlowCall)
		k.rd.Calls = append(k.rd.Calls, c)
	}
}

// stepRound does a chunk of the running round at now, and returns when
// it is next due (zero: at once, with more to do; or done).
func (k *Core) stepRound(now time.Time) (next time.Time, more bool) {
	r := k.work.round
	if !r.unparked {
		if k.unpark(now) {
			return time.Time{}, true
		}
		r.unparked = true
	}
	if r.list != nil && !r.listEnded && now.Before(r.listBy) {
		return r.listBy, false
	}
	if r.list != nil && !r.listEnded && r.queued == 0 {
		k.log(Debug, "regcache: resync: ListServices has not answered in %v; asking per service meanwhile", policy.SlowCall)
	}
	n := min(len(r.entries)-r.queued, scanChunk)
	for _, e := range r.entries[r.queued : r.queued+n] {
		if e.epoch < r.epoch && (e.phase == PhaseIdle || e.phase == PhaseAbsent) {
			// With data or without: a service not found before the
			// stream was established may have been registered in the gap.
			k.move(e, PhaseQueued, time.Time{}, now)
			k.settle(e, now)
		}
	}
	r.queued += n
	if r.queued < len(r.entries) {
		return time.Time{}, true
	}
	k.work.round = nil
	k.pump(now)
	return time.Time{}, true
}

// Listed records a ListServices answer of call c at now, and reports
// whether its services are to be stored (ListStore, then ListEnd): a list
// with no nodes at all, or an error, settles nothing, since a names-only
// or empty list never means that every service is gone. names tells a
// list of names without nodes.
func (k *Core) Listed(c *Call, nodes, names bool, err error, now time.Time) (store bool) {
	k.Stats.Lists.Add(1)
	switch {
	case err != nil:
		k.log(Debug, "regcache: resync: listing services failed, asking per service: %v", err)
	case c.overflow:
		k.answer("", now)
	case !nodes:
		k.answer("", now)
		if names {
			k.work.namesOnly = true
		}
	default:
		k.answer("", now)
		return true
	}
	k.ListEnd(c, now)
	return false
}

// Entries are the entries a list call may settle: those held when its
// round started.
func (c *Call) Entries() []*Entry { return c.list.round.entries }

// listCall is what a list call keeps of its own: the resync it belongs
// to, and its events by service, indexed up to events[indexed].
type listCall struct {
	round   *round
	raced   map[string][]*registry.Result
	indexed int
}

// ListStore stores what list call c lists for entries, each entry's own
// copy in copies (nil for a service the list does not hold, or could not
// copy) with its prints, replaying the events that arrived since the list
// was asked for. An entry whose data a later call fetched keeps it; one
// the list does not settle is re-validated on its own by the round.
func (k *Core) ListStore(c *Call, entries []*Entry, copies [][]*registry.Service, prints []svcdata.Prints, now time.Time) {
	l := c.list
	if l.raced == nil {
		l.raced = map[string][]*registry.Result{}
	}
	for _, ev := range c.events[l.indexed:] {
		l.raced[ev.Service.Name] = append(l.raced[ev.Service.Name], ev)
	}
	l.indexed = len(c.events)
	for i, e := range entries {
		switch s := e.Data.Load(); {
		case e.phase == PhaseGone || e.phase == PhaseFetching || e.seq > c.ID:
		case copies[i] == nil || c.overflow:
			// Asked about on its own.
		case s != nil && s.Hold == svcdata.Emptied:
			// A delete emptied it after the list was asked for, or the
			// list lags (etcd's serializable read): the service waits
			// for its own confirmation, which the list cannot give.
		default:
			k.recovered(e, now)
			k.storeAnswer(e, c, copies[i], prints[i], now)
		}
	}
	k.pump(now)
}

// ListEnd stops recording events for list call c: its answer is stored,
// or useless. The round it belongs to goes on without waiting for it.
func (k *Core) ListEnd(c *Call, now time.Time) {
	k.work.lists = slices.DeleteFunc(k.work.lists, func(l *Call) bool { return l == c })
	if r := c.list.round; r.list == c && !r.listEnded {
		r.listEnded = true
		k.wake()
	}
	c.events, c.list.raced = nil, nil
}
