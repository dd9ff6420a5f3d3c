package cache

import (
	"context"

	"github.com/regcache/cache/internal/core"
	"github.com/regcache/cache/watchscope"
)

// The cache's side of package watchscope: the filter and the scope that it
// puts in the context of its one watch stream (not on the watches of
// WithWatchPerService), for a registry's watcher to follow.

// watchContext returns a copy of parent that carries the cache's watch
// filter and its scope.
func (c *cache) watchContext(parent context.Context) context.Context {
	return watchscope.NewContext(watchscope.WithFilter(parent, c.holds), scope{c})
}

// holds is the cache's watch filter: whether it holds an entry for
// service, with data or without, which is what apply asks of every event.
// Each entry is stored before the registry call that fills it starts, so
// an event dropped for this answer loses nothing: its change was committed
// before the answer, and the first call for the service starts after it.
// An event the registry drops here is counted as apply counts the event of
// a service not held: ignored, and the registry heard from.
func (c *cache) holds(service string) bool {
	if _, ok := c.entries.Load(service); ok {
		return true
	}
	st := &c.stats
	st.Heard.Add(1)
	st.EventsIgnored.Add(1)
	return false
}

// scope is the cache's watchscope.Scope.
type scope struct{ c *cache }

var _ watchscope.Scope = scope{}

func (s scope) Seq() uint64 { return s.c.heldSeq.Load() }

func (s scope) Follow() (names []string, seq uint64, f watchscope.Follower) {
	c := s.c
	fl := &follower{c: c, changed: make(chan struct{}, 1), at: map[string]int{}}
	c.mu.Lock()
	defer c.mu.Unlock()
	names = c.cachedNames()
	seq = c.heldSeq.Load()
	if !c.core.Stopped() {
		c.followers = append(c.followers, fl)
	}
	return names, seq, fl
}

// Revalidate makes the service's data due a re-validation, as data fetched
// before a watch of it started (core.Revalidate).
func (s scope) Revalidate(service string) {
	c := s.c
	c.mu.Lock()
	c.core.Revalidate(service, c.now())
	c.unlock()
}

// follower is the cache's watchscope.Follower.
type follower struct {
	c       *cache
	changed chan struct{}
	// pending are the changes not yet taken, in order, with holes where
	// two changes of a service cancelled out (Service empty); at is the
	// place of each service's change. Both are guarded by the cache's mu.
	pending []watchscope.Change
	at      map[string]int
	holes   int
}

func (f *follower) Changed() <-chan struct{} { return f.changed }

func (f *follower) Changes() []watchscope.Change {
	f.c.mu.Lock()
	p := f.pending
	f.pending, f.holes = nil, 0
	clear(f.at)
	f.c.mu.Unlock()
	out := p[:0]
	for _, ch := range p {
		if ch.Service != "" {
			out = append(out, ch)
		}
	}
	return out
}

// add queues ch. A change of a service whose last change is still queued
// cancels it out: the service held and dropped again (or dropped and held
// again) is, for the follower, as it was. So the changes queued are at
// most one per service, whether or not the follower takes them. mu is
// held.
func (f *follower) add(ch watchscope.Change) {
	if i, ok := f.at[ch.Service]; ok {
		f.pending[i].Service = ""
		delete(f.at, ch.Service)
		if f.holes++; f.holes > len(f.pending)/2 {
			f.compact()
		}
		return
	}
	f.at[ch.Service] = len(f.pending)
	f.pending = append(f.pending, ch)
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// compact drops the holes of pending.
func (f *follower) compact() {
	kept := f.pending[:0]
	for _, ch := range f.pending {
		if ch.Service != "" {
			f.at[ch.Service] = len(kept)
			kept = append(kept, ch)
		}
	}
	clear(f.pending[len(kept):])
	f.pending, f.holes = kept, 0
}

func (f *follower) Stop() {
	c := f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	f.pending, f.at = nil, map[string]int{}
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

// heldChanged publishes a change to the services held and queues it for
// each follower. mu is held; nothing here blocks.
func (c *cache) heldChanged(ch core.IndexChange) {
	c.heldSeq.Store(ch.Seq)
	for _, f := range c.followers {
		f.add(watchscope.Change{Service: ch.Entry.Name, Held: ch.Held, Seq: ch.Seq})
	}
}

// cachedNames returns the names of the entries in the map.
func (c *cache) cachedNames() []string {
	var names []string
	c.entries.Range(func(k, _ any) bool {
		names = append(names, k.(string))
		return true
	})
	return names
}
