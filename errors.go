package cache

import (
	"errors"
	"fmt"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/quote"
	"github.com/regcache/cache/internal/svcdata"
)

var (
	// ErrThrottled is matched (with errors.Is) by the error a lookup
	// returns when the service has nothing cached and no refresh may start:
	// its last attempt failed less than MinimumRetryInterval ago, or the
	// registry is held to be down and this lookup is not the probe. The
	// same error also matches registry.ErrNotFound, which is what code
	// written for go-micro's cache and selector checks for. Within the
	// window of an answer that the service does not exist, a lookup
	// returns registry.ErrNotFound itself, as the registry did.
	ErrThrottled = errors.New("registry lookup throttled")

	// ErrTooStale is matched (with errors.Is) by the error a lookup returns
	// when the only data cached is older than WithMaxStale allows.
	ErrTooStale = errors.New("cached data too stale")

	// ErrEmptyName is returned for a lookup of the empty service name. No
	// registry call is made. It also matches registry.ErrNotFound under
	// errors.Is, as go-micro's cache answers not found for that name.
	ErrEmptyName error = &emptyNameError{}

	// ErrAnswerTooLarge is matched (with errors.Is) by the error for a
	// registry answer, or a watch event, that the cache refuses to copy:
	// one version of a service whose endpoint Values nest deeper than 32
	// levels or form a cycle, or which holds more than 65 536 Value nodes,
	// or more than about a million nodes, endpoints, metadata entries and
	// Values in all. A Value reached by several paths counts once per
	// path, because whoever walks the tree (the snapshot file's encoder, a
	// debug print) visits it once per path. go-micro's servers describe
	// endpoints three levels deep, so no real registration comes near
	// these bounds; they keep a broken or hostile registry from exhausting
	// the stack or the memory of every client.
	ErrAnswerTooLarge = svcdata.ErrAnswerTooLarge
)

// emptyNameError is the type of ErrEmptyName.
type emptyNameError struct{}

func (*emptyNameError) Error() string { return "regcache: empty service name" }

// Unwrap lets errors.Is match registry.ErrNotFound.
func (*emptyNameError) Unwrap() error { return registry.ErrNotFound }

// quoteName quotes a caller's name for an error message or a log line,
// capped: see quote.Name.
func quoteName(name string) string { return quote.Name(name) }

// throttledError names the service and when the next attempt is allowed:
// by the service's retry window, or (registryDown) by the next probe of a
// registry held to be down. events is set while the watch stream is
// connected, so that an event may answer before that attempt.
type throttledError struct {
	service      string
	retryIn      time.Duration
	registryDown bool
	events       bool
}

func (e *throttledError) Error() string {
	wait := ""
	if e.events {
		wait = ", waiting for the registry or its events"
	}
	if e.registryDown {
		return fmt.Sprintf("regcache: service %s: %v, nothing cached: the registry is unreachable; next probe in %v%s",
			quoteName(e.service), ErrThrottled, roundWait(e.retryIn), wait)
	}
	return fmt.Sprintf("regcache: service %s: %v, nothing cached; next attempt allowed in %v%s",
		quoteName(e.service), ErrThrottled, roundWait(e.retryIn), wait)
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
	return fmt.Sprintf("regcache: service %s: %v: last refreshed %v ago, over the WithMaxStale limit of %v: %v",
		quoteName(e.service), ErrTooStale, roundWait(e.age), e.limit, e.cause)
}

// Unwrap lets errors.Is match ErrTooStale and the cause.
func (e *tooStaleError) Unwrap() []error {
	return []error{ErrTooStale, e.cause}
}
