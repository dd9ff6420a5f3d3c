package cache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// The watcher keeps the cache current between refreshes: one goroutine
// that reads one watch stream of every service (or, with
// WithWatchPerService, the set of per-service watches in watchset.go) and
// applies its events.
//
// A stream is a hint, never the truth: real plugins lose events, and
// etcd's client hides an outage behind its own reconnects. So every stream
// established is followed by a resync of the data fetched before it, a
// stream lost counts towards the registry's health, and while the stream
// is down with nothing else answering, its redial is the probe: about one
// Watch a probe interval rather than an exponential backoff, so that the
// stream, and the resync it brings, are back within a probe interval of
// the registry's return. The backoff is for a Watch that fails while the
// registry answers.

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

// watch owns the watch stream: it opens it, applies its events and reopens
// it until Stop.
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
			if c.ctx.Err() != nil {
				return
			}
			if c.now().Sub(opened) >= backoffResetAfter {
				attempt = 0
			}
			c.streamLost(err)
		}
		if c.ctx.Err() != nil {
			return
		}
		if connected {
			c.notify(log.WarnLevel, WatchDisconnected, err, "regcache: watch stream lost, reconnecting: %v", err)
			connected = false
		}
		attempt++
		t := time.NewTimer(c.redialWait(attempt))
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

// redialWait is the wait before redial attempt n. While the registry is
// held down (the stream lost and its redial failed, with nothing answering
// since), the redials come a probe interval apart: they are probes, and
// what finds the registry back when no refresh is due. Otherwise Watch
// fails while the registry answers, and the backoff applies.
func (c *cache) redialWait(n int) time.Duration {
	c.mu.Lock()
	interval, down := c.health.interval, c.health.down
	c.mu.Unlock()
	if down && interval > 0 {
		return interval
	}
	return backoff(n, rand.Float64())
}

// streamLost records a stream lost as a failure towards the registry's
// health: with a redial that fails next, or a refresh, it takes the
// registry down.
func (c *cache) streamLost(err error) {
	c.streamFailed(streamSuspect, err, true, c.now())
}

// redialFailed records a failed or overdue Watch call that started at
// started. Only the first failure after a stream counts as evidence: a
// Watch that keeps failing is the stream's own trouble.
func (c *cache) redialFailed(err error, started time.Time) {
	c.mu.Lock()
	evidence := !c.redialFailing
	c.redialFailing = true
	if c.health.down {
		c.health.probes++
	}
	c.mu.Unlock()
	c.streamFailed(redialSuspect, err, evidence, started)
}

// streamFailed applies a failure of the stream to the registry's health.
func (c *cache) streamFailed(suspect string, err error, evidence bool, started time.Time) {
	var out outbox
	c.mu.Lock()
	now := c.now()
	c.healthLocked(c.health.failed(suspect, err, evidence, started, now), now, &out)
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

// openStream opens the watch stream and publishes it for Stop. Each stream
// established is an answer from the registry, and starts a resync of the
// data fetched before it.
func (c *cache) openStream() (registry.Watcher, error) {
	if c.opts.WatchPerService {
		return c.openServiceWatches()
	}
	w, err := c.dial()
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
	c.publishLocked(w)
	c.redialFailing = false
	v := c.health.answered("", c.now())
	c.healthLocked(v, c.now(), &out) // back up: resyncs, the stream being set
	if !v.wentUp {
		c.epoch++
		c.wake()
	}
	c.resyncPending = false
	return w, nil
}

// publishLocked makes w the stream that Stop closes.
func (c *cache) publishLocked(w registry.Watcher) {
	c.stream = w
	c.streams++
	if c.streams > 1 {
		c.stats.reconnects.Add(1)
	}
	select {
	case <-c.redial: // this stream is what it asked for
	default:
	}
}

// dial calls Watch for the one stream of every service. A call still out
// after slowCall counts as a failed redial towards the registry's health,
// so that a Watch that hangs (etcd's client waiting for a connection)
// holds nothing back; the call is still waited for, and a stream it opens
// late is used.
func (c *cache) dial() (registry.Watcher, error) {
	type result struct {
		w   registry.Watcher
		err error
	}
	started := c.now()
	done := make(chan result, 1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		w, err := c.callWatch(c.ctx)
		done <- result{w, err}
	}()
	t := time.NewTimer(slowCall)
	defer t.Stop()
	late := false
	for {
		select {
		case r := <-done:
			if r.err != nil && !late && c.ctx.Err() == nil {
				c.redialFailed(r.err, started)
			}
			return r.w, r.err
		case <-t.C:
			late = true
			c.redialFailed(fmt.Errorf("registry %s: Watch has not returned in %v", c.reg.String(), slowCall), started)
		}
	}
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
