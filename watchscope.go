package cache

import (
	"context"

	"github.com/regcache/cache/internal/watchset"
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
// Each entry is stored before the registry call that fills it starts
// (slowLookup), so an event dropped for this answer loses nothing: its
// change was committed before the answer, and the first call for the
// service starts after it. An event the registry drops here is counted as
// apply counts the event of a service not held: ignored, and the registry
// heard from (doubtLocked).
func (c *cache) holds(service string) bool {
	if _, ok := c.entries.Load(service); ok {
		return true
	}
	c.heard.Add(1)
	c.stats.eventsIgnored.Add(1)
	return false
}

// scope is the cache's watchscope.Scope.
type scope struct{ c *cache }

var _ watchscope.Scope = scope{}

func (s scope) Seq() uint64 { return s.c.heldSeq.Load() }

func (s scope) Follow() (names []string, seq uint64, f watchscope.Follower) {
	c := s.c
	fl := &follower{c: c, changed: make(chan struct{}, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	names = c.cachedNames()
	seq = c.heldSeq.Load()
	if !c.stopped {
		c.followers = append(c.followers, fl)
	}
	return names, seq, fl
}

// Revalidate makes the service's data due a re-validation, as data fetched
// before a watch of it started. A service held without data (not found)
// is fetched at its next lookup, its retry window open, even if a call for
// it was out and answers not found after.
func (s scope) Revalidate(service string) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revalidateLocked(service)
}

// follower is the cache's watchscope.Follower.
type follower struct {
	c       *cache
	changed chan struct{}
	// pending is guarded by c.mu; stopped too.
	pending []watchscope.Change
	stopped bool
}

func (f *follower) Changed() <-chan struct{} { return f.changed }

func (f *follower) Changes() []watchscope.Change {
	f.c.mu.Lock()
	p := f.pending
	f.pending = nil
	f.c.mu.Unlock()
	return p
}

func (f *follower) Stop() {
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
		f.pending = append(f.pending, watchscope.Change{Service: name, Held: held, Seq: seq})
		select {
		case f.changed <- struct{}{}:
		default:
		}
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

// revalidateLocked has name's data, fetched before its watch opened,
// refreshed once its retry window allows: the data it holds, or the answer
// of the refresh in flight. A service held without data, after a
// not-found answered before the watch opened, may have been registered
// since, unseen by the watch: its next lookup asks the registry at once,
// and so does the one after an answer still out.
func (c *cache) revalidateLocked(name string) {
	e := c.byName[name]
	if e == nil || e.gone {
		return
	}
	if e.data.Load() == nil {
		if e.flight != nil {
			e.flight.reopen = true // for its answer
		}
	}
	if c.epoch == 0 {
		return
	}
	before := c.epoch - 1
	e.epoch = min(e.epoch, before) // a re-validation, early
	if f := e.flight; f != nil {
		// Its answer is queued for re-validation when it lands.
		f.epoch = min(f.epoch, before)
		return
	}
	if e.data.Load() != nil {
		e.epoch = min(e.epoch, before)
		c.enqueueLocked(e)
		c.pumpLocked(c.now())
	}
}

// servicesChangedLocked tells the per-service watches, if any, or the
// stream's followers, that the service name was cached (held) or dropped.
// c.mu is held.
func (c *cache) servicesChangedLocked(name string, held bool) {
	c.heldChangedLocked(name, held)
	if s, ok := c.stream.(*watchset.Set); ok {
		s.Changed(name)
	}
}
