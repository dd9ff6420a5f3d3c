package cache

import "time"

// The retry interval and the registry's health, as options see them. The
// rules live in the core (internal/core: gate.go for the one gate every
// registry call passes, stream.go for the registry's health); what a user
// sets is here and in options.go.
var (
	// DefaultMinimumRetryInterval is the shortest time between two refresh
	// attempts for one service when no WithMinimumRetryInterval option is
	// given.
	DefaultMinimumRetryInterval = 5 * time.Second

	// DefaultProbeInterval is how often a cache sends one probe to a
	// registry it holds to be down when no WithProbeInterval option is
	// given.
	DefaultProbeInterval = time.Second
)
