package cache

import (
	"container/heap"
	"time"
)

// throttle is one service's record of refresh attempts. It enforces the
// retry interval on every attempt, whatever its outcome, which is what keeps
// a failing or missing service from being hammered (cache penetration).
type throttle struct {
	// lastAttempt is when the last refresh started, moved to when it ended
	// once it has: the retry window runs from the end of an attempt. Zero
	// if there was none.
	lastAttempt time.Time
	// lastErr is the last refresh failure, nil after a success or a
	// not-found answer. It is kept so that a failure is logged once when
	// the service's state changes, not on every attempt.
	lastErr error
	// failures counts consecutive failed refreshes.
	failures int
	// window is the adaptive retry interval after failures; zero while it
	// is the base interval.
	window time.Duration
}

// interval is the service's current retry interval.
func (t *throttle) interval(base time.Duration) time.Duration {
	return max(base, t.window)
}

// allows reports whether a refresh may start at now.
func (t *throttle) allows(now time.Time, base time.Duration) bool {
	iv := t.interval(base)
	return iv <= 0 || t.lastAttempt.IsZero() || now.Sub(t.lastAttempt) >= iv
}

// retryIn is how long until allows turns true.
func (t *throttle) retryIn(now time.Time, base time.Duration) time.Duration {
	if t.allows(now, base) {
		return 0
	}
	return t.lastAttempt.Add(t.interval(base)).Sub(now)
}

// failed records a failed refresh. With adaptive retry (ceiling above base)
// the window doubles per consecutive failure; u is uniform in [0, 1).
// It reports whether the service was healthy before, so that the failure is
// logged once.
func (t *throttle) failed(err error, base, ceiling time.Duration, u float64) (wasHealthy bool) {
	wasHealthy = t.lastErr == nil
	t.lastErr = err
	t.failures++
	if ceiling > base {
		t.window = adaptiveInterval(t.failures, base, ceiling, u)
	}
	return wasHealthy
}

// succeeded records a refresh that got an answer, found or not. It reports
// whether the service was failing before.
func (t *throttle) succeeded() (wasFailing bool) {
	wasFailing = t.lastErr != nil
	t.lastErr, t.failures, t.window = nil, 0, 0
	return wasFailing
}

// adaptiveFloor is where doubling starts when the base interval is zero.
const adaptiveFloor = time.Second

// adaptiveInterval is the retry interval after n consecutive failures: a
// draw from the upper half of min(ceiling, base·2^n), never below base.
// Drawing from the upper half keeps the doubling visible while spreading
// the retries of services that failed together.
func adaptiveInterval(n int, base, ceiling time.Duration, u float64) time.Duration {
	start := base
	if start <= 0 {
		start = adaptiveFloor
	}
	top := ceiling
	if n < 40 {
		if d := start << n; d > 0 && d < ceiling {
			top = d
		}
	}
	return max(base, top/2+time.Duration(u*float64(top/2)))
}

// decision is what one lookup does, decided from an entry's state at one
// instant.
type decision int

const (
	// serveFresh returns the cached data: it has not expired.
	serveFresh decision = iota
	// serveStale returns expired data without a registry call, because a
	// refresh is in flight or the throttle is closed.
	serveStale
	// joinFlight waits for the refresh in flight: there is nothing to serve.
	joinFlight
	// refuseThrottled returns the throttled error: nothing is cached and the
	// throttle is closed.
	refuseThrottled
	// startRefresh starts a refresh; the caller serves stale data at once
	// if there is any, and waits otherwise.
	startRefresh
)

func (d decision) String() string {
	switch d {
	case serveFresh:
		return "serveFresh"
	case serveStale:
		return "serveStale"
	case joinFlight:
		return "joinFlight"
	case refuseThrottled:
		return "refuseThrottled"
	case startRefresh:
		return "startRefresh"
	}
	return "unknown"
}

// decide is the read path of SPEC rules 2 to 5 as a pure function, so that
// each rule is a row of a table test. snap is nil when nothing usable is
// cached.
func decide(now time.Time, snap *snapshot, inFlight bool, t *throttle, interval time.Duration) decision {
	switch {
	case snap != nil && now.Before(snap.refreshAt):
		return serveFresh
	case snap != nil && now.Before(snap.expires):
		// The refresh-ahead window: fresh, and refreshed in the
		// background if the throttle allows.
		if inFlight || !t.allows(now, interval) {
			return serveFresh
		}
		return startRefresh
	case inFlight && snap != nil:
		return serveStale
	case inFlight:
		return joinFlight
	case !t.allows(now, interval) && snap != nil:
		return serveStale
	case !t.allows(now, interval):
		return refuseThrottled
	default:
		return startRefresh
	}
}

// sweepQueue holds entries that have no data, ordered by when their
// throttle windows close. An entry with no data is kept only while its
// window is open, so lookups of ever-new names (typos, scans, user input
// behind a gateway) cannot grow memory without bound (SPEC rule 9). Windows
// differ in length under adaptive retry, so this is a min-heap.
type sweepQueue []sweepItem

type sweepItem struct {
	name string
	e    *entry
	at   time.Time // when the entry's throttle window closes
}

func (q sweepQueue) Len() int           { return len(q) }
func (q sweepQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q sweepQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *sweepQueue) Push(x any)        { *q = append(*q, x.(sweepItem)) }
func (q *sweepQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = sweepItem{}
	*q = old[:len(old)-1]
	return it
}

// peek returns the item whose window closes first, if any.
func (q sweepQueue) peek() (sweepItem, bool) {
	if len(q) == 0 {
		return sweepItem{}, false
	}
	return q[0], true
}

// forgetLocked arranges for an entry that has just lost its data to be
// dropped, with its throttle state, once its throttle window closes.
func (c *cache) forgetLocked(name string, e *entry, now time.Time) {
	interval := c.opts.MinimumRetryInterval
	if e.throttle.allows(now, interval) {
		c.dropLocked(name, e)
		return
	}
	heap.Push(&c.sweep, sweepItem{name: name, e: e, at: e.throttle.lastAttempt.Add(e.throttle.interval(interval))})
	if len(c.sweep) == 1 {
		c.wake()
	}
}

// sweepLocked drops the entries whose throttle windows have closed and that
// still have no data and no refresh in flight. It costs O(log n) per entry
// dropped and O(1) otherwise, so the read path may run it on every slow
// lookup.
func (c *cache) sweepLocked(now time.Time) {
	for {
		it, ok := c.sweep.peek()
		if !ok || it.at.After(now) {
			return
		}
		heap.Pop(&c.sweep)
		if it.e.data.Load() == nil && it.e.flight == nil &&
			it.e.throttle.allows(now, c.opts.MinimumRetryInterval) {
			c.dropLocked(it.name, it.e)
		}
	}
}

// dropLocked removes name's entry if it is still e.
func (c *cache) dropLocked(name string, e *entry) {
	if v, ok := c.entries.Load(name); ok && v.(*entry) == e && e.flight == nil {
		c.entries.Delete(name)
	}
}
