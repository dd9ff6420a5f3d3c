package cache

import "time"

// throttle is one service's record of refresh attempts. It enforces
// MinimumRetryInterval on every attempt, whatever its outcome, which is what
// keeps a failing or missing service from being hammered (cache
// penetration).
type throttle struct {
	// lastAttempt is when the last refresh started; zero if never.
	lastAttempt time.Time
	// lastErr is the last refresh failure, nil after a success or a
	// not-found answer. It is kept so that a failure is logged once when
	// the service's state changes, not on every attempt.
	lastErr error
}

// allows reports whether a refresh may start at now.
func (t *throttle) allows(now time.Time, interval time.Duration) bool {
	return interval <= 0 || t.lastAttempt.IsZero() || now.Sub(t.lastAttempt) >= interval
}

// retryIn is how long until allows turns true.
func (t *throttle) retryIn(now time.Time, interval time.Duration) time.Duration {
	if t.allows(now, interval) {
		return 0
	}
	return t.lastAttempt.Add(interval).Sub(now)
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
// each rule is a row of a table test.
func decide(now time.Time, snap *snapshot, inFlight bool, t *throttle, interval time.Duration) decision {
	switch {
	case snap != nil && now.Before(snap.expires):
		return serveFresh
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

// sweepQueue holds entries that have no data, in the order their throttle
// windows close. An entry with no data is kept only while its window is
// open, so lookups of ever-new names (typos, scans, user input behind a
// gateway) cannot grow memory without bound (SPEC rule 9). All windows have
// the same length and attempts are recorded in time order, so a FIFO is
// enough.
type sweepQueue struct {
	items []sweepItem
	head  int
}

type sweepItem struct {
	name string
	e    *entry
	at   time.Time // when the entry's throttle window closes
}

func (q *sweepQueue) push(it sweepItem) { q.items = append(q.items, it) }

// peek returns the oldest item, if any.
func (q *sweepQueue) peek() (sweepItem, bool) {
	if q.head == len(q.items) {
		return sweepItem{}, false
	}
	return q.items[q.head], true
}

func (q *sweepQueue) pop() {
	q.items[q.head] = sweepItem{}
	q.head++
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head > 64 && q.head*2 > len(q.items):
		n := copy(q.items, q.items[q.head:])
		q.items, q.head = q.items[:n], 0
	}
}

func (q *sweepQueue) len() int { return len(q.items) - q.head }

// forgetLocked arranges for an entry that has just lost its data to be
// dropped, with its throttle state, once its throttle window closes.
func (c *cache) forgetLocked(name string, e *entry, now time.Time) {
	interval := c.opts.MinimumRetryInterval
	if e.throttle.allows(now, interval) {
		c.dropLocked(name, e)
		return
	}
	c.sweep.push(sweepItem{name: name, e: e, at: e.throttle.lastAttempt.Add(interval)})
	if c.sweep.len() == 1 {
		c.wake()
	}
}

// sweepLocked drops the entries whose throttle windows have closed and that
// still have no data and no refresh in flight. It costs O(1) amortised per
// call, so the read path may run it on every slow lookup.
func (c *cache) sweepLocked(now time.Time) {
	for {
		it, ok := c.sweep.peek()
		if !ok || it.at.After(now) {
			return
		}
		c.sweep.pop()
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
