package cache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// Reconnect backoff of the watch stream: capped exponential with full
// jitter, reset once a stream has stayed up for backoffResetAfter.
const (
	backoffBase       = 100 * time.Millisecond
	backoffCap        = 30 * time.Second
	backoffResetAfter = time.Minute

	// maxRevalidations bounds the refreshes the maintainer runs at once
	// after a reconnect, so that a recovering registry sees a trickle
	// rather than one call per cached service at the same instant.
	maxRevalidations = 4

	// maxEmptyNexts is how many results in a row with neither an event
	// nor an error end a stream.
	maxEmptyNexts = 64
)

var errStopped = errors.New("regcache: stopped")

// backoff is the wait before reconnect attempt n (n ≥ 1): a uniform draw
// from [0, min(cap, base·2^(n-1))], given u uniform in [0, 1).
func backoff(n int, u float64) time.Duration {
	ceiling := backoffCap
	if n < 30 {
		if d := backoffBase << (n - 1); d < backoffCap {
			ceiling = d
		}
	}
	return time.Duration(u * float64(ceiling+1))
}

// startWatcherLocked starts the watcher and the maintainer with the first
// cached entry. They never start after Stop.
func (c *cache) startWatcherLocked() {
	if c.watching || c.stopped {
		return
	}
	c.watching = true
	c.wg.Add(2)
	go c.watch()
	go c.maintain()
}

// wake tells the maintainer that there is work. It never blocks.
func (c *cache) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// sleep waits for d or for Stop, and reports whether it was not stopped.
func (c *cache) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// watch owns the single watch stream for all services: it opens it,
// applies its events and reopens it with backoff until Stop.
func (c *cache) watch() {
	defer c.wg.Done()
	attempt := 0
	connected := true // so that the first failure is logged
	for {
		w, err := c.openStream()
		if errors.Is(err, errStopped) {
			return
		}
		if err == nil {
			if !connected {
				c.flush(&outbox{
					logs:   []logLine{{level: log.InfoLevel, format: "regcache: watch stream reconnected"}},
					events: []Event{{Kind: WatchReconnected, Time: c.now()}},
				})
			}
			connected = true
			opened := c.now()
			err = c.consume(w)
			c.closeStream(w)
			if c.now().Sub(opened) >= backoffResetAfter {
				attempt = 0
			}
		}
		if c.ctx.Err() != nil {
			return
		}
		if connected {
			c.flush(&outbox{
				logs:   []logLine{{level: log.WarnLevel, format: "regcache: watch stream lost, reconnecting: %v", args: []any{err}}},
				events: []Event{{Kind: WatchDisconnected, Err: err, Time: c.now()}},
			})
			connected = false
		}
		attempt++
		if !c.sleep(backoff(attempt, rand.Float64())) {
			return
		}
	}
}

// openStream opens a watch stream and publishes it for Stop. Each stream
// established starts a new epoch, which makes the maintainer re-validate
// data fetched before it.
func (c *cache) openStream() (w registry.Watcher, err error) {
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("registry %s panicked in Watch: %v", c.reg.String(), r)
			}
		}()
		w, err = c.reg.Watch(registry.WatchContext(c.ctx))
	}()
	if err != nil {
		return nil, err
	}
	if w == nil {
		return nil, errors.New("registry returned a nil watcher")
	}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		stopStream(w)
		return nil, errStopped
	}
	c.stream = w
	c.epoch++
	c.streams++
	if c.streams > 1 {
		c.stats.reconnects.Add(1)
	}
	c.mu.Unlock()
	c.wake()
	return w, nil
}

// closeStream stops w unless Stop already took it.
func (c *cache) closeStream(w registry.Watcher) {
	c.mu.Lock()
	mine := c.stream == w
	if mine {
		c.stream = nil
	}
	c.mu.Unlock()
	if mine {
		stopStream(w)
	}
}

// stopStream stops a watcher; a panic in it is recovered.
func stopStream(w registry.Watcher) {
	defer func() { _ = recover() }()
	w.Stop()
}

// consume applies events until the stream fails. A panic in Next is a
// stream error.
func (c *cache) consume(w registry.Watcher) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("registry %s panicked in Next: %v", c.reg.String(), r)
		}
	}()
	empty := 0
	for {
		res, err := w.Next()
		if err != nil {
			return err
		}
		if res != nil {
			empty = 0
		} else if empty++; empty == maxEmptyNexts {
			// Neither an event nor an error, again and again: a
			// watcher that will spin without blocking. Reconnect with
			// backoff rather than burn a core.
			return errors.New("watcher keeps returning neither an event nor an error")
		}
		c.apply(res)
	}
}

// apply applies one watch event to the entry it names. Events for services
// that are not cached are ignored and never cause a registry call.
func (c *cache) apply(res *registry.Result) {
	if res == nil || res.Service == nil {
		c.stats.eventsIgnored.Add(1)
		return
	}
	name := res.Service.Name
	held, ok := c.entries.Load(name)
	if !ok {
		c.stats.eventsIgnored.Add(1)
		return
	}
	// Copy on the way in, outside the lock: the event may alias the
	// watcher's or the registry's memory.
	ev, err := cloneEvent(res, heldServices(held.(*entry)))
	if err != nil {
		// Too large to copy, so it cannot be applied: no nodes make
		// applyEvent refuse it, which invalidates the entry.
		ev = &registry.Result{Action: res.Action, Service: &registry.Service{Name: name}}
	}

	var out outbox
	c.mu.Lock()
	if v, ok := c.entries.Load(name); ok {
		c.applyLocked(name, v.(*entry), ev, &out)
	} else {
		c.stats.eventsIgnored.Add(1)
	}
	c.mu.Unlock()
	c.flush(&out)
}

func (c *cache) applyLocked(name string, e *entry, ev *registry.Result, out *outbox) {
	if f := e.flight; f != nil {
		if len(f.events) < maxFlightEvents {
			f.events = append(f.events, ev)
		} else {
			f.overflow = true
		}
	}
	snap := e.data.Load()
	if snap == nil {
		c.stats.eventsIgnored.Add(1)
		return
	}
	base := snap.services
	if snap.kept {
		// Last known nodes kept by WithLastKnownNodes: deletes change
		// nothing, and nodes the registry shows replace them.
		if ev.Action == "delete" {
			c.stats.eventsApplied.Add(1)
			return
		}
		base = nil
	}
	now := c.now()
	next, ok := applyEvent(base, ev)
	if ok {
		c.stats.eventsApplied.Add(1)
	}
	switch {
	case !ok:
		// Invalidate: stale now, refreshed by the next reader under the
		// throttle.
		c.stats.eventsInvalidating.Add(1)
		if !e.staleTold {
			e.staleTold = true
			out.event(ServiceStale, name, nil, now)
		}
		c.storeLocked(e, snap.stale(snap.services, snap.kept))
	case !hasNodes(next) && c.opts.LastKnownNodes:
		out.log(log.WarnLevel, "regcache: a delete event left service %q with no nodes; keeping the last known ones", name)
		out.event(LastKnownNodesKept, name, nil, now)
		c.storeLocked(e, snap.stale(snap.services, true))
	case !hasNodes(next):
		c.storeLocked(e, nil)
		c.forgetLocked(name, e, now)
	case snap.kept:
		out.log(log.InfoLevel, "regcache: service %q has nodes again; last known nodes released", name)
		out.event(LastKnownNodesReleased, name, nil, now)
		c.storeLocked(e, snap.stale(next, false))
	default:
		// An event never extends the expiry: the TTL refresh is the
		// safety net for the events that real plugins lose.
		c.storeLocked(e, &snapshot{services: next, expires: snap.expires, refreshAt: snap.refreshAt, refreshed: snap.refreshed})
	}
}

// applyEvent returns the services that result from applying ev to cur,
// without changing cur or ev. ok is false for an event that cannot be
// applied: an unknown action, or one that names no node.
//
// create and update upsert the event's nodes, by Id, into the version of
// the same name, taking the event's metadata and endpoints; a new version is
// added. delete removes the event's nodes, and drops a version with no
// nodes left.
func applyEvent(cur []*registry.Service, ev *registry.Result) (next []*registry.Service, ok bool) {
	s := ev.Service
	if len(s.Nodes) == 0 {
		return nil, false
	}
	idx := -1
	for i, old := range cur {
		if old.Version == s.Version {
			idx = i
			break
		}
	}
	switch ev.Action {
	case "create", "update":
		if idx < 0 {
			next = make([]*registry.Service, len(cur), len(cur)+1)
			copy(next, cur)
			return append(next, s), true
		}
		merged := *s
		merged.Nodes = upsertNodes(cur[idx].Nodes, s.Nodes)
		return replaceAt(cur, idx, &merged), true
	case "delete":
		if idx < 0 {
			return cur, true
		}
		nodes := removeNodes(cur[idx].Nodes, s.Nodes)
		if len(nodes) == 0 {
			next = make([]*registry.Service, 0, len(cur)-1)
			next = append(next, cur[:idx]...)
			return append(next, cur[idx+1:]...), true
		}
		trimmed := *cur[idx]
		trimmed.Nodes = nodes
		return replaceAt(cur, idx, &trimmed), true
	default:
		return nil, false
	}
}

func replaceAt(cur []*registry.Service, i int, s *registry.Service) []*registry.Service {
	next := make([]*registry.Service, len(cur))
	copy(next, cur)
	next[i] = s
	return next
}

// smallMerge is the size (old × new nodes) up to which merges compare
// nodes pairwise; larger ones index by Id, so that an event naming every
// node of a 10 000-node service costs linear time under the cache's lock.
const smallMerge = 64

// upsertNodes keeps the order of old, replacing nodes with a matching Id,
// and appends the new ones.
func upsertNodes(old, add []*registry.Node) []*registry.Node {
	out := make([]*registry.Node, len(old), len(old)+len(add))
	copy(out, old)
	if len(old)*len(add) <= smallMerge {
	next:
		for _, n := range add {
			for i, o := range out {
				if o.Id == n.Id {
					out[i] = n
					continue next
				}
			}
			out = append(out, n)
		}
		return out
	}
	at := make(map[string]int, len(out)+len(add))
	for i := len(out) - 1; i >= 0; i-- { // the first of duplicate Ids wins, as above
		at[out[i].Id] = i
	}
	for _, n := range add {
		if i, ok := at[n.Id]; ok {
			out[i] = n
			continue
		}
		at[n.Id] = len(out)
		out = append(out, n)
	}
	return out
}

// removeNodes returns old without the nodes whose Ids del names.
func removeNodes(old, del []*registry.Node) []*registry.Node {
	out := make([]*registry.Node, 0, len(old))
	if len(old)*len(del) <= smallMerge {
	keep:
		for _, o := range old {
			for _, d := range del {
				if o.Id == d.Id {
					continue keep
				}
			}
			out = append(out, o)
		}
		return out
	}
	gone := make(map[string]bool, len(del))
	for _, d := range del {
		gone[d.Id] = true
	}
	for _, o := range old {
		if !gone[o.Id] {
			out = append(out, o)
		}
	}
	return out
}

// maintain re-validates data fetched before the current watch stream was
// established, drops dataless entries whose throttle window closed, and
// evicts idle entries. It sleeps until there is work, and exits on Stop.
func (c *cache) maintain() {
	defer c.wg.Done()
	for {
		wait := c.maintainOnce(c.now())
		var t *time.Timer
		var timer <-chan time.Time
		if wait > 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-c.ctx.Done():
		case <-c.kick:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if c.ctx.Err() != nil {
			return
		}
	}
}

// maintainOnce does the work that is due and returns how long until more
// is due, or 0 if nothing is pending. The snapshot file is written after mu
// is released.
func (c *cache) maintainOnce(now time.Time) (wait time.Duration) {
	write := false
	defer func() {
		if write {
			c.persist()
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return 0
	}
	c.sweepLocked(now)
	var next time.Time
	if it, ok := c.sweep.peek(); ok {
		next = it.at
	}
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if c.dirty {
		due := c.lastWrite.Add(SnapshotInterval)
		if !now.Before(due) {
			write = true
		} else {
			soonest(due)
		}
	}
	interval := c.opts.MinimumRetryInterval
	evict := false
	if d := c.opts.IdleEviction; d > 0 {
		if !now.Before(c.nextEviction) {
			evict = true
			c.nextEviction = now.Add(d / 4)
		}
		soonest(c.nextEviction)
	}
	revalidate := c.revalidated < c.epoch
	if !evict && !revalidate {
		return c.until(now, next)
	}
	pending := false
	c.entries.Range(func(k, v any) bool {
		e := v.(*entry)
		if evict {
			// A read since the last scan counts as a read now, so an
			// entry is dropped between d and d + d/4 after its last
			// read, never before.
			if e.read.Swap(false) {
				e.lastRead = now
			} else if e.flight == nil && now.Sub(e.lastRead) >= c.opts.IdleEviction &&
				e.throttle.allows(now, interval) {
				// An open throttle window is kept: dropping it would
				// let the next lookup call the registry too soon.
				c.dropLocked(k.(string), e)
				return true
			}
		}
		if !revalidate {
			return true
		}
		// Data from an earlier epoch, or a refresh started in one (a
		// cold fill whose data is not stored yet) needs re-validating.
		old := e.data.Load() != nil && e.epoch < c.epoch
		oldFlight := e.flight != nil && e.flight.epoch < c.epoch
		if !old && !oldFlight {
			return true
		}
		pending = true
		switch {
		case e.flight != nil:
			// Its end wakes us (see refresh).
		case !e.throttle.allows(now, interval):
			soonest(e.throttle.lastAttempt.Add(e.throttle.interval(interval)))
		case c.reval >= maxRevalidations:
			// A finishing revalidation wakes us.
		default:
			c.reval++
			c.startLocked(k.(string), e, now, true)
		}
		return true
	})
	if revalidate && !pending {
		c.revalidated = c.epoch
	}
	return c.until(now, next)
}

// until is how long the maintainer sleeps to wake at next; 0 for never.
func (c *cache) until(now, next time.Time) time.Duration {
	if next.IsZero() {
		return 0
	}
	return max(next.Sub(now), time.Millisecond)
}
