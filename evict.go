package cache

import (
	"container/heap"
	"time"
)

// Dropping entries. An entry with no data is kept only for a while (its
// retry window, a minute after a failure, a retry interval after the delete
// of its last node), so lookups of ever-new names (typos, scans, user input
// behind a gateway) cannot grow memory without bound. With WithIdleEviction,
// entries with data that nobody reads are dropped too.

// sweepQueue holds dataless entries ordered by when they may be dropped.
// Their times differ in length under adaptive retry, so this is a min-heap.
type sweepQueue []sweepItem

type sweepItem struct {
	e  *entry
	at time.Time
}

func (q sweepQueue) Len() int           { return len(q) }
func (q sweepQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q sweepQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *sweepQueue) Push(x any)        { *q = append(*q, x.(sweepItem)) }
func (q *sweepQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = sweepItem{}
	*q = old[:len(old)-1]
	return it
}

// peek returns the item due first, if any.
func (q sweepQueue) peek() (sweepItem, bool) {
	if len(q) == 0 {
		return sweepItem{}, false
	}
	return q[0], true
}

// forgetLocked arranges for e, which has just lost its data, to be dropped
// with its throttle state at until, or once its retry window closes if
// that is later.
func (c *cache) forgetLocked(e *entry, until, now time.Time) {
	if w := e.throttle.opensAt(c.opts.MinimumRetryInterval); w.After(until) {
		until = w
	}
	if !until.After(now) {
		c.dropLocked(e)
		return
	}
	e.sweepAt = until
	heap.Push(&c.sweep, sweepItem{e: e, at: until})
	if c.sweep[0].e == e {
		c.wake()
	}
}

// sweepLocked drops the dataless entries that are due. It costs O(log n)
// per entry dropped and O(1) otherwise, so the read path may run it on
// every slow lookup.
func (c *cache) sweepLocked(now time.Time) {
	for {
		it, ok := c.sweep.peek()
		if !ok || it.at.After(now) {
			return
		}
		heap.Pop(&c.sweep)
		if e := it.e; e.data.Load() == nil && e.sweepAt.Equal(it.at) {
			e.sweepAt = time.Time{}
			c.dropLocked(e)
		}
	}
}

// evictIdle drops the entries not read for IdleEviction. A read since the
// last scan counts as a read at this one, so an entry is dropped between d
// and d + d/4 after its last read, never before. An open retry window is
// kept: dropping it would let the next lookup call the registry too soon.
func (c *cache) evictIdle(now time.Time) {
	c.eachEntry(func(e *entry) {
		if e.read.Swap(false) {
			e.lastRead = now
		} else if now.Sub(e.lastRead) >= c.opts.IdleEviction && c.allowsLocked(e, now) {
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
