package cache_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// coldDown returns a cache whose registry failed the first lookups of a
// and b, and holds the registry down: every call fails and the stream
// cannot open.
func coldDown(t *testing.T) (cache.Cache, *fakereg.Registry) {
	t.Helper()
	reg := fakereg.New()
	for _, n := range []string{"a", "b"} {
		require.NoError(t, reg.Register(faultService(n, n+"1")))
	}
	reg.SetFault(fakereg.Fault{Err: errOutage})
	reg.SetWatchFault(fakereg.WatchFault{WatchErr: errOutage, BreakErr: errOutage})
	c := cache.New(reg, cache.WithLogger(&lineLogger{}))
	t.Cleanup(c.Stop)
	for _, n := range []string{"a", "b"} {
		_, err := c.Lookup(n)
		require.ErrorIs(t, err, errOutage)
	}
	_, err := c.Lookup("a")
	require.ErrorIs(t, err, cache.ErrThrottled)
	require.True(t, c.Stats().RegistryDown, "held down")
	return c, reg
}

// A lookup with nothing to serve while the registry is down, made while
// a probe is out, waits for the probe's answer rather than failing at
// once: the answer says whether the registry is back. Back, the lookup
// asks for its own service and gets it.
func TestAColdLookupWaitsForTheProbeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		time.Sleep(cache.DefaultMinimumRetryInterval)               // the windows end
		reg.SetFault(fakereg.Fault{Latency: 20 * time.Millisecond}) // back, and 20 ms a call
		go func() { _, _ = c.Lookup("a") }()                        // a's try, the probe
		synctest.Wait()
		require.Equal(t, 1, reg.InFlight("a"), "a's try is out")
		start := time.Now()
		got, err := c.Lookup("b")
		require.NoError(t, err)
		assert.Equal(t, []string{"b1"}, nodeSetOf(got))
		assert.Equal(t, 40*time.Millisecond, time.Since(start), "a's probe, then b's own call")
	})
}

// The wait is for that probe only, and a second at most: a probe that
// fails fails the lookup with the registry down, and one that hangs
// fails it after a second.
func TestAColdLookupWaitsForOneProbeAtMost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := coldDown(t)
		time.Sleep(cache.DefaultMinimumRetryInterval)
		reg.SetFault(fakereg.Fault{Err: errOutage, Latency: 20 * time.Millisecond})
		go func() { _, _ = c.Lookup("a") }()
		synctest.Wait()
		start := time.Now()
		_, err := c.Lookup("b")
		require.ErrorIs(t, err, cache.ErrThrottled)
		assert.Equal(t, 20*time.Millisecond, time.Since(start), "until a's probe failed")

		time.Sleep(cache.DefaultMinimumRetryInterval)
		reg.SetFault(fakereg.Fault{Hang: true, IgnoreCtx: true})
		defer reg.ReleaseHangs()
		go func() { _, _ = c.Lookup("a") }()
		synctest.Wait()
		require.Equal(t, 1, reg.InFlight("a"))
		start = time.Now()
		_, err = c.Lookup("b")
		require.ErrorIs(t, err, cache.ErrThrottled)
		assert.Equal(t, time.Second, time.Since(start), "until the hung probe's deadline")
		assert.False(t, errors.Is(err, fakereg.ErrHung))
	})
}
