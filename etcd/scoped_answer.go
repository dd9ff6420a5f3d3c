package etcd

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"go-micro.dev/v4/logger"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// received records one response and returns the events to deliver, the
// services to fetch again, or the error that ends the stream.
func (w *scopedWatcher) received(resp *pb.WatchResponse) (item scopedItem, revalidate []string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteRevisionLocked(resp.Header.GetRevision())
	if resp.Created {
		// Before the id: etcd's refusal has the id of its answer to a
		// progress request, and a revision that does not tell how far
		// any watch is.
		revalidate, err = w.answeredLocked(resp)
		return item, revalidate, err
	}
	switch id := resp.WatchId; {
	case id == sentinelID:
		if resp.Canceled {
			return item, nil, fmt.Errorf("etcd: watch of %s cancelled: %s", prefix, resp.CancelReason)
		}
		// Progress, or a stray value at the prefix.
	case id == progressID:
		w.progressLocked(resp.Header.GetRevision())
	case w.byID[id] != nil:
		return w.receivedOpenLocked(w.byID[id], resp)
	case w.closing.byID[id] != nil:
		return w.closing.received(w.closing.byID[id], resp, w.applied+1), nil, nil
	}
	// Otherwise a watch the cache is done with.
	return item, nil, nil
}

// progressLocked records etcd's answer to a progress request: every watch
// on the stream has sent all it had up to rev, so a quiet watch resumes
// after it, not at its start, which etcd may have compacted since.
func (w *scopedWatcher) progressLocked(rev int64) {
	for _, kw := range w.byID {
		if kw.created {
			kw.next = max(kw.next, rev+1)
		}
	}
}

// answeredLocked records etcd's answer to the first creation awaiting it:
// the watch created, or refused. It returns the services to fetch again:
// of a watch created later than asked for (a compaction) or after a
// refusal, whose events in between are lost, and of a watch refused. An
// answer that is neither ends the stream.
func (w *scopedWatcher) answeredLocked(resp *pb.WatchResponse) (revalidate []string, err error) {
	if len(w.awaiting) == 0 {
		return nil, fmt.Errorf("etcd: an answer to no watch asked for: %v", resp)
	}
	kw := w.awaiting[0]
	w.awaiting[0] = nil
	w.awaiting = w.awaiting[1:]
	open := w.byID[kw.id] == kw
	switch {
	case resp.Canceled && resp.WatchId == progressID:
		if !open {
			kw.finished = true // cancelled since: nothing more of it comes
			w.closing.sweep(w.applied + 1)
			return nil, nil
		}
		return w.refuseLocked(kw, resp.CancelReason), nil
	case resp.Canceled || resp.WatchId != kw.id:
		return nil, fmt.Errorf("etcd: the watch of %s, asked for as %d, answered as %d (cancelled: %v %s)",
			kw.prefix, kw.id, resp.WatchId, resp.Canceled, resp.CancelReason)
	case !open:
		return nil, nil // its cancellation follows
	}
	kw.created = true
	if r := kw.refusal; r != nil {
		kw.refusal = nil
		w.tellLocked(logger.InfoLevel, "etcd: the watch of %s is accepted after %d refusals: its events are delivered again", kw.prefix, r.failures)
	}
	if kw.revalidate {
		kw.revalidate = false
		for name := range kw.names {
			revalidate = append(revalidate, name)
		}
	}
	return revalidate, nil
}

// refuseLocked records etcd's refusal of kw, open: it is no longer on the
// stream, its services lose their events until etcd accepts it, and are
// re-validated now, in case they changed since they were fetched. The
// first refusal of a watch, and a refusal for another reason, are logged.
func (w *scopedWatcher) refuseLocked(kw *keyWatch, reason string) (revalidate []string) {
	delete(w.byID, kw.id)
	delete(w.byPrefix, kw.prefix)
	r := kw.refusal
	if r == nil {
		r = &refusedWatch{prefix: kw.prefix}
	}
	r.names = kw.names
	r.failures++
	if r.failures == 1 || r.reason != reason {
		w.tellLocked(logger.ErrorLevel, "etcd: the watch of %s (%s) was refused: %s; its changes reach the cache at its refreshes, and the watch is asked for again on a backoff",
			kw.prefix, strings.Join(sortedNames(r.names), ", "), reason)
	}
	r.reason = reason
	r.retry = time.Now().Add(refusedBackoff(r.failures, rand.Float64()))
	w.refused[kw.prefix] = r
	select {
	case w.arm <- struct{}{}:
	default:
	}
	for name := range r.names {
		revalidate = append(revalidate, name)
	}
	return revalidate
}

// retryRefusedLocked asks etcd again for the refused watches whose retry
// is due, from the next revision, their services to be re-validated once
// it is created. It reports whether it asked for any, and when the next
// retry is due (zero if none).
func (w *scopedWatcher) retryRefusedLocked(now time.Time) (retried bool, next time.Time) {
	for p, r := range w.refused {
		if now.Before(r.retry) {
			if next.IsZero() || r.retry.Before(next) {
				next = r.retry
			}
			continue
		}
		delete(w.refused, p)
		w.openLocked(p, r.names, w.lastRev+1, true)
		w.byPrefix[p].refusal = r
		retried = true
	}
	return retried, next
}

func sortedNames(names map[string]struct{}) []string {
	out := make([]string, 0, len(names))
	for name := range names {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// receivedOpenLocked records a response of kw, open, other than etcd's
// answer to its creation: its events, or its end.
func (w *scopedWatcher) receivedOpenLocked(kw *keyWatch, resp *pb.WatchResponse) (item scopedItem, revalidate []string, err error) {
	switch {
	case resp.CompactRevision != 0:
		// etcd no longer has the revision the watch started from: a
		// watch from the oldest revision it has, and the services
		// fetched again once it is created, in case etcd compacted what
		// came after their registry call. etcd sends nothing more of the
		// old watch, but keeps it, never synced, until it is cancelled,
		// and answers no progress request meanwhile.
		w.closeLocked(kw)
		kw.finished = true
		w.openLocked(kw.prefix, kw.names, resp.CompactRevision, true)
		w.wakeSender()
	case resp.Canceled:
		return item, nil, fmt.Errorf("etcd: watch of %s cancelled: %s", kw.prefix, resp.CancelReason)
	default:
		item = kw.eventsOf(resp)
	}
	return item, revalidate, nil
}

// eventsOf returns the events of resp, a response of kw's, to pass to
// Next, and moves where kw resumes past them.
func (kw *keyWatch) eventsOf(resp *pb.WatchResponse) scopedItem {
	if len(resp.Events) == 0 {
		return scopedItem{}
	}
	kw.next = resp.Events[len(resp.Events)-1].Kv.ModRevision + 1
	return scopedItem{from: kw, events: resp.Events}
}

// noteRevisionLocked records a revision etcd reported, with the count of
// changes to the services held seen by then.
func (w *scopedWatcher) noteRevisionLocked(rev int64) {
	w.heard = time.Now()
	if rev <= w.lastRev {
		return
	}
	w.lastRev = rev
	seq := w.scope.Seq()
	if n := len(w.marks); n > 0 && w.marks[n-1].seq == seq {
		w.marks[n-1].rev = rev // the same changes came after it
	} else {
		w.marks = append(w.marks, revMark{seq, rev})
	}
}

func (w *scopedWatcher) wakeSender() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// monitor tells Next when the connection to etcd is lost, as the watch of
// the whole registry's does.
func (w *scopedWatcher) monitor(conn connState) {
	defer w.wg.Done()
	if err := watchConnection(w.ctx, conn, grace); err != nil {
		w.deliver(scopedItem{err: err})
	}
}

// deliver passes it to Next, unless the watch is stopped first.
func (w *scopedWatcher) deliver(it scopedItem) bool {
	select {
	case w.items <- it:
		return true
	case <-w.ctx.Done():
		return false
	}
}
