package cache

import (
	"context"
	"sync"
	"time"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/timeq"
	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// serviceWatches is the watch stream of WithWatchPerService: one watch per
// cached service, which the cache reads as one stream that ends only with
// Stop. A watch that fails costs its own service its events, not the
// others': it is redialled on its own backoff while the registry answers,
// and as the one probe of a probe interval while the registry is held
// down, and the data of each service whose watch opens is re-validated,
// since it was fetched before the watch. A watch lost and its redial
// failing count towards the registry's health as one failure while other
// watches are open, so that one service's watch alone never takes the
// registry down, and as two, as the single stream's do, when none is.
//
// It owns a goroutine per open watch, which passes its events on, one that
// opens and closes watches as services are cached, dropped, lost or due a
// redial, and one per Watch call in flight (at most maxDials that are not
// yet overdue). All are counted in the cache's WaitGroup, and all end
// with Stop. Each pass costs what changed since the last, not the number
// of services.
type serviceWatches struct {
	c      *cache
	ctx    context.Context
	cancel context.CancelFunc
	events chan *registry.Result
	// wake wakes the goroutine that matches the watches to the cached
	// services; a buffer of one, so that a burst of changes is one pass.
	wake chan struct{}

	mu      sync.Mutex
	watches map[string]*serviceWatch
	// changed are the services cached or dropped since the last pass.
	changed map[string]struct{}
	// retry holds the watches waiting for a redial, by when it is due.
	retry timeq.Queue[*serviceWatch]
	// unproven are watches opened while the registry was held down.
	unproven []*serviceWatch
	// overdue counts the Watch calls out for longer than policy.SlowCall.
	overdue int
	// lastProbe is when the last redial went while the registry was held
	// down: one a probe interval, then.
	lastProbe time.Time
}

// serviceWatch is the state of one service's watch.
type serviceWatch struct {
	name string
	w    registry.Watcher // nil while it is not open
	// dialing is set while the newest Watch call, number gen, is out and
	// not overdue; overdueGen is the number of the last call given up on.
	dialing         bool
	dialed          time.Time
	gen, overdueGen int
	// failures counts the failures in a row: losses and failed redials,
	// reset once a watch has stayed open for policy.BackoffResetAfter.
	// queued is its place in the retry queue, due when the next redial
	// may start; nil while it is not queued.
	failures int
	queued   *timeq.Item[*serviceWatch]
	opened   time.Time
	// told is set once its failure was logged, on its second in a row
	// while the registry is up.
	told bool
}

// lostKey and dialKey are the suspects that stand for the watch, lost and
// failing to open, in the registry's health.
func (sw *serviceWatch) lostKey() string { return policy.StreamSuspect + " " + sw.name }
func (sw *serviceWatch) dialKey() string { return policy.RedialSuspect + " " + sw.name }

// aloneLocked reports whether no watch but sw's is open: then nothing
// tells that the registry answers, and sw's loss and its failed redial
// are two failures, as the single stream's.
func (s *serviceWatches) aloneLocked(sw *serviceWatch) bool {
	for _, o := range s.watches {
		if o != sw && o.w != nil {
			return false
		}
	}
	return true
}

// openServiceWatches publishes a set of per-service watches and starts the
// goroutine that opens them. It makes no registry call of its own.
func (c *cache) openServiceWatches() (registry.Watcher, error) {
	ctx, cancel := context.WithCancel(c.ctx)
	s := &serviceWatches{
		c: c, ctx: ctx, cancel: cancel,
		events:  make(chan *registry.Result),
		wake:    make(chan struct{}, 1),
		watches: map[string]*serviceWatch{},
		changed: map[string]struct{}{},
	}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		cancel()
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
	s.mu.Lock()
	for _, name := range c.cachedNames() {
		s.changed[name] = struct{}{}
	}
	s.mu.Unlock()
	go s.run()
	return s, nil
}

// Next returns the next event of any of the watches; it fails only once
// the set is stopped.
func (s *serviceWatches) Next() (*registry.Result, error) {
	select {
	case res := <-s.events:
		return res, nil
	case <-s.ctx.Done():
		return nil, registry.ErrWatcherStopped
	}
}

// Stop closes every watch. The goroutines end once their watch returns.
func (s *serviceWatches) Stop() {
	s.cancel()
	s.mu.Lock()
	var open []registry.Watcher
	for _, sw := range s.watches {
		if sw.w != nil {
			open = append(open, sw.w)
		}
	}
	clear(s.watches)
	s.mu.Unlock()
	for _, w := range open {
		stopStream(w)
	}
}

// servicesChanged wakes the set for a service cached or dropped.
func (s *serviceWatches) servicesChanged(name string) {
	s.mu.Lock()
	s.changed[name] = struct{}{}
	s.mu.Unlock()
	s.kick()
}

// kick wakes the goroutine that matches the watches.
func (s *serviceWatches) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// redialNow makes every watch that failed due for a redial: the registry
// answered after failures.
func (s *serviceWatches) redialNow() {
	s.mu.Lock()
	var all []*timeq.Item[*serviceWatch]
	s.retry.Each(func(it *timeq.Item[*serviceWatch]) { all = append(all, it) })
	for _, it := range all {
		s.retry.Move(it, time.Time{})
	}
	s.mu.Unlock()
	s.kick()
}

// run matches the watches to the cached services until Stop.
func (s *serviceWatches) run() {
	defer s.c.wg.Done()
	for {
		next := s.match()
		var t *time.Timer
		var timer <-chan time.Time
		if !next.IsZero() {
			t = time.NewTimer(max(next.Sub(s.c.now()), time.Millisecond))
			timer = t.C
		}
		select {
		case <-s.wake:
		case <-timer:
		case <-s.ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if s.ctx.Err() != nil {
			return
		}
	}
}

// match does one pass of run: it opens a watch for each service cached
// since the last, closes those of the services dropped, redials those that
// are due, and brings the registry up on the watches that have proven it
// back. It returns when it is next due (zero: when woken).
func (s *serviceWatches) match() (next time.Time) {
	s.c.mu.Lock()
	down, interval := s.c.health.Down, max(s.c.health.Interval, policy.BackoffBase)
	s.c.mu.Unlock()
	now := s.c.now()

	s.mu.Lock()
	var closed []registry.Watcher
	var due []*serviceWatch
	for name := range s.changed {
		_, cached := s.c.entries.Load(name)
		sw := s.watches[name]
		switch {
		case cached && sw == nil:
			sw = &serviceWatch{name: name}
			s.watches[name] = sw
			due = append(due, sw)
		case !cached && sw != nil:
			delete(s.watches, name)
			if sw.w != nil {
				closed = append(closed, sw.w)
			}
		}
	}
	clear(s.changed)
	for it := s.retry.Peek(); it != nil && !down; it = s.retry.Peek() {
		sw := it.Value
		if s.watches[sw.name] == sw && sw.w == nil && !sw.dialing && now.Before(it.At) {
			next = earliest(next, it.At)
			break
		}
		s.retry.Pop()
		sw.queued = nil
		if s.watches[sw.name] == sw && sw.w == nil && !sw.dialing {
			due = append(due, sw)
		}
	}
	if down && s.retry.Len() > 0 {
		// One redial a probe interval is the probe: the watch dialled
		// longest ago, whatever its backoff, so that the probes rotate.
		if at := s.lastProbe.Add(interval); now.Before(at) {
			next = earliest(next, at)
		} else if sw := s.probeLocked(); sw != nil {
			s.lastProbe = now
			due = append(due, sw)
			next = earliest(next, now.Add(interval))
		}
	}
	var proven []*serviceWatch
	kept := s.unproven[:0]
	for _, sw := range s.unproven {
		switch {
		case s.watches[sw.name] != sw || sw.w == nil:
		case now.Sub(sw.opened) >= policy.SlowCall:
			proven = append(proven, sw)
		default:
			kept = append(kept, sw)
			next = earliest(next, sw.opened.Add(policy.SlowCall))
		}
	}
	s.unproven = kept
	s.mu.Unlock()

	for _, w := range closed {
		stopStream(w)
	}
	if len(proven) > 0 {
		s.c.serviceWatchProven()
	}
	for i, sw := range due {
		if !s.dial(sw) {
			// Too many calls hang: the rest wait a while.
			s.mu.Lock()
			for _, sw := range due[i:] {
				s.queueLocked(sw, now.Add(policy.SlowCall))
			}
			s.mu.Unlock()
			next = earliest(next, now.Add(policy.SlowCall))
			break
		}
	}
	if len(due) > 0 && !down {
		s.c.serviceWatchesRedialed()
	}
	return next
}

// probeLocked takes the watch dialled longest ago out of the retry queue,
// dropping the queued watches that need no redial any more; nil if none is
// left.
func (s *serviceWatches) probeLocked() *serviceWatch {
	var pick *serviceWatch
	var stale []*serviceWatch
	s.retry.Each(func(it *timeq.Item[*serviceWatch]) {
		switch sw := it.Value; {
		case s.watches[sw.name] != sw || sw.w != nil || sw.dialing:
			stale = append(stale, sw)
		case pick == nil || sw.dialed.Before(pick.dialed):
			pick = sw
		}
	})
	if pick != nil {
		stale = append(stale, pick)
	}
	for _, sw := range stale {
		s.retry.Remove(sw.queued)
		sw.queued = nil
	}
	return pick
}

// queueLocked queues sw for a redial at at.
func (s *serviceWatches) queueLocked(sw *serviceWatch, at time.Time) {
	if sw.queued != nil {
		s.retry.Move(sw.queued, at)
		return
	}
	sw.queued = s.retry.Push(sw, at)
}

// failing reports whether a watch waits for a redial.
func (s *serviceWatches) failing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	failing := false
	s.retry.Each(func(it *timeq.Item[*serviceWatch]) {
		sw := it.Value
		failing = failing || s.watches[sw.name] == sw && sw.w == nil
	})
	return failing
}

// serviceWatchOpened records a service's watch established, its suspects
// being keys: an answer from the registry, and the service's data, fetched
// before it, to re-validate. While the registry is held down, the watch
// is no answer until it has lasted policy.SlowCall, which unproven reports. told
// says that its failure was told, so that its return is too.
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

// serviceWatchProven brings the registry up on the evidence of a watch
// that has lasted policy.SlowCall since it opened while the registry was down.
func (c *cache) serviceWatchProven() {
	var out outbox
	c.mu.Lock()
	if c.health.Down {
		now := c.now()
		c.healthLocked(c.health.Answered("", now), now, &out)
	}
	c.mu.Unlock()
	c.flush(&out)
}

// serviceWatchFailed records a failure of a service's watch (lost, or a
// redial failed or overdue) towards the registry's health, key standing
// for it. With tell, it is logged and told unless the registry is held
// down, where the outage is told instead; it reports whether it was.
func (c *cache) serviceWatchFailed(name, key string, err error, started time.Time, tell bool) (told bool) {
	var out outbox
	c.mu.Lock()
	now := c.now()
	if tell && !c.health.Down {
		told = true
		out.log(log.WarnLevel, "regcache: watch of service %s failing, redialling: %v", quoteName(name), err)
		c.emitLocked(Event{Kind: WatchDisconnected, Service: name, Err: err, Time: now})
	}
	c.healthLocked(c.health.Failed(key, err, started, now), now, &out)
	c.mu.Unlock()
	c.flush(&out)
	return told
}

// serviceWatchesRedialed tells the cache that the watches due a redial
// were redialled: a resync that waited for them, when the registry came
// back, goes now, so that one round covers the gap and the watches.
func (c *cache) serviceWatchesRedialed() {
	c.mu.Lock()
	if c.resyncPending {
		c.resyncPending = false
		c.epoch++
		c.wake()
	}
	c.mu.Unlock()
}
