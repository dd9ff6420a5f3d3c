// Package watchset is the watch stream of the cache's WithWatchPerService:
// one watch per cached service, read as one stream that ends only with
// Stop.
//
// It has its own lock and none of the cache's: what it needs of the cache
// (the clock, its goroutines counted for its Stop, the registry's health,
// the services it holds, the guarded Watch and Next calls, and what a
// watch opened, proven or failed means for the registry's health) comes
// through Host, whose methods take the cache's lock themselves. The cache
// calls into a Set with its own lock held, so the set never holds its lock
// while it calls a Host method that takes the cache's.
package watchset

import (
	"context"
	"sync"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/timeq"
)

// Host is what a Set needs of the cache. The set calls Now and Cached
// with its own lock held: they take no lock. It calls Tell with its lock
// released: Tell is an input of the cache's core, and takes the cache's
// lock.
type Host interface {
	// Now reads the cache's clock.
	Now() time.Time
	// Go runs f in a goroutine that the cache's Stop waits for. The set
	// calls it only from goroutines that Stop waits for too.
	Go(f func())
	// Cached reports whether the cache holds an entry for service, with
	// data or without.
	Cached(service string) bool
	// Watch calls the registry's Watch for service alone, with ctx. A
	// panic in it, and a nil watcher, are errors.
	Watch(ctx context.Context, service string) (registry.Watcher, error)
	// Next returns w's next result; a panic in it is an error, and so is
	// a watcher that keeps returning neither an event nor an error.
	// empty counts those results.
	Next(w registry.Watcher, empty *int) (*registry.Result, error)
	// Tell tells the cache what happened to the watches, and returns the
	// registry's health after it, with what the notice asks.
	Tell(n Notice) Reply
}

// NoticeKind is what a Notice tells.
type NoticeKind uint8

const (
	// Pass: a pass over the watches starts; it asks for the registry's
	// health.
	Pass NoticeKind = iota
	// Opened: Service's watch is established, Keys being its suspects
	// in the registry's health: an answer from the registry, and the
	// service's data, fetched before it, to re-validate. While the
	// registry is held down, the watch is no answer until it has lasted
	// policy.SlowCall, which Reply.Unproven says. Told says that its
	// failure was told, so that its return is too; Reopened that it was
	// open before.
	Opened
	// Proven: a watch opened while the registry was held down has lasted
	// policy.SlowCall: the registry is back.
	Proven
	// Failed: Service's watch was lost, or a redial of it failed or is
	// overdue, Suspect standing for it in the registry's health, the call
	// having started at Started. With Tell, it is logged and told unless
	// the registry is held down; Reply.Told says whether it was.
	Failed
	// Redialed: the watches due a redial were redialled.
	Redialed
)

// Notice is one thing that happened to the watches.
type Notice struct {
	Kind             NoticeKind
	Service, Suspect string
	Keys             []string
	Err              error
	Started          time.Time
	Told, Reopened   bool
	Tell             bool
}

// Reply is the cache's answer to a Notice.
type Reply struct {
	// Down and Interval are the registry's health: held down or not, and
	// its probe interval.
	Down     bool
	Interval time.Duration
	// Unproven answers Opened, and Told answers Failed.
	Unproven, Told bool
}

// Set is the watch stream of WithWatchPerService. A watch that fails
// costs its own service its events, not the others': it is redialled on
// its own backoff while the registry answers, and as the one probe of a
// probe interval while the registry is held down, and the data of each
// service whose watch opens is re-validated, since it was fetched before
// the watch. A watch lost and its redial failing count towards the
// registry's health as one failure while other watches are open, so that
// one service's watch alone never takes the registry down, and as two, as
// the single stream's do, when none is.
//
// It owns a goroutine per open watch, which passes its events on, one that
// opens and closes watches as services are cached, dropped, lost or due a
// redial (Run), and one per Watch call in flight (at most maxDials that
// are not yet overdue). All are counted by the host, and all end with
// Stop. Each pass costs what changed since the last, not the number of
// services.
type Set struct {
	h        Host
	maxDials int
	ctx      context.Context
	cancel   context.CancelFunc
	events   chan handoff
	// taken is the acknowledgement of the event the reader has now; only
	// the reader, which calls Next, touches it.
	taken chan struct{}
	// wake wakes the goroutine that matches the watches to the cached
	// services; a buffer of one, so that a burst of changes is one pass.
	wake chan struct{}

	mu sync.Mutex
	// young counts the watches whose stop is put off (stop).
	young   sync.WaitGroup
	watches map[string]*watch
	// changed are the services cached or dropped since the last pass.
	changed map[string]struct{}
	// retry holds the watches waiting for a redial, by when it is due.
	retry timeq.Queue[*watch]
	// unproven are watches opened while the registry was held down.
	unproven []*watch
	// overdue counts the Watch calls out for longer than policy.SlowCall.
	overdue int
	// lastProbe is when the last redial went while the registry was held
	// down: one a probe interval, then.
	lastProbe time.Time
}

var _ registry.Watcher = (*Set)(nil)

// watch is the state of one service's watch.
type watch struct {
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
	queued   *timeq.Item[*watch]
	opened   time.Time
	// told is set once its failure was logged, on its second in a row
	// while the registry is up.
	told bool
}

// lostKey and dialKey are the suspects that stand for the watch, lost and
// failing to open, in the registry's health.
func (sw *watch) lostKey() string { return policy.StreamSuspect + " " + sw.name }
func (sw *watch) dialKey() string { return policy.RedialSuspect + " " + sw.name }

// aloneLocked reports whether no watch but sw's is open: then nothing
// tells that the registry answers, and sw's loss and its failed redial
// are two failures, as the single stream's.
func (s *Set) aloneLocked(sw *watch) bool {
	for _, o := range s.watches {
		if o != sw && o.w != nil {
			return false
		}
	}
	return true
}

// New returns a set with no watch open, which ends when ctx does or with
// Stop; Run opens the watches. At most maxDials Watch calls that are not
// overdue are out at once. New makes no registry call and starts no
// goroutine.
func New(ctx context.Context, h Host, maxDials int) *Set {
	ctx, cancel := context.WithCancel(ctx)
	return &Set{
		h: h, maxDials: maxDials, ctx: ctx, cancel: cancel,
		events:  make(chan handoff),
		wake:    make(chan struct{}, 1),
		watches: map[string]*watch{},
		changed: map[string]struct{}{},
	}
}

// handoff is an event passed on to the reader, and where the reader
// acknowledges that it is done with it.
type handoff struct {
	res *registry.Result
	ack chan struct{}
}

// Next returns the next event of any of the watches; it fails only once
// the set is stopped. The event is the reader's until its next call, as
// a watcher's is: the watch that passed it on waits until then before it
// asks its own watcher for the next, which may decode into the same
// memory.
func (s *Set) Next() (*registry.Result, error) {
	if s.taken != nil {
		s.taken <- struct{}{} // a buffer of one, and its watch waits for it
		s.taken = nil
	}
	select {
	case h := <-s.events:
		s.taken = h.ack
		return h.res, nil
	case <-s.ctx.Done():
		return nil, registry.ErrWatcherStopped
	}
}

// Stop closes every watch. The goroutines end once their watch returns.
func (s *Set) Stop() {
	s.cancel()
	s.mu.Lock()
	var open []*watch
	for _, sw := range s.watches {
		if sw.w != nil {
			open = append(open, sw)
		}
	}
	clear(s.watches)
	s.mu.Unlock()
	for _, sw := range open {
		s.stop(sw.w, sw.opened)
	}
	s.young.Wait()
}

// Changed wakes the set for a service cached or dropped. It takes only
// the set's lock and does not block, so the cache calls it with its own
// lock held.
func (s *Set) Changed(service string) {
	s.mu.Lock()
	s.changed[service] = struct{}{}
	s.mu.Unlock()
	s.kick()
}

// kick wakes the goroutine that matches the watches.
func (s *Set) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// RedialNow makes every watch that failed due for a redial: the registry
// answered after failures. Like Changed, it takes only the set's lock.
func (s *Set) RedialNow() {
	s.mu.Lock()
	var all []*timeq.Item[*watch]
	s.retry.Each(func(it *timeq.Item[*watch]) { all = append(all, it) })
	for _, it := range all {
		s.retry.Move(it, time.Time{})
	}
	s.mu.Unlock()
	s.kick()
}

// Run opens a watch for each of cached, the services the cache held when
// the set was published, and then matches the watches to the services
// cached and dropped (Changed) until Stop. The caller runs it in a
// goroutine that the cache's Stop waits for.
func (s *Set) Run(cached []string) {
	s.mu.Lock()
	for _, name := range cached {
		s.changed[name] = struct{}{}
	}
	s.mu.Unlock()
	for {
		next := s.match()
		var t *time.Timer
		var timer <-chan time.Time
		if !next.IsZero() {
			t = time.NewTimer(max(next.Sub(s.h.Now()), time.Millisecond))
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

// match does one pass of Run: it opens a watch for each service cached
// since the last, closes those of the services dropped, redials those that
// are due, and brings the registry up on the watches that have proven it
// back. It returns when it is next due (zero: when woken).
func (s *Set) match() (next time.Time) {
	health := s.h.Tell(Notice{Kind: Pass})
	down, interval := health.Down, max(health.Interval, policy.BackoffBase)
	now := s.h.Now()

	s.mu.Lock()
	var closed []*watch
	var due []*watch
	for name := range s.changed {
		cached := s.h.Cached(name)
		sw := s.watches[name]
		switch {
		case cached && sw == nil:
			sw = &watch{name: name}
			s.watches[name] = sw
			due = append(due, sw)
		case !cached && sw != nil:
			delete(s.watches, name)
			if sw.w != nil {
				closed = append(closed, sw)
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
	var proven []*watch
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

	for _, sw := range closed {
		s.stop(sw.w, sw.opened)
	}
	if len(proven) > 0 {
		s.h.Tell(Notice{Kind: Proven})
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
		s.h.Tell(Notice{Kind: Redialed})
	}
	return next
}

// probeLocked takes the watch dialled longest ago out of the retry queue,
// dropping the queued watches that need no redial any more; nil if none is
// left.
func (s *Set) probeLocked() *watch {
	var pick *watch
	var stale []*watch
	s.retry.Each(func(it *timeq.Item[*watch]) {
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
func (s *Set) queueLocked(sw *watch, at time.Time) {
	if sw.queued != nil {
		s.retry.Move(sw.queued, at)
		return
	}
	sw.queued = s.retry.Push(sw, at)
}

// earliest returns the earlier of two times, where zero means never.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
