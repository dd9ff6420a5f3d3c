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

// timedQueue is a min-heap of entries by a time: dataless entries by when
// they may be dropped (the sweep), and queued entries by when their retry
// window closes. The times do not come in order (windows differ in length
// under adaptive retry), hence a heap.
type timedQueue []timedEntry

type timedEntry struct {
	e  *entry
	at time.Time
}

func (q timedQueue) Len() int           { return len(q) }
func (q timedQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q timedQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *timedQueue) Push(x any)        { *q = append(*q, x.(timedEntry)) }
func (q *timedQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = timedEntry{}
	*q = old[:len(old)-1]
	return it
}

// peek returns the item due first, if any.
func (q timedQueue) peek() (timedEntry, bool) {
	if len(q) == 0 {
		return timedEntry{}, false
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
	e.sweepAt = c.moment(until)
	heap.Push(&c.sweep, timedEntry{e: e, at: until})
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
		if e := it.e; e.data.Load() == nil && e.sweepAt == c.moment(it.at) {
			e.sweepAt = 0
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
			e.lastRead = c.moment(now)
		} else if now.Sub(c.time(e.lastRead)) >= c.opts.IdleEviction && c.allowsLocked(e, now) {
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
