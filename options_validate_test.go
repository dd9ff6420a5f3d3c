package cache

import (
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// panicOf returns what New panics with, or nil.
func panicOf(opts ...Option) (r any) {
	defer func() { r = recover() }()
	New(newFakeRegistry(), opts...).Stop()
	return nil
}

// WithIdleEviction(1ns) made an idle cache rescan every entry every
// millisecond and burn most of a core.
func TestIdleEvictionHasAFloor(t *testing.T) {
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, time.Second - 1} {
		r := panicOf(WithIdleEviction(d))
		require.NotNil(t, r, "%v", d)
		assert.Equal(t, fmt.Sprintf("regcache: WithIdleEviction: %v is below the 1s floor; use 0 to turn eviction off", d), r)
	}
	for _, d := range []time.Duration{0, time.Second, time.Hour} {
		assert.Nil(t, panicOf(WithIdleEviction(d)), "%v", d)
	}
}

// A TTL near math.MaxInt64 with jitter overflowed to a negative TTL, so that
// fresh data was stale at once; a 200-year TTL with jitter 0.9 too.
func TestTTLsThatOverflowAreRejected(t *testing.T) {
	const year = 365 * 24 * time.Hour
	const edge = 6004799503160661 << 10
	require.Equal(t, float64(1<<63), float64(edge)*1.5)
	for _, tc := range []struct {
		ttl    time.Duration
		jitter float64
	}{
		{math.MaxInt64, 0.1},
		{math.MaxInt64 / 3 * 2, 0.6},
		{200 * year, 0.9},
		{edge, 0.5}, // exactly 2^63 in floating point
	} {
		r := panicOf(WithTTL(tc.ttl), WithTTLJitter(tc.jitter))
		require.NotNil(t, r, "%v %v", tc.ttl, tc.jitter)
		msg := fmt.Sprint(r)
		assert.Contains(t, msg, "regcache: WithTTL: a TTL of "+tc.ttl.String())
		assert.Contains(t, msg, fmt.Sprintf("WithTTLJitter(%v)", tc.jitter))
		assert.Contains(t, msg, "lower the TTL or the jitter")
	}
	// Without jitter any positive TTL works, as in go-micro's cache.
	assert.Nil(t, panicOf(WithTTL(math.MaxInt64)))
}

// The longest TTL accepted with a given jitter keeps data fresh, even
// when the jitter draws its largest factor.
func TestTheLongestTTLAcceptedStaysFresh(t *testing.T) {
	const jitter = 0.9
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		u    float64
	}{
		{"no jitter", math.MaxInt64, 0.5},
		{"top of the jitter", longestTTL(jitter), math.Nextafter(1, 0)},
		{"bottom of the jitter", longestTTL(jitter), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeRegistry()
				f.SetNodes("svc", "a")
				opts := []Option{WithTTL(tc.ttl)}
				if tc.name != "no jitter" {
					opts = append(opts, WithTTLJitter(jitter))
				}
				c, _ := newTestCache(t, f, opts...)
				defer c.Stop()
				c.rand = func() float64 { return tc.u }
				_, err := c.Lookup("svc")
				require.NoError(t, err)
				s := c.snapshotOf("svc")
				assert.True(t, s.Expires.After(time.Now().Add(time.Duration(float64(tc.ttl)*0.09))), "fresh for long")
				time.Sleep(time.Hour)
				synctest.Wait()
				s = c.snapshotOf("svc")
				assert.True(t, s.Expires.After(time.Now()), "still fresh an hour later")
				assert.True(t, s.RefreshAt.After(time.Now()))
			})
		})
	}
}

// longestTTL is the longest TTL New accepts with jitter j.
func longestTTL(j float64) time.Duration {
	ttl := time.Duration(float64(1<<63) / (1 + j))
	for !(float64(ttl)*(1+j) < 1<<63) {
		ttl -= 1 << 10
	}
	return ttl
}

func TestLongestTTLIsAccepted(t *testing.T) {
	assert.Nil(t, panicOf(WithTTL(longestTTL(0.9)), WithTTLJitter(0.9)))
	assert.NotNil(t, panicOf(WithTTL(longestTTL(0.9)+1<<12), WithTTLJitter(0.9)))
}

// A refresh-ahead window shorter than the retry interval was accepted and
// then quietly did little or nothing: the throttle kept it closed.
func TestRefreshAheadMustHoldARetryInterval(t *testing.T) {
	r := panicOf(WithTTL(10*time.Second), WithRefreshAhead(0.1)) // 1 s window, 5 s interval
	require.NotNil(t, r)
	assert.Equal(t, "regcache: WithRefreshAhead: the minimum retry interval 5s does not fit in the refresh-ahead "+
		"window 0.1 × TTL 10s = 1s; raise the fraction or the TTL, or lower WithMinimumRetryInterval", r)
	assert.NotNil(t, panicOf(WithTTL(time.Second), WithRefreshAhead(0.5)), "a TTL below the interval")

	for _, opts := range [][]Option{
		{WithTTL(10 * time.Second), WithRefreshAhead(0.5)},                              // 5 s in 5 s
		{WithTTL(10 * time.Second), WithRefreshAhead(0.1), WithMinimumRetryInterval(0)}, // no throttle
		{WithTTL(time.Second), WithRefreshAhead(0.2), WithMinimumRetryInterval(200 * time.Millisecond)},
		{WithRefreshAhead(0.1)}, // 6 s of the default minute
		{WithTTL(10 * time.Second), WithMinimumRetryInterval(time.Minute)}, // no refresh ahead
	} {
		assert.Nil(t, panicOf(opts...))
	}
}

// WithMaximumRetryInterval sets Options.MaximumRetryInterval, and New names it
// when the value is refused.
func TestMaximumRetryIntervalIsChecked(t *testing.T) {
	assert.Equal(t, time.Minute, newOptions([]Option{WithMaximumRetryInterval(time.Minute)}).MaximumRetryInterval)
	r := panicOf(WithMaximumRetryInterval(time.Second))
	assert.Equal(t, "regcache: WithMaximumRetryInterval: 1s is below the minimum retry interval 5s", r)
	r = panicOf(WithMaximumRetryInterval(-time.Second))
	assert.Equal(t, "regcache: WithMaximumRetryInterval: interval must not be negative, got -1s", r)
}
