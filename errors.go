package cache

import (
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/core"
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
	ErrThrottled = core.ErrThrottled

	// ErrTooStale is matched (with errors.Is) by the error a lookup returns
	// when the only data cached is older than WithMaximumStale allows.
	ErrTooStale = core.ErrTooStale

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
// capped: see core.QuoteName.
func quoteName(name string) string { return core.QuoteName(name) }
