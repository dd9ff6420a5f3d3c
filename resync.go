package cache

import (
	"context"
	"slices"
	"time"

	"github.com/regcache/cache/internal/guard"
	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/watchset"
	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// Resync: after a watch stream is established, and when the registry comes
// back after failures, data fetched before may have missed changes, so
// every entry holding such data is re-validated at once, with one
// ListServices call where the registry lists nodes, and queued per-service
// refreshes for the rest.

const (
	// bulkMin is the number of cached services from which a resync asks
	// the registry for every service with one ListServices call, rather
	// than one GetService call per service.
	bulkMin = 8

	// maxBulkEvents bounds the watch events kept while a ListServices
	// call is out; beyond it the list is not used.
	maxBulkEvents = 4096

	// redialWait is how long a resync waits for the stream it redialled,
	// so that one round covers both; then it goes on without the stream.
	redialWait = 200 * time.Millisecond

	// maxLists bounds the ListServices calls out at once. A resync lists
	// only when none is out, or when the one out has been for policy.SlowCall: a
	// list that hangs costs the resyncs after it their list, not for
	// good.
	maxLists = 2
)

// bulkRecord holds the events that race a ListServices call, and the
// call's number (cache.calls): the list's answer replaces no data that a
// later call fetched.
type bulkRecord struct {
	seq      uint64
	started  time.Time
	events   []*registry.Result
	overflow bool
}

// recording reports whether a ListServices call is out, whose answer
// events are kept for.
func (w *workQueue) recording() bool { return len(w.lists) > 0 }

// record keeps ev for replay onto a ListServices answer, if one is out.
func (w *workQueue) record(ev *registry.Result) {
	for _, b := range w.lists {
		if len(b.events) < maxBulkEvents {
			b.events = append(b.events, ev)
		} else {
			b.overflow = true
		}
	}
}

// resyncLocked starts a resync of every cached entry. When the stream is
// down it reconnects the stream first and resyncs once the reconnect is
// done, so that one round covers both the gap and the stream.
func (c *cache) resyncLocked() {
	if c.stopped {
		return
	}
	set, perService := c.stream.(*watchset.Set)
	if (c.stream == nil && c.watching) || (perService && set.Failing()) {
		// (The set redials every failed watch when the registry comes
		// back, and tells when it has.)
		c.resyncPending = true
		c.resyncBy = c.now().Add(redialWait)
		select {
		case c.redial <- struct{}{}:
		default:
		}
		c.wake() // to resync anyway if the stream is not back by resyncBy
		return
	}
	c.epoch++
	c.wake()
}

// resyncDueLocked reports whether a resync is waiting for the stream or
// the maintainer, or running.
func (c *cache) resyncDueLocked() bool {
	return c.resyncPending || c.work.round < c.epoch || c.work.resyncing
}

// resync re-validates every cached entry whose data predates epoch: with
// one ListServices call where the registry lists nodes and enough services
// are cached, and with queued per-service refreshes for the rest.
func (c *cache) resync(epoch uint64) {
	var all []*entry
	c.entries.Range(func(_, v any) bool {
		all = append(all, v.(*entry))
		return true
	})
	c.mu.Lock()
	// A resync while a list is out, and not yet slow, asks per service;
	// the list settles what it can when it lands. While the registry is
	// held down (a stream established then), the list is the probe of
	// its probe interval, or there is none.
	bulk := !c.work.namesOnly && c.withData >= bulkMin && c.listGateLocked(c.now())
	c.mu.Unlock()
	c.unparkAll()
	if bulk {
		all = c.resyncByList(epoch, all)
	}
	for len(all) > 0 {
		n := min(len(all), scanChunk)
		now := c.now()
		c.mu.Lock()
		for _, e := range all[:n] {
			if e.data.Load() != nil && e.epoch < epoch && e.flight == nil && !e.gone {
				c.enqueueLocked(e)
				c.settleLocked(e, now)
			}
		}
		c.pumpLocked(now)
		c.mu.Unlock()
		all = all[n:]
	}
}

// unparkAll puts the entries that wait in the queue for their retry window
// back into the queue's line, a chunk at a time: after a resync, each may
// make the one early call that the resync allows, and the gate decides
// again. Without it, an entry parked before the registry came back (a
// probe during the outage opened its window) would wait for its window
// while the resync re-validates the others.
func (c *cache) unparkAll() {
	for more := true; more; {
		c.mu.Lock()
		w := &c.work
		for n := 0; n < scanChunk; n++ {
			it := w.later.Pop()
			if it == nil {
				break
			}
			w.fifo = append(w.fifo, it.Value) // still queued
		}
		more = w.later.Len() > 0
		c.pumpLocked(c.now())
		c.mu.Unlock()
	}
}

// resyncByList asks the registry for every service at once, and returns
// the entries of all that the list did not settle, to be re-validated one
// by one. The queue of refreshes waits for the list for policy.SlowCall at most:
// past that, every entry is returned, and the list settles what it still
// may when it lands.
func (c *cache) resyncByList(epoch uint64, all []*entry) []*entry {
	c.mu.Lock()
	c.calls++
	rec := &bulkRecord{seq: c.calls, started: c.now()}
	c.work.lists = append(c.work.lists, rec)
	c.mu.Unlock()
	done := make(chan []*entry, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, refreshTimeout)
		list, err := guard.ListServices(c.reg, ctx)
		cancel()
		done <- c.settleList(epoch, rec, all, list, err)
	}()
	t := time.NewTimer(policy.SlowCall)
	defer t.Stop()
	select {
	case rest := <-done:
		return rest
	case <-t.C:
		c.logf(log.DebugLevel, "regcache: resync: ListServices has not answered in %v; asking per service meanwhile", policy.SlowCall)
		return all
	case <-c.ctx.Done():
		return nil
	}
}

// settleList stores what a ListServices answer lists for the entries in
// all, and returns those it could not settle. A list with no nodes at all,
// or an error, settles nothing: a names-only or empty list never means
// that every service is gone. Services missing from a list are asked about
// one by one for the same reason. An entry whose data a later call fetched
// keeps it.
func (c *cache) settleList(epoch uint64, rec *bulkRecord, all []*entry, list []*registry.Service, err error) []*entry {
	listed := c.takeList(rec, list, err)
	if listed == nil {
		c.mu.Lock()
		c.endListLocked(rec)
		c.mu.Unlock()
		return all
	}
	return c.storeList(epoch, rec, all, listed)
}

// takeList counts a ListServices answer, and returns what it lists for
// the services cached, by name; nil when it settles nothing.
func (c *cache) takeList(rec *bulkRecord, list []*registry.Service, err error) map[string][]*registry.Service {
	var out outbox
	c.mu.Lock()
	c.stats.lists.Add(1)
	if err == nil {
		c.answerLocked("", c.now(), &out)
	}
	overflow := rec.overflow
	c.mu.Unlock()
	c.flush(&out)
	if err != nil {
		c.logf(log.DebugLevel, "regcache: resync: listing services failed, asking per service: %v", err)
		return nil
	}
	if overflow {
		return nil
	}
	listed := map[string][]*registry.Service{}
	nodes := false
	for _, s := range list {
		if s == nil || len(s.Nodes) == 0 {
			continue
		}
		nodes = true
		if _, cached := c.entries.Load(s.Name); cached {
			listed[s.Name] = append(listed[s.Name], s)
		}
	}
	if !nodes {
		if len(list) > 0 {
			c.mu.Lock()
			c.work.namesOnly = true
			c.mu.Unlock()
		}
		return nil
	}
	return listed
}

// storeList stores what listed holds for the entries in all, with the
// events that arrived since the list was asked for replayed onto it, and
// returns the entries it could not settle. Events are recorded until the
// last entry is stored: an event applied to an entry the list has not
// reached yet would otherwise be undone by the older answer.
func (c *cache) storeList(epoch uint64, rec *bulkRecord, all []*entry, listed map[string][]*registry.Service) []*entry {
	if len(all) == 0 {
		c.mu.Lock()
		c.endListLocked(rec)
		c.mu.Unlock()
		return nil
	}
	var rest []*entry
	raced := map[string][]*registry.Result{}
	indexed := 0 // of rec.events, in raced
	copies := make([][]*registry.Service, scanChunk)
	prints := make([]svcdata.Prints, scanChunk)
	for len(all) > 0 {
		chunk := all[:min(len(all), scanChunk)]
		all = all[len(chunk):]
		for i, e := range chunk {
			copies[i], prints[i] = nil, nil
			if svcs, ok := listed[e.name]; ok {
				// One that cannot be copied is asked about on its own.
				copies[i], _ = svcdata.CloneInLike(svcs, heldServices(e))
				prints[i] = svcdata.PrintsLike(copies[i], e.data.Load())
			}
		}
		var out outbox
		now := c.now()
		c.mu.Lock()
		for _, ev := range rec.events[indexed:] {
			raced[ev.Service.Name] = append(raced[ev.Service.Name], ev)
		}
		indexed = len(rec.events)
		for i, e := range chunk {
			switch {
			case e.gone || e.flight != nil || e.seq > rec.seq:
			case copies[i] == nil || rec.overflow:
				// Too many events to replay: asked about on its own.
				rest = append(rest, e)
			default:
				c.recoveredLocked(e, now, &out)
				c.storeAnswerLocked(e, epoch, rec.seq, copies[i], prints[i], raced[e.name], false, now, &out)
			}
		}
		if len(all) == 0 {
			c.endListLocked(rec)
		}
		c.pumpLocked(now)
		c.mu.Unlock()
		c.flush(&out)
	}
	return rest
}

// endListLocked stops recording events for rec.
func (c *cache) endListLocked(rec *bulkRecord) {
	c.work.lists = slices.DeleteFunc(c.work.lists, func(b *bulkRecord) bool { return b == rec })
}
