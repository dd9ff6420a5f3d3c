package policy

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestThrottleRetryIn(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th := Throttle{LastAttempt: t0}
	assert.Equal(t, 5*time.Second, th.RetryIn(t0, 5*time.Second, false))
	assert.Equal(t, 2*time.Second, th.RetryIn(t0.Add(3*time.Second), 5*time.Second, false))
	assert.Zero(t, th.RetryIn(t0.Add(5*time.Second), 5*time.Second, false))
	assert.Zero(t, th.RetryIn(t0, 0, false))
	assert.Zero(t, th.RetryIn(t0.Add(time.Second), 5*time.Second, true), "a resync since")
	ok, _ := (&Throttle{}).Allows(t0, time.Hour, false)
	assert.True(t, ok, "never attempted")

	failed := Throttle{LastAttempt: t0, LastErr: errors.New("down")}
	assert.False(t, failed.Outage(t0.Add(-time.Second)), "a failure after the registry came back keeps its window")
	assert.True(t, failed.Outage(t0), "a failure that ended by the time the registry came back does not")
	answered := Throttle{LastAttempt: t0}
	assert.False(t, answered.Outage(t0.Add(time.Second)), "an answer's window is not the outage's")
}

// A resync lets one call through ahead of the window, and only one an
// interval, however many resyncs there are: the second of two resyncs
// within an interval waits for the window.
func TestThrottleLetsOneEarlyCallAnInterval(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const iv = 5 * time.Second
	var th Throttle
	th.Attempt(t0, false)
	ok, _ := th.Allows(t0.Add(time.Second), iv, false)
	assert.False(t, ok, "inside the window, no resync")
	ok, early := th.Allows(t0.Add(time.Second), iv, true)
	require.True(t, ok && early, "a resync since the attempt: one early call")
	th.Attempt(t0.Add(time.Second), early)
	ok, _ = th.Allows(t0.Add(2*time.Second), iv, true)
	assert.False(t, ok, "a second resync within the interval of the early call")
	ok, early = th.Allows(t0.Add(6*time.Second), iv, true)
	assert.True(t, ok && !early, "the window closed: a regular call")
	th.Attempt(t0.Add(6*time.Second), early)
	ok, early = th.Allows(t0.Add(6*time.Second+time.Millisecond), iv, true)
	assert.True(t, ok && early, "after a call that waited for the window, another may go early")
}

func TestAdaptiveInterval(t *testing.T) {
	const base, ceiling = 5 * time.Second, 5 * time.Minute
	prevTop := time.Duration(0)
	for n := 1; n <= 70; n++ {
		lo, hi := AdaptiveInterval(n, base, ceiling, 0), AdaptiveInterval(n, base, ceiling, 0.999999)
		require.GreaterOrEqual(t, lo, base, "never below the base, n=%d", n)
		require.LessOrEqual(t, hi, ceiling, "never above the ceiling, n=%d", n)
		require.GreaterOrEqual(t, hi, prevTop, "grows with n")
		prevTop = hi
	}
	assert.Equal(t, 10*time.Second, AdaptiveInterval(1, base, ceiling, 0.9999999).Round(time.Millisecond), "one failure doubles")
	assert.Equal(t, 5*time.Second, AdaptiveInterval(1, base, ceiling, 0), "jitter spans the upper half")
	assert.Equal(t, adaptiveFloor, AdaptiveInterval(1, 0, time.Minute, 0), "a zero base doubles from the floor")

	var th Throttle
	var never time.Time
	th.Failed(errors.New("x"), base, ceiling, 0.5, never)
	th.Failed(errors.New("x"), base, ceiling, 0.5, never)
	assert.Equal(t, 2, th.Failures)
	assert.Greater(t, th.Interval(base), base)
	th.Told = true
	assert.True(t, th.Succeeded(), "a told failure's recovery is told")
	assert.Equal(t, base, th.Interval(base), "a success resets it")
	assert.False(t, th.Succeeded(), "and only once")

	th.LastAttempt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th.Failed(errors.New("x"), base, ceiling, 0.5, never)
	back := th.LastAttempt
	th.Failed(errors.New("x"), base, ceiling, 0.5, back)
	assert.Equal(t, 1, th.Failures, "failures from before the registry came back do not count")

	var fixed Throttle
	fixed.Failed(errors.New("x"), base, base, 0.5, never)
	assert.Equal(t, base, fixed.Interval(base), "no ceiling above base: the fixed interval")
}
