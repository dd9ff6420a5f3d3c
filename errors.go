package cache

import (
	"errors"
	"fmt"
	"time"

	"go-micro.dev/v4/registry"
)

var (
	// ErrThrottled is matched (with errors.Is) by the error a lookup
	// returns when the service has nothing cached and its last refresh
	// attempt was less than MinimumRetryInterval ago. The same error also
	// matches registry.ErrNotFound, which is what go-micro's selector and
	// the seed README expect.
	ErrThrottled = errors.New("registry lookup throttled")

	// ErrTooStale is matched (with errors.Is) by the error a lookup returns
	// when the only data cached is older than WithMaxStale allows.
	ErrTooStale = errors.New("cached data too stale")

	// ErrEmptyName is returned for a lookup of the empty service name. No
	// registry call is made.
	ErrEmptyName = errors.New("regcache: empty service name")
)

// throttledError names the service and when the next attempt is allowed:
// by the service's retry window, or (registryDown) by the next probe of a
// registry held to be down.
type throttledError struct {
	service      string
	retryIn      time.Duration
	registryDown bool
}

func (e *throttledError) Error() string {
	if e.registryDown {
		return fmt.Sprintf("regcache: service %q: %v, nothing cached: the registry is unreachable; next probe in %v",
			e.service, ErrThrottled, e.retryIn)
	}
	return fmt.Sprintf("regcache: service %q: %v, nothing cached; next attempt allowed in %v",
		e.service, ErrThrottled, e.retryIn)
}

// Unwrap lets errors.Is match both ErrThrottled and registry.ErrNotFound.
func (e *throttledError) Unwrap() []error {
	return []error{ErrThrottled, registry.ErrNotFound}
}

// tooStaleError names the service, the age of its data and the limit, and
// wraps what kept the cache from refreshing it.
type tooStaleError struct {
	service    string
	age, limit time.Duration
	cause      error
}

func (e *tooStaleError) Error() string {
	return fmt.Sprintf("regcache: service %q: %v: last refreshed %v ago, over the WithMaxStale limit of %v: %v",
		e.service, ErrTooStale, e.age, e.limit, e.cause)
}

// Unwrap lets errors.Is match ErrTooStale and the cause.
func (e *tooStaleError) Unwrap() []error {
	return []error{ErrTooStale, e.cause}
}
