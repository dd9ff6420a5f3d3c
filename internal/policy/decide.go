package policy

import "time"

// Decision is what one lookup does, decided from a service's state at one
// instant.
type Decision int

const (
	// ServeFresh returns the cached data: it has not expired.
	ServeFresh Decision = iota
	// ServeStale returns expired data without a registry call, because a
	// refresh is in flight or the window is open.
	ServeStale
	// JoinFlight waits for the refresh in flight: there is nothing to serve.
	JoinFlight
	// RefuseThrottled returns the throttled error: nothing is cached and
	// the window is open.
	RefuseThrottled
	// StartRefresh wants a refresh; a caller with data serves it at once,
	// and a caller without waits for the refresh.
	StartRefresh
)

func (d Decision) String() string {
	switch d {
	case ServeFresh:
		return "ServeFresh"
	case ServeStale:
		return "ServeStale"
	case JoinFlight:
		return "JoinFlight"
	case RefuseThrottled:
		return "RefuseThrottled"
	case StartRefresh:
		return "StartRefresh"
	}
	return "unknown"
}

// Data is what a lookup may serve: nothing (Held false), or data that is
// fresh until RefreshAt, due a refresh ahead of its expiry from then, and
// stale from Expires.
type Data struct {
	Held               bool
	RefreshAt, Expires time.Time
}

// Decide is one service's read path as a pure function, so that each case
// is a row of a table test. inFlight means a refresh of the service is in
// flight or queued; allowed means its window lets a refresh start.
func Decide(now time.Time, d Data, inFlight, allowed bool) Decision {
	switch {
	case d.Held && now.Before(d.RefreshAt):
		return ServeFresh
	case d.Held && now.Before(d.Expires):
		// The refresh-ahead window: fresh, and refreshed in the
		// background if the window allows.
		if inFlight || !allowed {
			return ServeFresh
		}
		return StartRefresh
	case inFlight && d.Held:
		return ServeStale
	case inFlight:
		return JoinFlight
	case !allowed && d.Held:
		return ServeStale
	case !allowed:
		return RefuseThrottled
	default:
		return StartRefresh
	}
}
