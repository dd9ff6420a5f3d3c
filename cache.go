package cache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/core"
	"github.com/regcache/cache/internal/svcdata"
)

// Cache is a registry.Registry that answers GetService from memory. It is
// assignable to go-micro's registry/cache.Cache.
type Cache interface {
	registry.Registry

	// Stop stops the background watcher and waits until every goroutine
	// of the cache has returned. It is idempotent and safe to call
	// concurrently. Lookups keep working after Stop, from the cache and
	// the registry, but no background work starts again.
	Stop()

	// Lookup is GetService without the copy: it follows the same read path
	// and returns the cached snapshot itself. The result, and everything it
	// points to, is shared and must be treated as read-only. The cache
	// never changes a snapshot in place; updates swap in a new one. Its
	// options are GetService's: registry.GetContext bounds how long it
	// waits for the registry.
	Lookup(service string, opts ...registry.GetOption) ([]*registry.Service, error)

	// Stats returns the cache's cumulative counters and the state of the
	// registry and the stream, at a cost that does not grow with the
	// number of services.
	Stats() Stats

	// Services returns the rows of the services whose names start with
	// prefix and sort after after, by name, at most limit of them (all if
	// limit ≤ 0), with their nodes, including services held without data.
	// It pages through what a status page shows.
	Services(prefix, after string, limit int) []ServiceStats
}

// cache is the shell around the core (internal/core), which holds every
// piece of state and every rule: the cache takes mu, gives the core one
// input, takes what the core asks for (core.Ready), releases mu, and does
// it (unlock). It owns the goroutines, the clock, the log and the calls
// to the registry. See docs/core.md.
type cache struct {
	opts Options
	reg  registry.Registry
	now  func() time.Time
	rand func() float64 // uniform in [0, 1); safe for concurrent use

	// entries maps a service name to its *core.Entry, for the lock-free
	// path. It is written under mu, as the core's Ready says.
	entries sync.Map

	// ctx is cancelled by Stop. Background calls pass it to the
	// registry, and every goroutine selects on ctx.Done().
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// kick wakes the maintainer and redial the watcher from its backoff;
	// each has a buffer of one, so that senders never block. dialSlots
	// holds a token per Watch call out.
	kick, redial, dialSlots chan struct{}
	// firstDial is closed once the watcher's first Watch call has
	// returned, opened or not.
	firstDial     chan struct{}
	firstDialOnce sync.Once
	// stopOnce runs the final snapshot write, so that every Stop returns
	// after it.
	stopOnce sync.Once

	// mu guards core (and the Waiters of its calls), stream, followers
	// and the observer's start. It is never held across a registry call, a log call, a
	// callback or a blocking channel operation.
	mu   sync.Mutex
	core *core.Core
	// stats are the counters, which the core and the lock-free path
	// count into.
	stats core.Counters
	// stream is the open watch stream, for Stop to close.
	stream registry.Watcher
	// heldSeq is the core's count of changes to the services held, and
	// followers the watchers told of each (watchscope.Follower).
	heldSeq   atomic.Uint64
	followers []*follower

	obs observer
}

var _ Cache = (*cache)(nil)

// held returns the data the cache holds for name, fresh or stale, or nil:
// no registry call, no lock and no refresh. The selector's passive health
// reads it.
func (c *cache) held(name string) []*registry.Service {
	if v, ok := c.entries.Load(name); ok {
		return v.(*core.Entry).Services()
	}
	return nil
}

// logger is the cache's logger, for the selectors that read it.
func (c *cache) logger() log.Logger { return c.opts.Logger }

// ttl is the cache's TTL, the default bound of a selector's limbo.
func (c *cache) ttl() time.Duration { return c.opts.TTL }

// GetService returns a copy of the service's cached data, refreshing it
// from the registry as the read path allows. The Service, Node and Endpoint
// structs and their slices belong to the caller; Metadata maps and endpoint
// Values are shared with the cache and must not be changed.
//
// A caller that has to wait for the registry (nothing usable is cached)
// stops waiting when the context given with registry.GetContext is done;
// the refresh goes on and still fills the cache.
func (c *cache) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	svcs, err := c.lookup(name, getContext(opts))
	if err != nil {
		return nil, err
	}
	return svcdata.CopyOut(svcs), nil
}

// Lookup implements Cache.
func (c *cache) Lookup(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	return c.lookup(name, getContext(opts))
}

// getContext returns the context that opts carry, or nil. With no
// option it takes no address, so that a hit allocates nothing.
func getContext(opts []registry.GetOption) context.Context {
	if len(opts) == 0 {
		return nil
	}
	var o registry.GetOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.Context
}

// lookup is the read path. ctx may be nil. Data that the entry's mode says
// may be served is served without a lock, a clock read or a write to a
// shared cache line: fresh data, and stale data with nothing to be done
// about it (a refresh under way, or the retry window open).
func (c *cache) lookup(name string, ctx context.Context) ([]*registry.Service, error) {
	if v, ok := c.entries.Load(name); ok {
		e := v.(*core.Entry)
		if m := e.Mode.Load(); m != core.ModeSlow {
			if s := e.Data.Load(); s != nil {
				if c.opts.IdleEviction > 0 && !e.Read.Load() {
					e.Read.Store(true)
				}
				st := &c.stats
				switch m {
				case core.ModeFresh:
					st.Hits.Add()
				case core.ModeEvent:
					st.EventHits.Add()
				default:
					st.StaleHits.Add()
					if !e.StaleRead.Load() {
						c.core.StaleServed(e, s)
					}
				}
				return s.Services, nil
			}
		}
	}
	if name == "" {
		c.stats.Invalid.Add(1)
		return nil, ErrEmptyName
	}
	return c.slowLookup(name, ctx)
}

// slowLookup is the read path for anything the entry's mode does not
// cover: the core decides. A caller that waited for a call that was
// cancelled (by Stop, or after Stop by the caller who made it) asks again:
// the same lookup, counted once. So does one that waited for a probe.
func (c *cache) slowLookup(name string, ctx context.Context) ([]*registry.Service, error) {
	var cancelled <-chan struct{}
	if ctx != nil {
		cancelled = ctx.Done()
	}
	for ask := core.First; ; {
		now := c.now()
		c.mu.Lock()
		r := c.core.Lookup(name, ask, now)
		wait := r.Call
		if r.Await != nil {
			wait = r.Await
		}
		var done chan struct{}
		if wait != nil {
			done = c.waiter(wait)
		}
		c.unlock()
		if wait == nil {
			return r.Services, r.Err
		}
		if r.Await != nil {
			if !c.awaitProbe(done, cancelled, r.Until.Sub(now)) {
				c.mu.Lock()
				c.core.GaveUp()
				c.mu.Unlock()
				break
			}
			ask = core.AfterProbe
			continue
		}
		if r.Run {
			c.fetch(r.Call, ctx, false)
		}
		select {
		case <-done:
			if r.Call.Err != core.ErrCancelled {
				return r.Call.Services, r.Call.Err
			}
			if ctx == nil || ctx.Err() == nil {
				ask = core.AfterCancel
				continue
			}
		case <-cancelled:
		}
		break
	}
	return nil, fmt.Errorf("regcache: lookup of service %s: %w", quoteName(name), ctx.Err())
}

// awaitProbe waits for the probe whose callers wait on done, for d at
// most; it reports false if the caller's context ended first.
func (c *cache) awaitProbe(done chan struct{}, cancelled <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-cancelled:
		return false
	}
	return true
}

// waiter returns the channel that the callers of call wait on, closed
// once its result is set. mu is held.
func (c *cache) waiter(call *core.Call) chan struct{} {
	done, ok := call.Waiters.(chan struct{})
	if !ok {
		done = make(chan struct{})
		call.Waiters = done
	}
	return done
}
