package etcd

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/regcache/cache/watchscope"
)

// holdLocked watches the keys of a service now held, from the revision
// after rev, unless a watch of its keys is open. w.mu is held.
func (w *scopedWatcher) holdLocked(name string, rev int64) {
	if !watchable(name) {
		return
	}
	p := watchPrefix(name)
	if kw := w.byPrefix[p]; kw != nil {
		kw.names[name] = struct{}{}
		return
	}
	if r := w.refused[p]; r != nil {
		r.names[name] = struct{}{}
		return
	}
	w.openLocked(p, map[string]struct{}{name: {}}, rev+1, false)
}

// watchable reports whether a service's keys can be watched on their own:
// the plugin writes the nodes of "", "." and ".." (with "/" made "-")
// elsewhere than under a folder of their own, and reads every node of the
// registry for them, so a watch of theirs would be of the whole registry.
// Their changes reach the cache at its TTL refreshes.
func watchable(name string) bool {
	switch strings.ReplaceAll(name, "/", "-") {
	case "", ".", "..":
		return false
	}
	return true
}

// openLocked opens a watch of the keys under p, for names, from start.
func (w *scopedWatcher) openLocked(p string, names map[string]struct{}, start int64, revalidate bool) {
	w.lastID++
	kw := &keyWatch{id: w.lastID, prefix: p, names: names, revalidate: revalidate, asked: time.Now(), next: start}
	w.byPrefix[p] = kw
	w.byID[kw.id] = kw
	w.awaiting = append(w.awaiting, kw)
	select {
	case w.arm <- struct{}{}:
	default:
	}
	w.requests = append(w.requests, createRequest(kw.id, p, start, false))
}

// closeLocked cancels kw. Its events received still reach the cache
// (closingWatches).
func (w *scopedWatcher) closeLocked(kw *keyWatch) {
	delete(w.byPrefix, kw.prefix)
	delete(w.byID, kw.id)
	w.closing.add(kw)
	w.requests = append(w.requests, cancelRequest(kw.id))
}

// dropLocked cancels the watch of a service no longer held, unless it
// watches another service held too.
func (w *scopedWatcher) dropLocked(name string) {
	p := watchPrefix(name)
	if r := w.refused[p]; r != nil {
		delete(r.names, name)
		if len(r.names) == 0 {
			delete(w.refused, p)
		}
		return
	}
	kw := w.byPrefix[p]
	if kw == nil {
		return
	}
	delete(kw.names, name)
	if len(kw.names) == 0 {
		w.closeLocked(kw)
	}
}

// revBeforeLocked returns the newest revision that etcd reported before
// the change numbered seq, and forgets the marks no change after it needs.
func (w *scopedWatcher) revBeforeLocked(seq uint64) int64 {
	i := len(w.marks) - 1
	for i > 0 && w.marks[i].seq >= seq {
		i--
	}
	// Changes come in order: the ones after this need no older mark.
	if i > 0 {
		w.marks = append(w.marks[:0], w.marks[i:]...)
	}
	return w.marks[0].rev
}

// apply opens and cancels watches for the changes to the services held.
func (w *scopedWatcher) apply(changes []watchscope.Change) {
	w.mu.Lock()
	for _, ch := range changes {
		if ch.Held {
			rev := w.closing.startAfter(watchPrefix(ch.Service), ch.Seq, w.revBeforeLocked(ch.Seq))
			w.holdLocked(ch.Service, rev)
		} else {
			w.dropLocked(ch.Service)
		}
		w.applied = ch.Seq
	}
	w.closing.sweep(w.applied + 1)
	w.mu.Unlock()
}

// beforeSend, when set (by tests), is called by the sender before it takes
// the requests waiting.
var beforeSend atomic.Pointer[func()]

// send sends etcd the requests, as the services held change, and fails
// the stream when etcd has not acknowledged a watch within the timeout.
func (w *scopedWatcher) send() {
	defer w.wg.Done()
	for {
		if f := beforeSend.Load(); f != nil {
			(*f)()
		}
		w.mu.Lock()
		stream, requests := w.stream, w.requests
		w.requests = nil
		w.mu.Unlock()
		for _, r := range requests {
			if stream.Send(r) != nil {
				// The stream broke: the receiver sees it too, and
				// either resumes the watches on another, asking again
				// for what was not sent, or ends the watcher.
				break
			}
		}
		select {
		case <-w.ctx.Done():
			return
		case <-w.follower.Changed():
			w.apply(w.follower.Changes())
		case <-w.wake:
		}
	}
}
