package cache

import (
	"context"
	"time"

	"github.com/regcache/cache/internal/guard"
	"github.com/regcache/cache/internal/watchset"
	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// The cache's side of package watchset, the watch stream of
// WithWatchPerService: one watch per cached service. The set has a lock of
// its own, taken after cache.mu: the cache tells it of services cached or
// dropped (servicesChangedLocked), of a registry back up (healthLocked)
// and asks whether a watch is failing (streamDownLocked, resyncLocked),
// all with cache.mu held. What the set needs of the cache is watchHost's,
// whose methods take cache.mu themselves; the set calls them with its own
// lock released, but for Now and Cached, which take no lock.

// openServiceWatches publishes a set of per-service watches and starts the
// goroutine that opens them. It makes no registry call of its own.
func (c *cache) openServiceWatches() (registry.Watcher, error) {
	s := watchset.New(c.ctx, watchHost{c}, maxDials)
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		s.Stop()
		return nil, errStopped
	}
	c.publishLocked(s)
	// Data fetched before the set opened is re-validated, as for a
	// stream; each watch that opens later has its own service's.
	c.epoch++
	c.wake()
	c.wg.Add(1)
	c.mu.Unlock()
	// Services cached from now on tell the set themselves; the list
	// taken after it was published misses none cached before.
	cached := c.cachedNames()
	go func() {
		defer c.wg.Done()
		s.Run(cached)
	}()
	return s, nil
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

func (h watchHost) Health() (down bool, interval time.Duration) {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return h.c.health.Down, h.c.health.Interval
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

func (h watchHost) Reconnected() { h.c.stats.reconnects.Add(1) }

func (h watchHost) Opened(service string, told bool, suspects ...string) bool {
	return h.c.serviceWatchOpened(service, told, suspects...)
}

// serviceWatchOpened is the host's Opened: the watch's suspects, keys,
// cleared, an answer from the registry unless it is held down, and the
// service's data re-validated.
func (c *cache) serviceWatchOpened(name string, told bool, keys ...string) (unproven bool) {
	var out outbox
	c.mu.Lock()
	now := c.now()
	for _, key := range keys {
		c.health.Cleared(key)
	}
	if c.health.Down {
		unproven = true
	} else {
		c.healthLocked(c.health.Answered("", now), now, &out)
		if told {
			out.log(log.InfoLevel, "regcache: watch of service %s is back", quoteName(name))
			c.emitLocked(Event{Kind: WatchReconnected, Service: name, Time: now})
		}
	}
	c.revalidateLocked(name)
	c.mu.Unlock()
	c.flush(&out)
	return unproven
}

// Proven brings the registry up, unless it is up already.
func (h watchHost) Proven() {
	c := h.c
	var out outbox
	c.mu.Lock()
	if c.health.Down {
		now := c.now()
		c.healthLocked(c.health.Answered("", now), now, &out)
	}
	c.mu.Unlock()
	c.flush(&out)
}

// Failed tells the failure, if it does, as WatchDisconnected for the
// service; while the registry is held down, the outage is told instead.
func (h watchHost) Failed(service, suspect string, err error, started time.Time, tell bool) (told bool) {
	c := h.c
	var out outbox
	c.mu.Lock()
	now := c.now()
	if tell && !c.health.Down {
		told = true
		out.log(log.WarnLevel, "regcache: watch of service %s failing, redialling: %v", quoteName(service), err)
		c.emitLocked(Event{Kind: WatchDisconnected, Service: service, Err: err, Time: now})
	}
	c.healthLocked(c.health.Failed(suspect, err, started, now), now, &out)
	c.mu.Unlock()
	c.flush(&out)
	return told
}

// Redialed lets a resync that waited for the watches, when the registry
// came back, go now, so that one round covers the gap and the watches.
func (h watchHost) Redialed() {
	c := h.c
	c.mu.Lock()
	if c.resyncPending {
		c.resyncPending = false
		c.epoch++
		c.wake()
	}
	c.mu.Unlock()
}
