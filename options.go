package cache

import (
	"fmt"
	"time"

	log "go-micro.dev/v4/logger"
)

var (
	// DefaultTTL is how long a successful lookup stays fresh when no
	// WithTTL option is given. It matches go-micro's registry cache.
	DefaultTTL = time.Minute

	// DefaultMinimumRetryInterval is the shortest time between two refresh
	// attempts for one service when no WithMinimumRetryInterval option is
	// given.
	DefaultMinimumRetryInterval = 5 * time.Second
)

// Options configures a Cache. The zero value of a field is never used
// directly: New starts from the defaults and applies each Option on top.
type Options struct {
	// Logger receives the cache's log lines. It defaults to go-micro's
	// logger.DefaultLogger.
	Logger log.Logger

	// TTL is how long data from a successful refresh stays fresh. It must
	// be positive.
	TTL time.Duration

	// MinimumRetryInterval is the shortest time between two refresh
	// attempts for one service, whatever their outcome. Zero turns the
	// throttle off; it must not be negative.
	MinimumRetryInterval time.Duration
}

// Option changes one field of Options.
type Option func(o *Options)

// WithTTL sets how long a successful lookup stays fresh. New panics if t is
// not positive.
func WithTTL(t time.Duration) Option {
	return func(o *Options) {
		o.TTL = t
	}
}

// WithLogger sets the logger. New panics if l is nil.
func WithLogger(l log.Logger) Option {
	return func(o *Options) {
		o.Logger = l
	}
}

// WithMinimumRetryInterval sets the shortest time between two refresh
// attempts for one service. Zero turns the throttle off. New panics if d is
// negative.
func WithMinimumRetryInterval(d time.Duration) Option {
	return func(o *Options) {
		o.MinimumRetryInterval = d
	}
}

// newOptions applies opts over the defaults and validates the result once,
// so that the rest of the package can trust every field.
func newOptions(opts []Option) Options {
	o := Options{
		Logger:               log.DefaultLogger,
		TTL:                  DefaultTTL,
		MinimumRetryInterval: DefaultMinimumRetryInterval,
	}
	for _, opt := range opts {
		if opt == nil {
			panic("regcache: New: nil Option")
		}
		opt(&o)
	}
	if o.Logger == nil {
		panic("regcache: WithLogger: logger must not be nil")
	}
	if o.TTL <= 0 {
		panic(fmt.Sprintf("regcache: WithTTL: TTL must be positive, got %v", o.TTL))
	}
	if o.MinimumRetryInterval < 0 {
		panic(fmt.Sprintf("regcache: WithMinimumRetryInterval: interval must not be negative, got %v", o.MinimumRetryInterval))
	}
	return o
}
