package cache

import (
	"time"

	"github.com/regcache/cache/internal/svcdata"
)

// throttle is one service's record of refresh attempts. It enforces the
// retry interval on every attempt, whatever its outcome, which is what keeps
// a failing or missing service from being hammered (cache penetration).
type throttle struct {
	// lastAttempt is when the last refresh started, moved to when it ended
	// once it has: the retry window runs from the end of an attempt. Zero
	// if there was none.
	lastAttempt time.Time
	// early is when the last call ahead of the window started: after a
	// resync (the registry back from an outage, a watch stream
	// established), one call may go early, to re-validate what the last
	// attempt got, and only one an interval.
	early time.Time
	// lastErr is the last refresh failure, nil after a success or a
	// not-found answer; errAt is when it ended.
	lastErr error
	errAt   time.Time
	// failures counts consecutive failed refreshes.
	failures int
	// window is the adaptive retry interval after failures; zero while it
	// is the base interval.
	window time.Duration
	// told is set once the failure was logged and told to the observer, so
	// that its recovery is too, and neither is repeated.
	told bool
}

// interval is the service's current retry interval.
func (t *throttle) interval(base time.Duration) time.Duration {
	return max(base, t.window)
}

// outage reports whether the window was opened by a failure that ended no
// later than back, when the registry came back from an outage.
func (t *throttle) outage(back time.Time) bool {
	return t.lastErr != nil && !back.IsZero() && !t.lastAttempt.After(back)
}

// allows reports whether a refresh may start at now, and whether it is
// early: ahead of the window, as the one re-validation that a resync since
// the last attempt (resynced) allows. Early calls are an interval apart,
// so that whatever the resyncs, a service sees at most two calls in any
// one interval: its own, and one early.
func (t *throttle) allows(now time.Time, base time.Duration, resynced bool) (ok, early bool) {
	iv := t.interval(base)
	if iv <= 0 || t.lastAttempt.IsZero() || now.Sub(t.lastAttempt) >= iv {
		return true, false
	}
	if resynced && (t.early.IsZero() || now.Sub(t.early) >= iv) {
		return true, true
	}
	return false, false
}

// attempt records an attempt starting at now; early as allows said.
func (t *throttle) attempt(now time.Time, early bool) {
	t.lastAttempt = now
	if early {
		t.early = now
	}
}

// opensAt is when the retry window closes again, ignoring resyncs.
func (t *throttle) opensAt(base time.Duration) time.Time {
	return t.lastAttempt.Add(t.interval(base))
}

// retryIn is how long until allows turns true.
func (t *throttle) retryIn(now time.Time, base time.Duration, resynced bool) time.Duration {
	if ok, _ := t.allows(now, base, resynced); ok {
		return 0
	}
	return t.opensAt(base).Sub(now)
}

// failed records a failed refresh. With adaptive retry (ceiling above base)
// the window doubles per consecutive failure; u is uniform in [0, 1). A
// streak of failures from before the registry came back at back does not
// count.
func (t *throttle) failed(err error, base, ceiling time.Duration, u float64, back time.Time) {
	if t.outage(back) {
		t.failures, t.window = 0, 0
	}
	t.lastErr = err
	t.failures++
	if ceiling > base {
		t.window = adaptiveInterval(t.failures, base, ceiling, u)
	}
}

// succeeded records a refresh that got an answer, found or not. It reports
// whether the failure before it had been told, so that the recovery is told
// too.
func (t *throttle) succeeded() (told bool) {
	told = t.told
	t.lastErr, t.errAt, t.failures, t.window, t.told = nil, time.Time{}, 0, 0, false
	return told
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
	// startRefresh wants a refresh; a caller with data serves it at once,
	// and a caller without waits for the refresh.
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

// decide is one service's read path as a pure function, so that each case
// is a row of a table test. snap is nil when nothing usable is cached;
// inFlight means a refresh of the service is in flight or queued; allowed
// means its retry window lets a refresh start.
func decide(now time.Time, snap *svcdata.Snapshot, inFlight, allowed bool) decision {
	switch {
	case snap != nil && now.Before(snap.RefreshAt):
		return serveFresh
	case snap != nil && now.Before(snap.Expires):
		// The refresh-ahead window: fresh, and refreshed in the
		// background if the throttle allows.
		if inFlight || !allowed {
			return serveFresh
		}
		return startRefresh
	case inFlight && snap != nil:
		return serveStale
	case inFlight:
		return joinFlight
	case !allowed && snap != nil:
		return serveStale
	case !allowed:
		return refuseThrottled
	default:
		return startRefresh
	}
}
