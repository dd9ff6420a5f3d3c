package cache

import (
	"context"
)

// A registry whose store can watch each service on its own, as etcd can,
// need not send a cache the changes of the services it does not hold at
// all: the cache's one watch stream can be made, inside the registry, of a
// watch per service held, as long as each such watch starts early enough
// to cover the registry call that fetched its service. The cache puts a
// WatchScope in the context of its Watch call, next to its watch filter,
// for such a registry to follow. github.com/regcache/cache/etcd does.

// watchScopeKey is the context key of the watch scope.
type watchScopeKey struct{}

// WatchScope tells a registry's watcher which services the cache that
// called Watch holds, and when that changes. A Cache sets it in the
// context of its one watch stream (not on the watches of
// WithWatchPerService); WatchScopeOf reads it.
type WatchScope struct {
	c *cache
}

// HeldChange is a change to the services a cache holds: Service started
// (Held) or stopped being held. Seq is its number in the count that
// WatchScope.Seq reads.
type HeldChange struct {
	Service string
	Held    bool
	Seq     uint64
}

// WatchScopeOf returns the scope that ctx carries, or nil if it carries
// none: the context of a Watch call, set with registry.WatchContext.
func WatchScopeOf(ctx context.Context) *WatchScope {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(watchScopeKey{}).(*WatchScope)
	return s
}

// contextWithWatchScope returns a copy of parent that carries c's scope.
func (c *cache) contextWithWatchScope(parent context.Context) context.Context {
	return context.WithValue(parent, watchScopeKey{}, &WatchScope{c: c})
}

// Seq returns the number of changes to the services held so far. It is
// how a watcher tells how early a watch must start: whatever the watcher
// learnt before Seq returned s (a revision of the registry, say) it learnt
// before every change numbered above s, and so before the registry call
// that fetches the service of such a change, which starts after it.
func (s *WatchScope) Seq() uint64 { return s.c.heldSeq.Load() }

// Follow starts following the services held. It returns the names held
// now, the number (Seq) of the last change they include, and a Follower
// that yields the changes after it, in order. Stop the Follower when done.
//
// The names held now may have been fetched at any time before: a cache
// re-validates the data it fetched before its stream was established, so
// a watch of each that starts by the time Watch returns covers them.
func (s *WatchScope) Follow() (names []string, seq uint64, f *Follower) {
	c := s.c
	f = &Follower{c: c, changed: make(chan struct{}, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	names = c.cachedNames()
	seq = c.heldSeq.Load()
	if !c.stopped {
		c.followers = append(c.followers, f)
	}
	return names, seq, f
}

// Revalidate has the cache fetch the service's data again, once its retry
// window allows, as data fetched before a watch of it started: for a
// watcher that could not start a watch early enough (the registry had
// forgotten the revision it asked for) and started it late. A service
// held without data (not found) is fetched at its next lookup, its retry
// window open, even if a call for it was out and answers not found after.
// It does nothing for a service the cache does not hold.
func (s *WatchScope) Revalidate(service string) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revalidateLocked(service)
}

// Follower yields the changes to the services a cache holds. Its methods
// are safe for concurrent use.
type Follower struct {
	c       *cache
	changed chan struct{}
	// pending is guarded by c.mu; stopped too.
	pending []HeldChange
	stopped bool
}

// Changed is ready, with a buffer of one, when Changes has something to
// return.
func (f *Follower) Changed() <-chan struct{} { return f.changed }

// Changes returns the changes since the last call (or since Follow), in
// the order they were made, and forgets them.
func (f *Follower) Changes() []HeldChange {
	f.c.mu.Lock()
	p := f.pending
	f.pending = nil
	f.c.mu.Unlock()
	return p
}

// Stop ends the following: no change is kept for it any more.
func (f *Follower) Stop() {
	c := f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	f.stopped = true
	f.pending = nil
	for i, g := range c.followers {
		if g == f {
			last := len(c.followers) - 1
			c.followers[i] = c.followers[last]
			c.followers[last] = nil
			c.followers = c.followers[:last]
			break
		}
	}
}

// heldChangedLocked numbers a change to the services held and queues it
// for each follower. c.mu is held; nothing here blocks.
func (c *cache) heldChangedLocked(name string, held bool) {
	seq := c.heldSeq.Add(1)
	for _, f := range c.followers {
		f.pending = append(f.pending, HeldChange{Service: name, Held: held, Seq: seq})
		select {
		case f.changed <- struct{}{}:
		default:
		}
	}
}
