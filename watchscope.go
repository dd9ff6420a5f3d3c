package cache

import (
	"context"
	"fmt"
	"sync"

	"go-micro.dev/v4/registry"
)

// serviceWatches is the watch stream of WithWatchPerService: one watch per
// cached service, seen by the cache as one stream. It fails as a whole
// when any of its watches fails, so that reconnects, their backoff, the
// resync that follows and the registry's health work as with the single
// stream.
//
// It owns a goroutine per watch, which passes its events on, and one that
// opens and closes watches as services are cached and dropped. All are
// counted in the cache's WaitGroup, and all end with Stop.
type serviceWatches struct {
	c      *cache
	ctx    context.Context
	cancel context.CancelFunc
	events chan *registry.Result
	// changed wakes the goroutine that matches the watches to the cached
	// services; a buffer of one, so that a burst of changes is one pass.
	changed chan struct{}

	mu      sync.Mutex
	watches map[string]registry.Watcher
	err     error         // why the set failed
	broken  chan struct{} // closed when err is set
}

// openServiceWatches opens a watch for every cached service. The first
// failure closes the watches opened so far and is returned.
func (c *cache) openServiceWatches() (*serviceWatches, error) {
	ctx, cancel := context.WithCancel(c.ctx)
	s := &serviceWatches{
		c: c, ctx: ctx, cancel: cancel,
		events:  make(chan *registry.Result),
		changed: make(chan struct{}, 1),
		watches: map[string]registry.Watcher{},
		broken:  make(chan struct{}),
	}
	for _, name := range c.cachedNames() {
		w, err := s.open(name)
		if err != nil {
			s.Stop()
			return nil, err
		}
		s.watches[name] = w
	}
	c.wg.Add(1 + len(s.watches))
	for name, w := range s.watches {
		go s.pass(name, w)
	}
	go s.match()
	return s, nil
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

// open opens the watch of one service.
func (s *serviceWatches) open(name string) (registry.Watcher, error) {
	w, err := s.c.callWatch(s.ctx, registry.WatchService(name))
	if err != nil {
		return nil, fmt.Errorf("watch of service %s: %w", quoteName(name), err)
	}
	return w, nil
}

// Next returns the next event of any of the watches, or the failure that
// broke the set.
func (s *serviceWatches) Next() (*registry.Result, error) {
	select {
	case res := <-s.events:
		return res, nil
	case <-s.broken:
		return nil, s.err
	case <-s.ctx.Done():
		return nil, registry.ErrWatcherStopped
	}
}

// Stop closes every watch. The goroutines end once their watch returns.
func (s *serviceWatches) Stop() {
	s.cancel()
	s.mu.Lock()
	ws := s.watches
	s.watches = map[string]registry.Watcher{}
	s.mu.Unlock()
	for _, w := range ws {
		stopStream(w)
	}
}

// size is the number of watches open.
func (s *serviceWatches) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches)
}

// fail breaks the set with err, unless it is stopped or broken already.
func (s *serviceWatches) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil && s.ctx.Err() == nil {
		s.err = err
		close(s.broken)
	}
}

// pass passes the events of one service's watch on, until the watch fails
// (which breaks the set) or is closed (the service dropped, or Stop).
func (s *serviceWatches) pass(name string, w registry.Watcher) {
	defer s.c.wg.Done()
	empty := 0
	for {
		res, err := s.c.next(w, &empty)
		if err != nil {
			s.mu.Lock()
			closed := s.watches[name] != w
			s.mu.Unlock()
			if !closed {
				s.fail(fmt.Errorf("watch of service %s: %w", quoteName(name), err))
			}
			return
		}
		if res == nil {
			continue
		}
		select {
		case s.events <- res:
		case <-s.ctx.Done():
			return
		}
	}
}

// servicesChanged tells the set that a service was cached or dropped.
func (s *serviceWatches) servicesChanged() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// match opens a watch for each service cached since the set opened, and
// closes those of the services dropped, until the set ends.
func (s *serviceWatches) match() {
	defer s.c.wg.Done()
	for {
		select {
		case <-s.changed:
		case <-s.ctx.Done():
			return
		case <-s.broken:
			return
		}
		cached := map[string]bool{}
		for _, name := range s.c.cachedNames() {
			cached[name] = true
		}
		s.mu.Lock()
		var added []string
		for name := range cached {
			if _, ok := s.watches[name]; !ok {
				added = append(added, name)
			}
		}
		var closed []registry.Watcher
		for name, w := range s.watches {
			if !cached[name] {
				delete(s.watches, name)
				closed = append(closed, w)
			}
		}
		s.mu.Unlock()
		for _, w := range closed {
			stopStream(w)
		}
		for _, name := range added {
			if !s.add(name) {
				return
			}
		}
	}
}

// add opens the watch of a service cached after the set opened, and has
// its data, fetched before the watch, re-validated. It reports whether the
// set goes on.
func (s *serviceWatches) add(name string) bool {
	w, err := s.open(name)
	if err != nil {
		s.fail(err)
		return false
	}
	s.mu.Lock()
	if s.ctx.Err() != nil || s.err != nil {
		s.mu.Unlock()
		stopStream(w)
		return false
	}
	s.watches[name] = w
	s.c.wg.Add(1)
	s.mu.Unlock()
	go s.pass(name, w)
	s.c.revalidate(name)
	return true
}

// revalidate has name's data, fetched before its watch opened, refreshed
// once its retry window allows: the data it holds, or the answer of the
// refresh in flight.
func (c *cache) revalidate(name string) {
	v, ok := c.entries.Load(name)
	if !ok {
		return
	}
	e := v.(*entry)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.gone || c.epoch == 0 {
		return
	}
	before := c.epoch - 1
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

// servicesChangedLocked tells the per-service watches, if any, that a
// service was cached or dropped. c.mu is held.
func (c *cache) servicesChangedLocked() {
	if s, ok := c.stream.(*serviceWatches); ok {
		s.servicesChanged()
	}
}
