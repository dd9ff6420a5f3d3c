package etcd

import (
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// closingWatches are the scoped watcher's watches cancelled while their
// events may still reach the cache: by prefix, in the order cancelled, and
// by id. A watch of the same keys opened meanwhile starts no later than
// where they are (startAfter), so that whatever of theirs the cache
// applies over data it fetched anew since is corrected after them. The
// watcher's mu guards it.
type closingWatches struct {
	byPrefix map[string][]*keyWatch
	byID     map[int64]*keyWatch
}

func newClosingWatches() closingWatches {
	return closingWatches{byPrefix: make(map[string][]*keyWatch), byID: make(map[int64]*keyWatch)}
}

// add remembers kw, just cancelled.
func (c *closingWatches) add(kw *keyWatch) {
	c.byPrefix[kw.prefix] = append(c.byPrefix[kw.prefix], kw)
	c.byID[kw.id] = kw
}

// received records a response of the cancelled kw. Its events received
// before etcd ended it still reach the cache, in order, and are returned;
// etcd's end of it (a cancellation, or a compaction) finishes it, and the
// watches the cache is done with as of the change numbered next are
// forgotten.
func (c *closingWatches) received(kw *keyWatch, resp *pb.WatchResponse, next uint64) scopedItem {
	if resp.Canceled || resp.CompactRevision != 0 {
		kw.finished = true
		c.sweep(next)
		return scopedItem{}
	}
	return kw.eventsOf(resp)
}

// finishAll marks every watch finished: the end of the stream they were
// on ended them.
func (c *closingWatches) finishAll() {
	for _, kw := range c.byID {
		kw.finished = true
	}
}

// sweep forgets the watches the cache is done with as of the change
// numbered seq, and so for every change after it.
func (c *closingWatches) sweep(seq uint64) {
	for p, list := range c.byPrefix {
		kept := list[:0]
		for _, kw := range list {
			if kw.doneBefore(seq) {
				delete(c.byID, kw.id)
			} else {
				kept = append(kept, kw)
			}
		}
		if len(kept) == 0 {
			delete(c.byPrefix, p)
		} else {
			c.byPrefix[p] = kept
		}
	}
}

// startAfter returns the revision after which a watch of the keys under p,
// opened for the change numbered seq, starts: rev, or, if a watch of the
// same keys that the cache is not done with as of that change is before
// it, the last revision that watch delivered.
func (c *closingWatches) startAfter(p string, seq uint64, rev int64) int64 {
	for _, old := range c.byPrefix[p] {
		if old.next > 0 && !old.doneBefore(seq) {
			rev = min(rev, old.next-1)
		}
	}
	return rev
}

// delivery is how far the cache is with a watch's responses, which tells
// when a cancelled watch can be forgotten (doneBefore).
type delivery struct {
	// finished is set, under the watcher's mu, once etcd will send no
	// more of the watch, after it is cancelled.
	finished bool
	// queued counts the responses passed to Next and not done with, and
	// doneSeq is the count of changes to the services held
	// (watchscope.Scope.Seq) when Next was last done with one, the cache
	// having applied what it delivered of it. Next, which holds no lock,
	// writes them.
	queued  atomic.Int32
	doneSeq atomic.Uint64
}

// passed counts a response passed to Next.
func (d *delivery) passed() { d.queued.Add(1) }

// doneWith records that Next is done with a response, the count of
// changes to the services held being seq.
func (d *delivery) doneWith(seq uint64) {
	d.doneSeq.Store(seq)
	d.queued.Add(-1)
}

// doneBefore reports whether the cache is done with the cancelled watch as
// of the change numbered seq: etcd sends no more of it, and the cache
// applied what Next delivered of it before that change.
func (d *delivery) doneBefore(seq uint64) bool {
	return d.finished && d.queued.Load() == 0 && d.doneSeq.Load() < seq
}
