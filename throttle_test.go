package cache

import (
	"container/heap"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/regcache/cache/internal/svcdata"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const interval = 5 * time.Second
	fresh := &svcdata.Snapshot{Expires: t0.Add(time.Minute)}
	stale := &svcdata.Snapshot{Expires: t0.Add(-time.Second)}
	never := throttle{}
	recent := throttle{lastAttempt: t0.Add(-time.Second)}
	old := throttle{lastAttempt: t0.Add(-interval)}

	tests := []struct {
		name     string
		snap     *svcdata.Snapshot
		inFlight bool
		th       throttle
		interval time.Duration
		want     decision
	}{
		{"rule 2: fresh is served", fresh, false, recent, interval, serveFresh},
		{"rule 2: fresh is served even with a refresh in flight", fresh, true, recent, interval, serveFresh},
		{"rule 2: expiry instant is stale", &svcdata.Snapshot{Expires: t0}, false, old, interval, startRefresh},
		{"rule 3: stale with refresh in flight does not wait", stale, true, recent, interval, serveStale},
		{"rule 3: nothing cached joins the refresh in flight", nil, true, recent, interval, joinFlight},
		{"rule 4: stale inside the window is served", stale, false, recent, interval, serveStale},
		{"rule 4: nothing cached inside the window is throttled", nil, false, recent, interval, refuseThrottled},
		{"rule 5: stale after the window refreshes", stale, false, old, interval, startRefresh},
		{"rule 5: nothing cached and never tried refreshes", nil, false, never, interval, startRefresh},
		{"rule 5: nothing cached after the window refreshes", nil, false, old, interval, startRefresh},
		{"rule 7: interval 0 never throttles stale", stale, false, recent, 0, startRefresh},
		{"rule 7: interval 0 never throttles a miss", nil, false, recent, 0, startRefresh},
		{"rule 7: interval 0 still joins a refresh in flight", nil, true, recent, 0, joinFlight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := tt.th
			allowed, _ := th.allows(t0, tt.interval, false)
			assert.Equal(t, tt.want.String(), decide(t0, tt.snap, tt.inFlight, allowed).String())
		})
	}
}

func TestThrottleRetryIn(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th := throttle{lastAttempt: t0}
	assert.Equal(t, 5*time.Second, th.retryIn(t0, 5*time.Second, false))
	assert.Equal(t, 2*time.Second, th.retryIn(t0.Add(3*time.Second), 5*time.Second, false))
	assert.Zero(t, th.retryIn(t0.Add(5*time.Second), 5*time.Second, false))
	assert.Zero(t, th.retryIn(t0, 0, false))
	assert.Zero(t, th.retryIn(t0.Add(time.Second), 5*time.Second, true), "a resync since")
	ok, _ := (&throttle{}).allows(t0, time.Hour, false)
	assert.True(t, ok, "never attempted")

	failed := throttle{lastAttempt: t0, lastErr: errors.New("down")}
	assert.False(t, failed.outage(t0.Add(-time.Second)), "a failure after the registry came back keeps its window")
	assert.True(t, failed.outage(t0), "a failure that ended by the time the registry came back does not")
	answered := throttle{lastAttempt: t0}
	assert.False(t, answered.outage(t0.Add(time.Second)), "an answer's window is not the outage's")
}

// A resync lets one call through ahead of the window, and only one an
// interval, however many resyncs there are: the second of two resyncs
// within an interval waits for the window.
func TestThrottleLetsOneEarlyCallAnInterval(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const iv = 5 * time.Second
	var th throttle
	th.attempt(t0, false)
	ok, _ := th.allows(t0.Add(time.Second), iv, false)
	assert.False(t, ok, "inside the window, no resync")
	ok, early := th.allows(t0.Add(time.Second), iv, true)
	require.True(t, ok && early, "a resync since the attempt: one early call")
	th.attempt(t0.Add(time.Second), early)
	ok, _ = th.allows(t0.Add(2*time.Second), iv, true)
	assert.False(t, ok, "a second resync within the interval of the early call")
	ok, early = th.allows(t0.Add(6*time.Second), iv, true)
	assert.True(t, ok && !early, "the window closed: a regular call")
	th.attempt(t0.Add(6*time.Second), early)
	ok, early = th.allows(t0.Add(6*time.Second+time.Millisecond), iv, true)
	assert.True(t, ok && early, "an interval after the last early call, another may go")
}

func TestBackoffIsCappedExponentialWithFullJitter(t *testing.T) {
	for n := 1; n <= 64; n++ {
		ceiling := backoffCap
		if n < 30 && backoffBase<<(n-1) < backoffCap {
			ceiling = backoffBase << (n - 1)
		}
		assert.Zero(t, backoff(n, 0), "attempt %d: full jitter reaches 0", n)
		top := backoff(n, 0.999999999)
		assert.LessOrEqual(t, top, ceiling, "attempt %d", n)
		assert.Greater(t, top, ceiling*99/100, "attempt %d: the draw spans up to the ceiling", n)
	}
	assert.Equal(t, backoffCap, backoff(1000, 0.999999999999)+0, "capped, no overflow")
	assert.LessOrEqual(t, backoff(9, 0.5), backoffCap/2+time.Millisecond)
}

func TestSweepQueueOrdersByWindowEnd(t *testing.T) {
	var q timedQueue
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Adaptive retry gives windows of different lengths, so items arrive
	// out of order.
	for i := 0; i < 1000; i++ {
		heap.Push(&q, timedEntry{at: t0.Add(time.Duration((i * 7919) % 1000))})
	}
	for i := 0; i < 1000; i++ {
		it, ok := q.peek()
		require.True(t, ok)
		require.Equal(t, t0.Add(time.Duration(i)), it.at)
		heap.Pop(&q)
		require.Equal(t, 999-i, q.Len())
	}
	_, ok := q.peek()
	assert.False(t, ok)
}

func TestAdaptiveInterval(t *testing.T) {
	const base, ceiling = 5 * time.Second, 5 * time.Minute
	prevTop := time.Duration(0)
	for n := 1; n <= 70; n++ {
		lo, hi := adaptiveInterval(n, base, ceiling, 0), adaptiveInterval(n, base, ceiling, 0.999999)
		require.GreaterOrEqual(t, lo, base, "never below the base, n=%d", n)
		require.LessOrEqual(t, hi, ceiling, "never above the ceiling, n=%d", n)
		require.GreaterOrEqual(t, hi, prevTop, "grows with n")
		prevTop = hi
	}
	assert.Equal(t, 10*time.Second, adaptiveInterval(1, base, ceiling, 0.9999999).Round(time.Millisecond), "one failure doubles")
	assert.Equal(t, 5*time.Second, adaptiveInterval(1, base, ceiling, 0), "jitter spans the upper half")
	assert.Equal(t, adaptiveFloor, adaptiveInterval(1, 0, time.Minute, 0), "a zero base doubles from the floor")

	var th throttle
	var never time.Time
	th.failed(errors.New("x"), base, ceiling, 0.5, never)
	th.failed(errors.New("x"), base, ceiling, 0.5, never)
	assert.Equal(t, 2, th.failures)
	assert.Greater(t, th.interval(base), base)
	th.told = true
	assert.True(t, th.succeeded(), "a told failure's recovery is told")
	assert.Equal(t, base, th.interval(base), "a success resets it")
	assert.False(t, th.succeeded(), "and only once")

	th.lastAttempt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th.failed(errors.New("x"), base, ceiling, 0.5, never)
	back := th.lastAttempt
	th.failed(errors.New("x"), base, ceiling, 0.5, back)
	assert.Equal(t, 1, th.failures, "failures from before the registry came back do not count")

	var fixed throttle
	fixed.failed(errors.New("x"), base, base, 0.5, never)
	assert.Equal(t, base, fixed.interval(base), "no ceiling above base: the fixed interval")
}
