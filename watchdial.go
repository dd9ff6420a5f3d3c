package cache

import (
	"fmt"
	"math/rand/v2"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/policy"
)

// Opening, reading and losing the watch of one service, for the set of
// per-service watches (watchset.go).

// dial opens the watch of sw's service, waiting for the call for policy.SlowCall
// at most: a call out longer counts as a failed redial, and the pass goes
// on; the call, should it succeed late, installs its watch then. It
// reports false, starting nothing, when too many calls hang.
func (s *serviceWatches) dial(sw *serviceWatch) bool {
	s.mu.Lock()
	if s.watches[sw.name] != sw || sw.w != nil || sw.dialing {
		s.mu.Unlock()
		return true
	}
	if s.overdue >= maxDials {
		s.mu.Unlock()
		return false
	}
	sw.gen++
	gen := sw.gen
	sw.dialing, sw.dialed = true, s.c.now()
	s.mu.Unlock()

	started := s.c.now()
	settled := make(chan struct{})
	s.c.wg.Add(1)
	go func() {
		defer s.c.wg.Done()
		defer close(settled)
		w, err := s.c.callWatch(s.ctx, registry.WatchService(sw.name))
		s.settle(sw, gen, w, err, started)
	}()
	t := time.NewTimer(policy.SlowCall)
	defer t.Stop()
	select {
	case <-settled:
	case <-s.ctx.Done():
	case <-t.C:
		s.giveUp(sw, gen, started)
	}
	return true
}

// giveUp records the Watch call number gen of sw, out for policy.SlowCall, as
// failed, unless it has returned meanwhile.
func (s *serviceWatches) giveUp(sw *serviceWatch, gen int, started time.Time) {
	s.mu.Lock()
	if sw.gen != gen || !sw.dialing {
		s.mu.Unlock()
		return
	}
	sw.dialing, sw.overdueGen = false, gen
	s.overdue++
	s.mu.Unlock()
	s.failed(sw, sw.dialKey(), fmt.Errorf("watch of service %s: %w", quoteName(sw.name), errOverdue), started)
}

// settle installs the watch that the call number gen of sw opened, or
// records its failure, and closes a watch that is no longer wanted.
func (s *serviceWatches) settle(sw *serviceWatch, gen int, w registry.Watcher, err error, started time.Time) {
	s.mu.Lock()
	if sw.overdueGen == gen {
		s.overdue--
	}
	newest := sw.gen == gen && sw.dialing
	if newest {
		sw.dialing = false
	}
	if s.ctx.Err() != nil || s.watches[sw.name] != sw || sw.w != nil {
		// Stopped, dropped (a new entry has a watch of its own), or
		// open already through another call.
		s.mu.Unlock()
		if err == nil {
			stopStream(w)
		}
		return
	}
	if err != nil {
		s.mu.Unlock()
		if newest {
			s.failed(sw, sw.dialKey(), fmt.Errorf("watch of service %s: %w", quoteName(sw.name), err), started)
		}
		return
	}
	sw.w, sw.opened = w, s.c.now()
	reopened := sw.failures > 0
	told := sw.told
	sw.told = false
	s.c.wg.Add(1)
	s.mu.Unlock()
	go s.pass(sw, w)
	if reopened {
		s.c.stats.reconnects.Add(1)
	}
	if s.c.serviceWatchOpened(sw.name, told, sw.lostKey(), sw.dialKey()) {
		s.mu.Lock()
		s.unproven = append(s.unproven, sw)
		s.mu.Unlock()
		s.kick()
	}
}

// failed records a failure of sw (lost, or a redial failed), key standing
// for it, and queues its redial.
func (s *serviceWatches) failed(sw *serviceWatch, key string, err error, started time.Time) {
	now := s.c.now()
	s.mu.Lock()
	sw.failures++
	if s.watches[sw.name] == sw {
		s.queueLocked(sw, now.Add(policy.Backoff(sw.failures, rand.Float64())))
	}
	if !s.aloneLocked(sw) {
		key = sw.lostKey()
	}
	// Told on its second failure in a row, as a service's refresh is: a
	// first one may be the start of an outage, told as such.
	tell := !sw.told && sw.failures >= 2
	s.mu.Unlock()
	s.kick()
	if s.c.serviceWatchFailed(sw.name, key, err, started, tell) {
		s.mu.Lock()
		sw.told = true
		s.mu.Unlock()
	}
}

// pass passes the events of one service's watch on, until the watch fails
// (its service then waits for a redial) or is closed (the service dropped,
// or Stop).
func (s *serviceWatches) pass(sw *serviceWatch, w registry.Watcher) {
	defer s.c.wg.Done()
	empty := 0
	for {
		res, err := s.c.next(w, &empty)
		if err != nil {
			s.lost(sw, w, err)
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

// lost records that the watch w of sw failed with err, unless the set
// closed it.
func (s *serviceWatches) lost(sw *serviceWatch, w registry.Watcher, err error) {
	s.mu.Lock()
	if s.watches[sw.name] != sw || sw.w != w || s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	sw.w = nil
	if s.c.now().Sub(sw.opened) >= policy.BackoffResetAfter {
		// Open long enough: this loss starts a new streak.
		sw.failures = 0
	}
	s.mu.Unlock()
	stopStream(w)
	s.failed(sw, sw.lostKey(), fmt.Errorf("watch of service %s: %w", quoteName(sw.name), err), s.c.now())
}
