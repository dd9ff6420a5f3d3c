package watchset

import (
	"fmt"
	"math/rand/v2"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/guard"
	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/quote"
)

// Opening, reading and losing the watch of one service.

// errOverdue is a Watch call's failure once it has been out for
// policy.SlowCall.
var errOverdue = fmt.Errorf("Watch has not returned in %v", policy.SlowCall)

// dial opens the watch of sw's service, waiting for the call for
// policy.SlowCall at most: a call out longer counts as a failed redial,
// and the pass goes on; the call, should it succeed late, installs its
// watch then. It reports false, starting nothing, when too many calls
// hang.
func (s *Set) dial(sw *watch) bool {
	s.mu.Lock()
	if s.watches[sw.name] != sw || sw.w != nil || sw.dialing {
		s.mu.Unlock()
		return true
	}
	if s.overdue >= s.maxDials {
		s.mu.Unlock()
		return false
	}
	sw.gen++
	gen := sw.gen
	sw.dialing, sw.dialed = true, s.h.Now()
	s.mu.Unlock()

	started := s.h.Now()
	settled := make(chan struct{})
	s.h.Go(func() {
		defer close(settled)
		w, err := s.h.Watch(s.ctx, sw.name)
		s.settle(sw, gen, w, err, started)
	})
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

// giveUp records the Watch call number gen of sw, out for
// policy.SlowCall, as failed, unless it has returned meanwhile.
func (s *Set) giveUp(sw *watch, gen int, started time.Time) {
	s.mu.Lock()
	if sw.gen != gen || !sw.dialing {
		s.mu.Unlock()
		return
	}
	sw.dialing, sw.overdueGen = false, gen
	s.overdue++
	s.mu.Unlock()
	s.failed(sw, sw.dialKey(), fmt.Errorf("watch of service %s: %w", quote.Name(sw.name), errOverdue), started)
}

// settle installs the watch that the call number gen of sw opened, or
// records its failure, and closes a watch that is no longer wanted.
func (s *Set) settle(sw *watch, gen int, w registry.Watcher, err error, started time.Time) {
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
			s.stop(w, s.h.Now())
		}
		return
	}
	if err != nil {
		s.mu.Unlock()
		if newest {
			s.failed(sw, sw.dialKey(), fmt.Errorf("watch of service %s: %w", quote.Name(sw.name), err), started)
		}
		return
	}
	sw.w, sw.opened = w, s.h.Now()
	reopened := sw.failures > 0
	told := sw.told
	sw.told = false
	s.mu.Unlock()
	s.h.Go(func() { s.pass(sw, w) })
	r := s.h.Tell(Notice{Kind: Opened, Service: sw.name, Told: told, Reopened: reopened, Keys: []string{sw.lostKey(), sw.dialKey()}})
	if r.Unproven {
		s.mu.Lock()
		s.unproven = append(s.unproven, sw)
		s.mu.Unlock()
		s.kick()
	}
}

// failed records a failure of sw (lost, or a redial failed), key standing
// for it, and queues its redial.
func (s *Set) failed(sw *watch, key string, err error, started time.Time) {
	now := s.h.Now()
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
	if s.h.Tell(Notice{Kind: Failed, Service: sw.name, Suspect: key, Err: err, Started: started, Tell: tell}).Told {
		s.mu.Lock()
		sw.told = true
		s.mu.Unlock()
	}
}

// pass passes the events of one service's watch on, until the watch fails
// (its service then waits for a redial) or is closed (the service dropped,
// or Stop).
func (s *Set) pass(sw *watch, w registry.Watcher) {
	empty := 0
	ack := make(chan struct{}, 1)
	for {
		res, err := s.h.Next(w, &empty)
		if err != nil {
			s.lost(sw, w, err)
			return
		}
		if res == nil {
			continue
		}
		select {
		case s.events <- handoff{res, ack}:
		case <-s.ctx.Done():
			return
		}
		// The reader may still be copying the event, which w's next
		// result may overwrite.
		select {
		case <-ack:
		case <-s.ctx.Done():
			return
		}
	}
}

// lost records that the watch w of sw failed with err, unless the set
// closed it.
func (s *Set) lost(sw *watch, w registry.Watcher, err error) {
	s.mu.Lock()
	if s.watches[sw.name] != sw || sw.w != w || s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	sw.w = nil
	if s.h.Now().Sub(sw.opened) >= policy.BackoffResetAfter {
		// Open long enough: this loss starts a new streak.
		sw.failures = 0
	}
	opened := sw.opened
	s.mu.Unlock()
	s.stop(w, opened)
	s.failed(sw, sw.lostKey(), fmt.Errorf("watch of service %s: %w", quote.Name(sw.name), err), s.h.Now())
}

// minWatchAge is how long a watch stays open at least before the set
// stops it. go-micro's Consul plugin starts a watch plan in a goroutine of
// its own, and consul's api (v1.9.0, and v1.32.1 still) panics when a plan
// is stopped just as its first query begins, which ends the process.
const minWatchAge = 100 * time.Millisecond

// stop stops w, opened at opened, once it is minWatchAge old. Stop waits
// for those it puts off.
func (s *Set) stop(w registry.Watcher, opened time.Time) {
	wait := minWatchAge - s.h.Now().Sub(opened)
	if wait <= 0 {
		guard.Stop(w)
		return
	}
	s.young.Add(1)
	time.AfterFunc(wait, func() {
		defer s.young.Done()
		guard.Stop(w)
	})
}
