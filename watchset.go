package cache

import (
	"context"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/core"
	"github.com/regcache/cache/internal/guard"
	"github.com/regcache/cache/internal/watchset"
)

// The cache's side of package watchset, the watch stream of
// WithWatchPerService: one watch per cached service. The set has a lock of
// its own; the cache tells it of services cached or dropped and of a
// registry back up after releasing its own (unlock), and the set tells the
// core of its watches through one input, Tell, with its own released.

// openServiceWatches publishes a set of per-service watches and starts the
// goroutine that opens them. It makes no registry call of its own.
func (c *cache) openServiceWatches() (registry.Watcher, error) {
	s := watchset.New(c.ctx, watchHost{c}, maxDials)
	c.mu.Lock()
	c.core.Dialed()
	if !c.core.Opened(true, c.now()) {
		c.mu.Unlock()
		s.Stop()
		return nil, errStopped
	}
	c.stream = s
	c.wg.Add(1)
	c.unlock()
	// Services cached from now on tell the set themselves; the list
	// taken after it was published misses none cached before.
	cached := c.cachedNames()
	go func() {
		defer c.wg.Done()
		s.Run(cached)
	}()
	return s, nil
}

// tellWatches tells the per-service watches s of the services cached or
// dropped, and of a registry back up (redial).
func tellWatches(s *watchset.Set, index []core.IndexChange, redial bool) {
	for _, ch := range index {
		s.Changed(ch.Entry.Name)
	}
	if redial {
		s.RedialNow()
	}
}

// watchHost is the cache's watchset.Host.
type watchHost struct{ c *cache }

var _ watchset.Host = watchHost{}

func (h watchHost) Now() time.Time { return h.c.now() }

func (h watchHost) Go(f func()) {
	h.c.wg.Add(1)
	go func() {
		defer h.c.wg.Done()
		f()
	}()
}

// Cached reads the map of entries without the lock.
func (h watchHost) Cached(service string) bool {
	_, ok := h.c.entries.Load(service)
	return ok
}

func (h watchHost) Watch(ctx context.Context, service string) (registry.Watcher, error) {
	return guard.Watch(h.c.reg, ctx, registry.WatchService(service))
}

func (h watchHost) Next(w registry.Watcher, empty *int) (*registry.Result, error) {
	return guard.Next(h.c.reg, w, empty)
}

// Tell gives the notice to the core.
func (h watchHost) Tell(n watchset.Notice) (r watchset.Reply) {
	c := h.c
	c.mu.Lock()
	k := c.core
	now := c.now()
	switch n.Kind {
	case watchset.Opened:
		r.Unproven = k.WatchOpened(n.Service, n.Told, n.Reopened, n.Keys, now)
	case watchset.Proven:
		k.WatchProven(now)
	case watchset.Failed:
		r.Told = k.WatchFailed(n.Service, n.Suspect, n.Err, n.Started, n.Tell, now)
	case watchset.Redialed:
		k.WatchesRedialed()
	}
	r.Down, r.Interval = k.Health()
	c.unlock()
	return r
}
