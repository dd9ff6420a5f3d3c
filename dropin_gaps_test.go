package cache_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// Behaviours that hold through go-micro's cache and not through regcache,
// found by the drop-in suite (integration's TestDropIn). Each fails until
// the cache is fixed; see the report on issue 29.

// When the last node of a held service is deregistered, go-micro's cache
// drops the service at once, and its next lookup answers
// registry.ErrNotFound from the registry. regcache confirms with the
// registry first (the delete may come before its replacement's create),
// which is right; but the confirmation goes through the service's retry
// window, so the deleted node is served for up to MinimumRetryInterval (5
// s) after its deregistration when the service was asked for less than
// that before. The confirmation should be the early call that the window
// allows once an interval, as a resync's re-validation is.
func TestALastNodeDeletedIsConfirmedWithoutWaitingForTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true)
		const name = "svc-0"
		// A refresh a moment ago: the service's window is open.
		time.Sleep(cache.DefaultTTL)
		_, err := e.c.Lookup(name)
		require.NoError(t, err)
		synctest.Wait()
		gets, _ := e.reg.StartsSince(time.Now().Add(-time.Second))
		require.Len(t, gets, 1, "the expired data refreshed")

		require.NoError(t, e.reg.Deregister(faultService(name, "old")))
		deregistered := time.Now()
		var last error
		for time.Since(deregistered) < time.Second {
			_, last = e.c.GetService(name)
			if last == registry.ErrNotFound {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		assert.Equal(t, registry.ErrNotFound, last,
			"the last node's deregistration not confirmed within 1 s (the service's window closes %v after its last refresh)", cache.DefaultMinimumRetryInterval)
	})
}

// errOneServiceOnly is what go-micro's Consul registry (the v4 plugin
// v1.2.1, and go-micro v5's registry/consul) answers a Watch without
// registry.WatchService: its watch is of one service.
var errOneServiceOnly = errors.New("Must specify a single service to watch")

// A registry that watches one service at a time (Consul's) refuses
// regcache's one stream of every service, while it answers GetService and
// per-service watches: go-micro's cache, which watches each service it
// holds, sees every registration at once; regcache sees none until its
// TTL (1 min). It should watch per service when the registry refuses a
// watch of every service while it answers, as WithWatchPerService does.
func TestARegistryThatWatchesOneServiceAtATimeStillDeliversEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "svc"
		f := fakereg.New()
		require.NoError(t, f.Register(faultService(name, "a")))
		f.SetBound(cache.DefaultMinimumRetryInterval)
		f.SetWatchFault(fakereg.WatchFault{WatchErr: errOneServiceOnly})
		f.SetWatchFaultFor(name, fakereg.WatchFault{})
		c := cache.New(f, cache.WithLogger(&lineLogger{}))
		defer c.Stop()
		_, err := c.Lookup(name)
		require.NoError(t, err)
		// Long after the first lookup, as in a running client.
		time.Sleep(time.Minute / 2)
		synctest.Wait()

		require.NoError(t, f.Register(faultService(name, "b")))
		registered := time.Now()
		for time.Since(registered) < time.Second && !servesNode(c, name, "b") {
			time.Sleep(10 * time.Millisecond)
		}
		assert.True(t, servesNode(c, name, "b"), "a node registered 30 s after the first lookup not served within 1 s")
	})
}

// The last node's deregistration is believed, or confirmed, within
// core.ReplacementGrace even when the service waits for its window to close
// already: here the stream broke twice within a window, and the second
// re-validation waits for the window. The delete's confirmation is due
// sooner than that, and goes first: the dead node is not served until the
// window closes.
func TestALastNodeDeletedWhileARefreshWaitsForTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name = "svc"
		f, c := servedForHalfAMinute(t, name, true)
		require.NoError(t, f.Deregister(faultService(name, "a")))
		deregistered := time.Now()
		var last error
		for time.Since(deregistered) < time.Second {
			_, last = c.GetService(name)
			if last == registry.ErrNotFound {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		assert.Equal(t, registry.ErrNotFound, last, "the last node's deregistration not believed within 1 s")
	})
}

// A rolling replacement whose every delete is followed by its create within
// 90 ms never empties the service, whether a refresh waits for its window
// (parked) or not: the confirmation of each delete waits core.ReplacementGrace
// from that delete, not from the first (a regression test: the first
// delete's confirmation time was kept, and believed the fourth delete 70
// ms after it).
func TestARollingReplacementIsNeverBelievedEmpty(t *testing.T) {
	for _, parked := range []bool{false, true} {
		t.Run(fmt.Sprintf("parked=%v", parked), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const name = "svc"
				f, c := servedForHalfAMinute(t, name, parked)
				ids := []string{"a", "b", "c", "d", "e"}
				require.NoError(t, f.Deregister(faultService(name, "a")))
				for i, id := range ids[1:] {
					time.Sleep(90 * time.Millisecond)
					require.NoError(t, f.Register(faultService(name, id)))
					if i < len(ids)-2 {
						time.Sleep(90 * time.Millisecond)
						require.NoError(t, f.Deregister(faultService(name, id)))
					}
					for range 9 {
						_, err := c.Lookup(name)
						require.NoError(t, err, "after the delete before %s", id)
						time.Sleep(5 * time.Millisecond)
					}
				}
				time.Sleep(time.Second)
				assert.True(t, servesNode(c, name, "e"), "the last create not served")
			})
		})
	}
}

// servedForHalfAMinute returns a fake registry that lists name with node
// "a", and a cache that has served it for 30 s, stopped at the test's end.
// With parked, the stream then breaks three times within a window: the
// third re-validation waits in the cache for the window to close. Run in a
// synctest bubble.
func servedForHalfAMinute(t *testing.T, name string, parked bool) (*fakereg.Registry, cache.Cache) {
	t.Helper()
	f := fakereg.New()
	require.NoError(t, f.Register(faultService(name, "a")))
	f.SetBound(cache.DefaultMinimumRetryInterval)
	c := cache.New(f, cache.WithLogger(&lineLogger{}))
	t.Cleanup(c.Stop)
	_, err := c.Lookup(name)
	require.NoError(t, err)
	time.Sleep(time.Minute / 2)
	synctest.Wait()
	if parked {
		for range 3 {
			f.Cut()
			time.Sleep(time.Second)
			synctest.Wait()
		}
	}
	return f, c
}

// An idle entry is kept while its window is open, also when a resync has
// made its early call available: dropped, the next lookup of the name
// calls the registry, and the resync after it calls again, early (a
// regression test: three calls of one service within 2.6 s).
func TestIdleEvictionKeepsAWindowThatAResyncOpened(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakereg.New()
		f.SetBound(cache.DefaultMinimumRetryInterval)
		c := cache.New(f, cache.WithLogger(&lineLogger{}), cache.WithIdleEviction(time.Second))
		defer c.Stop()
		start := time.Now()
		_, err := c.Lookup("ghost")
		require.Equal(t, registry.ErrNotFound, err)
		time.Sleep(100 * time.Millisecond)
		f.Cut()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		c.Lookup("ghost")
		f.Cut()
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		c.Lookup("ghost")
		gets, _ := f.StartsSince(start)
		assert.LessOrEqual(t, len(gets), 2, "calls of one service within one interval")
	})
}
