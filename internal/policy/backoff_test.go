package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBackoffIsCappedExponentialWithFullJitter(t *testing.T) {
	for n := 1; n <= 64; n++ {
		ceiling := BackoffCap
		if n < 30 && BackoffBase<<(n-1) < BackoffCap {
			ceiling = BackoffBase << (n - 1)
		}
		assert.Zero(t, Backoff(n, 0), "attempt %d: full jitter reaches 0", n)
		top := Backoff(n, 0.999999999)
		assert.LessOrEqual(t, top, ceiling, "attempt %d", n)
		assert.Greater(t, top, ceiling*99/100, "attempt %d: the draw spans up to the ceiling", n)
	}
	assert.Equal(t, BackoffCap, Backoff(1000, 0.999999999999)+0, "capped, no overflow")
	assert.LessOrEqual(t, Backoff(9, 0.5), BackoffCap/2+time.Millisecond)
}
