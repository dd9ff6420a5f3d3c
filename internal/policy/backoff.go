package policy

import "time"

// The watch stream's reconnect backoff: capped exponential with full
// jitter, reset once a stream has stayed up for BackoffResetAfter, and cut
// short by any answer from the registry.
const (
	BackoffBase       = 100 * time.Millisecond
	BackoffCap        = 30 * time.Second
	BackoffResetAfter = time.Minute
)

// Backoff is the wait before reconnect attempt n (n ≥ 1): a uniform draw
// from [0, min(BackoffCap, BackoffBase·2^(n-1))], given u uniform in
// [0, 1).
func Backoff(n int, u float64) time.Duration {
	ceiling := BackoffCap
	if n < 30 {
		if d := BackoffBase << (n - 1); d < BackoffCap {
			ceiling = d
		}
	}
	return time.Duration(u * float64(ceiling+1))
}
