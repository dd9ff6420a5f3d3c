// Package policy holds the cache's decisions as functions of their state
// and the time they are asked at: a service's retry window, what one
// lookup does, the registry's health, the watch stream's backoff. Nothing
// here reads a clock or takes a lock: the cache passes now, and owns the
// state under its own lock.
package policy

import "time"

// Throttle is one service's record of registry calls. It enforces the retry
// interval on every call, whatever its outcome, which is what keeps a
// failing or missing service from being hammered (cache penetration).
type Throttle struct {
	// LastAttempt is when the last call started, moved to when it ended
	// once it has: the window runs from the end of a call, so that a call
	// that takes as long as the interval does not leave the next caller
	// free to start another at once. Zero if there was none.
	LastAttempt time.Time
	// LastErr is the last call's failure, nil after an answer (found or
	// not); ErrAt is when it ended.
	LastErr error
	ErrAt   time.Time
	// Failures counts the failed calls in a row.
	Failures int
	// window is the adaptive interval after failures; zero while it is
	// the base interval.
	window time.Duration
	// Told is set once the failure was logged and told to the observer,
	// so that its recovery is too, and neither is repeated.
	Told bool
	// early is set when the last call went ahead of the window (Allows).
	early bool
	// Stood is when the last probe started that stood in for a try of
	// the service while the registry was down (Health.TriedSince).
	Stood time.Time
}

// Interval is the service's current retry interval.
func (t *Throttle) Interval(base time.Duration) time.Duration {
	return max(base, t.window)
}

// Outage reports whether the window was opened by a failure that ended no
// later than back, when the registry came back from an outage: the
// outage's failure, not the service's.
func (t *Throttle) Outage(back time.Time) bool {
	return t.LastErr != nil && !back.IsZero() && !t.LastAttempt.After(back)
}

// Allows reports whether a call may start at now, and whether it is early:
// ahead of the window, as the one re-validation that a resync since the
// last call (resynced) allows. A call goes early only after a call that
// did not: since calls that wait for the window are an interval apart,
// a service sees at most two calls in any one interval, its own and one
// early, however many resyncs there are.
func (t *Throttle) Allows(now time.Time, base time.Duration, resynced bool) (ok, early bool) {
	iv := t.Interval(base)
	if iv <= 0 || t.LastAttempt.IsZero() || now.Sub(t.LastAttempt) >= iv {
		return true, false
	}
	if resynced && !t.early {
		return true, true
	}
	return false, false
}

// Attempt records a call starting at now; early as Allows said.
func (t *Throttle) Attempt(now time.Time, early bool) {
	t.LastAttempt, t.early = now, early
}

// OpensAt is when the window closes, resyncs aside.
func (t *Throttle) OpensAt(base time.Duration) time.Time {
	return t.LastAttempt.Add(t.Interval(base))
}

// TryAt is when a service with nothing to serve is next tried as the
// probe while the registry is down: at the end of its window, which runs
// from the end of its last call, or a window after the start of the last
// probe that stood in for its try, whichever is later.
func (t *Throttle) TryAt(base time.Duration) time.Time {
	from := t.LastAttempt
	if t.Stood.After(from) {
		from = t.Stood
	}
	return from.Add(t.Interval(base))
}

// RetryIn is how long until Allows turns true.
func (t *Throttle) RetryIn(now time.Time, base time.Duration, resynced bool) time.Duration {
	if ok, _ := t.Allows(now, base, resynced); ok {
		return 0
	}
	return t.OpensAt(base).Sub(now)
}

// Failed records a failed call. With adaptive retry (ceiling above base)
// the window doubles per failure in a row; u is uniform in [0, 1). A
// streak of failures from before the registry came back at back does not
// count.
func (t *Throttle) Failed(err error, base, ceiling time.Duration, u float64, back time.Time) {
	if t.Outage(back) {
		t.Failures, t.window = 0, 0
	}
	t.LastErr = err
	t.Failures++
	if ceiling > base {
		t.window = AdaptiveInterval(t.Failures, base, ceiling, u)
	}
}

// Succeeded records a call that the registry answered, found or not. It
// reports whether the failure before it had been told, so that the
// recovery is told too.
func (t *Throttle) Succeeded() (told bool) {
	told = t.Told
	t.LastErr, t.ErrAt, t.Failures, t.window, t.Told = nil, time.Time{}, 0, 0, false
	return told
}

// adaptiveFloor is where doubling starts when the base interval is zero.
const adaptiveFloor = time.Second

// AdaptiveInterval is the retry interval after n failures in a row: a draw
// from the upper half of min(ceiling, base·2^n), never below base. Drawing
// from the upper half keeps the doubling visible while spreading the
// retries of services that failed together.
func AdaptiveInterval(n int, base, ceiling time.Duration, u float64) time.Duration {
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
