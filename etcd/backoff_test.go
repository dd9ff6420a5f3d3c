package etcd

import (
	"testing"
	"time"
)

// TestRefusedBackoffDoublesUpToItsCap: the ceiling of the wait doubles
// with each refusal from 100 ms and stops at 30 s, however many refusals
// (a shift past 63 bits must not wrap to a short wait), and the draw
// spans [0, ceiling].
func TestRefusedBackoffDoublesUpToItsCap(t *testing.T) {
	const top = 0.999999999
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {5, 1600 * time.Millisecond}, {9, 25600 * time.Millisecond}, {10, 30 * time.Second}, {64, 30 * time.Second}, {1000, 30 * time.Second}} {
		if got := refusedBackoff(c.n, top); got < c.want-time.Millisecond || got > c.want {
			t.Errorf("refusal %d: the longest wait is %v, want %v", c.n, got, c.want)
		}
		if got := refusedBackoff(c.n, 0); got != 0 {
			t.Errorf("refusal %d: the shortest wait is %v, want 0", c.n, got)
		}
	}
}
