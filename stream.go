package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// Reconnect backoff of the watch stream: capped exponential with full
// jitter, reset once a stream has stayed up for backoffResetAfter, and cut
// short by any answer from the registry.
const (
	backoffBase       = 100 * time.Millisecond
	backoffCap        = 30 * time.Second
	backoffResetAfter = time.Minute

	// maxEmptyNexts is how many results in a row with neither an event
	// nor an error end a stream.
	maxEmptyNexts = 64
)

var errStopped = errors.New("regcache: stopped")

// backoff is the wait before reconnect attempt n (n ≥ 1): a uniform draw
// from [0, min(cap, base·2^(n-1))], given u uniform in [0, 1).
func backoff(n int, u float64) time.Duration {
	ceiling := backoffCap
	if n < 30 {
		if d := backoffBase << (n - 1); d < backoffCap {
			ceiling = d
		}
	}
	return time.Duration(u * float64(ceiling+1))
}

// startWatcherLocked starts the watcher and the maintainer with the first
// lookup. They never start after Stop.
func (c *cache) startWatcherLocked() {
	if c.watching || c.stopped {
		return
	}
	c.watching = true
	c.wg.Add(2)
	go c.watch()
	go c.maintain()
}

// watch owns the single watch stream for all services: it opens it,
// applies its events and reopens it with backoff until Stop.
func (c *cache) watch() {
	defer c.wg.Done()
	attempt := 0
	connected := true // so that the first failure is logged
	for {
		w, err := c.openStream()
		if errors.Is(err, errStopped) {
			return
		}
		if err == nil {
			if !connected {
				c.notify(log.InfoLevel, WatchReconnected, nil, "regcache: watch stream reconnected")
			}
			connected = true
			opened := c.now()
			err = c.consume(w)
			c.closeStream(w)
			if c.now().Sub(opened) >= backoffResetAfter {
				attempt = 0
			}
		}
		if c.ctx.Err() != nil {
			return
		}
		c.streamFailed(err)
		if connected {
			c.notify(log.WarnLevel, WatchDisconnected, err, "regcache: watch stream lost, reconnecting: %v", err)
			connected = false
		}
		attempt++
		t := time.NewTimer(backoff(attempt, rand.Float64()))
		select {
		case <-t.C:
		case <-c.redial:
			// The registry answered a refresh: it is back, so the
			// stream should be too.
			attempt = 0
		case <-c.ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// streamFailed records a stream lost or a Watch call failed as a failure
// towards the registry's health.
func (c *cache) streamFailed(err error) {
	var out outbox
	c.mu.Lock()
	now := c.now()
	c.healthLocked(c.health.failed(streamSuspect, err, now, now), now, &out)
	c.mu.Unlock()
	c.flush(&out)
}

// notify logs one line about the stream and tells the observer.
func (c *cache) notify(level log.Level, kind EventKind, err error, format string, args ...any) {
	c.mu.Lock()
	c.emitLocked(Event{Kind: kind, Err: err, Time: c.now()})
	c.mu.Unlock()
	c.opts.Logger.Logf(level, format, args...)
}

// openStream opens a watch stream and publishes it for Stop. Each stream
// established is an answer from the registry, and starts a resync of the
// data fetched before it.
func (c *cache) openStream() (w registry.Watcher, err error) {
	var set *serviceWatches
	if c.opts.WatchPerService {
		if set, err = c.openServiceWatches(); err == nil {
			w = set
		}
	} else {
		w, err = c.watchAll()
	}
	c.mu.Lock()
	if err != nil {
		if c.resyncPending {
			// The registry came back but its stream did not: resync
			// without waiting for it.
			c.resyncPending = false
			c.epoch++
			c.wake()
		}
		c.mu.Unlock()
		return nil, err
	}
	if c.stopped {
		c.mu.Unlock()
		stopStream(w)
		return nil, errStopped
	}
	var out outbox
	defer c.flush(&out)
	defer c.mu.Unlock()
	c.stream = w
	c.streams++
	if c.streams > 1 {
		c.stats.reconnects.Add(1)
	}
	select {
	case <-c.redial: // this stream is what it asked for
	default:
	}
	wentUp := false
	if set == nil || set.size() > 0 {
		// An answer from the registry. (A set of no watches made no
		// call: services cached meanwhile are matched by the set.)
		v := c.health.answered("", c.now())
		c.healthLocked(v, c.now(), &out) // back up: resyncs, the stream being set
		wentUp = v.wentUp
	}
	if !wentUp {
		c.epoch++
		c.wake()
	}
	if set != nil {
		set.servicesChanged() // services cached while the set opened
	}
	c.resyncPending = false
	return w, nil
}

// watchAll opens the one stream of every service's events.
func (c *cache) watchAll() (registry.Watcher, error) {
	return c.callWatch(c.ctx)
}

// callWatch calls the registry's Watch with opts and ctx. A panic in it,
// and a nil watcher, are errors.
func (c *cache) callWatch(ctx context.Context, opts ...registry.WatchOption) (w registry.Watcher, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("registry %s panicked in Watch: %v", c.reg.String(), r)
		}
	}()
	w, err = c.reg.Watch(append(opts, registry.WatchContext(ctx))...)
	if err == nil && w == nil {
		err = errors.New("registry returned a nil watcher")
	}
	return w, err
}

// closeStream stops w unless Stop already took it.
func (c *cache) closeStream(w registry.Watcher) {
	c.mu.Lock()
	mine := c.stream == w
	if mine {
		c.stream = nil
	}
	c.mu.Unlock()
	if mine {
		stopStream(w)
	}
}

// stopStream stops a watcher; a panic in it is recovered.
func stopStream(w registry.Watcher) {
	defer func() { _ = recover() }()
	w.Stop()
}

// consume applies events until the stream fails.
func (c *cache) consume(w registry.Watcher) error {
	empty := 0
	for {
		res, err := c.next(w, &empty)
		if err != nil {
			return err
		}
		c.apply(res)
	}
}

// next returns w's next result. A panic in Next is an error, and so are
// maxEmptyNexts results in a row with neither an event nor an error: a
// watcher that would spin without blocking is reconnected with backoff
// rather than left to burn a core. empty counts those results.
func (c *cache) next(w registry.Watcher, empty *int) (res *registry.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("registry %s panicked in Next: %v", c.reg.String(), r)
		}
	}()
	res, err = w.Next()
	if err != nil || res != nil {
		*empty = 0
		return res, err
	}
	if *empty++; *empty == maxEmptyNexts {
		return nil, errors.New("watcher keeps returning neither an event nor an error")
	}
	return nil, nil
}
