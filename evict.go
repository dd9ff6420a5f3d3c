package cache

import (
	"time"
)

// Dropping entries, by the queue c.sweep of when each may go. An entry with no data is kept only for a while (its
// retry window, a minute after a failure, a retry interval after the delete
// of its last node), so lookups of ever-new names (typos, scans, user input
// behind a gateway) cannot grow memory without bound. With WithIdleEviction,
// entries with data that nobody reads are dropped too.

// forgetLocked arranges for e, which has just lost its data, to be dropped
// with its throttle state at until, or once its retry window closes if
// that is later.
func (c *cache) forgetLocked(e *entry, until, now time.Time) {
	if w := e.throttle.OpensAt(c.opts.MinimumRetryInterval); w.After(until) {
		until = w
	}
	if !until.After(now) {
		c.dropLocked(e)
		return
	}
	e.sweepAt = c.moment(until)
	c.sweep.Push(e, until)
	if c.sweep.Peek().Value == e {
		c.wake()
	}
}

// sweepLocked drops the dataless entries that are due. It costs O(log n)
// per entry dropped and O(1) otherwise, so the read path may run it on
// every slow lookup.
func (c *cache) sweepLocked(now time.Time) {
	for {
		it := c.sweep.PopDue(now)
		if it == nil {
			return
		}
		if e := it.Value; e.data.Load() == nil && e.sweepAt == c.moment(it.At) {
			e.sweepAt = 0
			c.dropLocked(e)
		}
	}
}

// evictIdle drops the entries not read for IdleEviction. A read since the
// last scan counts as a read at this one, so an entry is dropped between d
// and d + d/4 after its last read, never before. An open retry window is
// kept, even where a resync allows its early call: dropping it would let
// the next lookup call the registry too soon, and then early.
func (c *cache) evictIdle(now time.Time) {
	c.eachEntry(func(e *entry) {
		if e.read.Swap(false) {
			e.lastRead = c.moment(now)
		} else if now.Sub(c.time(e.lastRead)) >= c.opts.IdleEviction && c.windowClosedLocked(e, now) {
			c.dropLocked(e)
		}
	})
}

// scanChunk is how many entries a scan handles per hold of the lock, so
// that lookups never wait long behind a scan of a large cache.
const scanChunk = 64

// eachEntry calls f for every entry, with mu held, a chunk at a time. The
// map is walked without the lock; an entry dropped meanwhile is skipped.
func (c *cache) eachEntry(f func(e *entry)) {
	batch := make([]*entry, 0, scanChunk)
	run := func() {
		c.mu.Lock()
		for _, e := range batch {
			if !e.gone && !c.stopped {
				f(e)
			}
		}
		c.mu.Unlock()
		batch = batch[:0]
	}
	c.entries.Range(func(_, v any) bool {
		batch = append(batch, v.(*entry))
		if len(batch) == scanChunk {
			run()
		}
		return true
	})
	if len(batch) > 0 {
		run()
	}
}

// windowClosedLocked reports whether e's retry window has closed, the
// early call that a resync allows aside.
func (c *cache) windowClosedLocked(e *entry, now time.Time) bool {
	ok, _ := e.throttle.Allows(now, c.opts.MinimumRetryInterval, false)
	return ok
}
