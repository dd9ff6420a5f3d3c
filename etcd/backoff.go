package etcd

import "time"

// The wait before a refused watch is asked for again: capped exponential
// with full jitter, as the cache's own stream redials. The module keeps
// its own copy of the rule, so that it depends on the cache's public API
// only.
const (
	refusedBackoffBase = 100 * time.Millisecond
	refusedBackoffCap  = 30 * time.Second
)

// refusedBackoff is the wait after refusal n (n ≥ 1): a uniform draw from
// [0, min(cap, base·2^(n-1))], given u uniform in [0, 1).
func refusedBackoff(n int, u float64) time.Duration {
	ceiling := refusedBackoffCap
	if n < 30 {
		if d := refusedBackoffBase << (n - 1); d < ceiling {
			ceiling = d
		}
	}
	return time.Duration(u * float64(ceiling+1))
}
