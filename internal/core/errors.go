package core

import (
	"errors"
	"fmt"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/quote"
)

var (
	// ErrThrottled is matched by the error of a lookup that the cache
	// refused without a registry call (see the root package's
	// ErrThrottled).
	ErrThrottled = errors.New("registry lookup throttled")
	// ErrTooStale is matched by the error of a lookup whose only data is
	// older than MaxStale allows.
	ErrTooStale = errors.New("cached data too stale")
)

// ThrottledError names the service and when the next attempt is allowed:
// by the service's retry window, or (RegistryDown) by the next probe of a
// registry held to be down. Events is set while the watch stream is
// connected, so that an event may answer before that attempt. It matches
// ErrThrottled and registry.ErrNotFound.
type ThrottledError struct {
	Service      string
	RetryIn      time.Duration
	RegistryDown bool
	Events       bool
}

func (e *ThrottledError) Error() string {
	wait := ""
	if e.Events {
		wait = ", waiting for the registry or its events"
	}
	if e.RegistryDown {
		return fmt.Sprintf("regcache: service %s: %v, nothing cached: the registry is unreachable; next probe in %v%s",
			quoteName(e.Service), ErrThrottled, roundWait(e.RetryIn), wait)
	}
	return fmt.Sprintf("regcache: service %s: %v, nothing cached; next attempt allowed in %v%s",
		quoteName(e.Service), ErrThrottled, roundWait(e.RetryIn), wait)
}

// Unwrap lets errors.Is match both ErrThrottled and registry.ErrNotFound.
func (e *ThrottledError) Unwrap() []error {
	return []error{ErrThrottled, registry.ErrNotFound}
}

// TooStaleError names the service, the age of its data and the limit, and
// wraps what kept the cache from refreshing it.
type TooStaleError struct {
	Service    string
	Age, Limit time.Duration
	Cause      error
}

func (e *TooStaleError) Error() string {
	return fmt.Sprintf("regcache: service %s: %v: last refreshed %v ago, over the WithMaxStale limit of %v: %v",
		quoteName(e.Service), ErrTooStale, roundWait(e.Age), e.Limit, e.Cause)
}

// Unwrap lets errors.Is match ErrTooStale and the cause.
func (e *TooStaleError) Unwrap() []error {
	return []error{ErrTooStale, e.Cause}
}

// waitStep is the precision of the durations that errors show: enough for
// a person, and coarse enough that the messages of one episode read alike
// and group together in logs.
const waitStep = 10 * time.Millisecond

// roundWait cuts d to waitStep, never down to zero: a wait that is still
// running shows as at least one step.
func roundWait(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return max(d.Truncate(waitStep), waitStep)
}

// QuoteName quotes a service name for an error message or a log line,
// capped (quote.Name): names come from callers, and a gateway may pass on
// whatever its clients send.
func QuoteName(name string) string { return quote.Name(name) }

func quoteName(name string) string { return quote.Name(name) }
