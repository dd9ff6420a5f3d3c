package cache_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// watchEnv is a cache with WithWatchPerService over a registry of the
// services a and b, which it caches, and 20 others that it never looks up.
type watchEnv struct {
	reg *fakereg.Registry
	c   cache.Cache
}

func newWatchEnv(t *testing.T, opts ...cache.Option) *watchEnv {
	t.Helper()
	e := &watchEnv{reg: fakereg.New()}
	for _, name := range []string{"a", "b"} {
		require.NoError(t, e.reg.Register(faultService(name, name+"1")))
	}
	for i := 0; i < 20; i++ {
		require.NoError(t, e.reg.Register(faultService(otherName(i), "o1")))
	}
	base := []cache.Option{cache.WithWatchPerService(), cache.WithLogger(benchLogger)}
	e.c = cache.New(e.reg, append(base, opts...)...)
	t.Cleanup(e.c.Stop)
	for _, name := range []string{"a", "b"} {
		_, err := e.c.Lookup(name)
		require.NoError(t, err)
	}
	synctest.Wait()
	return e
}

func otherName(i int) string { return "other-" + string(rune('a'+i)) }

// lookup returns the node ids the cache serves for name.
func (e *watchEnv) lookup(t *testing.T, name string) []string {
	t.Helper()
	svcs, err := e.c.Lookup(name)
	require.NoError(t, err, name)
	return nodeSetOf(svcs)
}

// With WithWatchPerService the cache watches the services it caches, and
// receives nothing of the others; the events of its own are applied with
// no registry call, and Stop closes every watch and ends every goroutine.
func TestWatchPerServiceReceivesOnlyTheCachedServices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWatchEnv(t)
		assert.Equal(t, []string{"a", "b"}, e.reg.Watched())

		for i := 0; i < 20; i++ {
			require.NoError(t, e.reg.Register(faultService(otherName(i), "o2")))
		}
		calls := e.reg.Report().TotalCalls
		require.NoError(t, e.reg.Register(faultService("a", "a2")))
		synctest.Wait()
		assert.Equal(t, []string{"a1", "a2"}, e.lookup(t, "a"))
		assert.Equal(t, calls, e.reg.Report().TotalCalls, "from the event")
		st := e.c.Stats()
		assert.Zero(t, st.EventsIgnored, "nothing received of the services not cached")
		assert.Equal(t, uint64(1), st.EventsApplied)

		e.c.Stop()
		synctest.Wait()
		assert.Empty(t, e.reg.Watched(), "every watch closed")
		assert.Zero(t, regcacheGoroutines(), "goroutines running cache code after Stop")
	})
}

// A service looked up after the watches opened gets its own watch: a late
// start is served from its create event, and the data of a service cached
// meanwhile, fetched before its watch, is re-validated once.
func TestWatchPerServiceCoversServicesCachedLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWatchEnv(t)
		_, err := e.c.Lookup("late")
		require.ErrorIs(t, err, registry.ErrNotFound)
		synctest.Wait()
		assert.Equal(t, []string{"a", "b", "late"}, e.reg.Watched())
		require.NoError(t, e.reg.Register(faultService("late", "l1")))
		synctest.Wait()
		assert.Equal(t, []string{"l1"}, e.lookup(t, "late"), "served from the create event")

		// Its watch opens only once the test lets it, after its lookup.
		e.reg.SetWatchFaultFor(otherName(0), fakereg.WatchFault{WatchHang: true})
		assert.Equal(t, []string{"o1"}, e.lookup(t, otherName(0)))
		assert.Equal(t, 1, e.reg.Calls(otherName(0)))
		synctest.Wait()
		// Changed between its lookup and its watch, with no event.
		e.reg.Set(otherName(0), faultService(otherName(0), "o9"))
		e.reg.SetWatchFaultFor(otherName(0), fakereg.WatchFault{})
		e.reg.ReleaseHangs()
		synctest.Wait()
		assert.Equal(t, 2, e.reg.Calls(otherName(0)), "re-validated once its watch opened, ahead of its retry window")
		assert.Equal(t, []string{"o9"}, e.lookup(t, otherName(0)))
		time.Sleep(cache.DefaultTTL / 2)
		synctest.Wait()
		assert.Equal(t, 2, e.reg.Calls(otherName(0)), "and only once")
	})
}

// When one watch fails, only it is reopened, and only its service's data,
// which may have missed changes meanwhile, is re-validated: the other
// watch goes on.
func TestWatchPerServiceReopensOnlyTheWatchThatFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWatchEnv(t)
		time.Sleep(cache.DefaultMinimumRetryInterval) // the first re-validations are done
		synctest.Wait()
		watches := e.reg.Report().Watches
		aCalls, bCalls := e.reg.Calls("a"), e.reg.Calls("b")
		aWatch := e.reg.WatcherOf("a")
		e.reg.WatcherOf("b").Cut() // b's watch ends: Next fails
		e.reg.Set("b", faultService("b", "b9"))
		time.Sleep(cache.DefaultMinimumRetryInterval)
		synctest.Wait()
		assert.Equal(t, []string{"a", "b"}, e.reg.Watched())
		assert.Same(t, aWatch, e.reg.WatcherOf("a"), "a's watch goes on")
		assert.Equal(t, watches+1, e.reg.Report().Watches, "b's reopened")
		assert.Equal(t, uint64(1), e.c.Stats().WatchReconnects)
		assert.Equal(t, bCalls+1, e.reg.Calls("b"), "b re-validated")
		assert.Equal(t, aCalls, e.reg.Calls("a"), "a not")
		assert.Equal(t, []string{"b9"}, e.lookup(t, "b"))

		require.NoError(t, e.reg.Register(faultService("b", "b2")))
		require.NoError(t, e.reg.Register(faultService("a", "a2")))
		synctest.Wait()
		assert.Equal(t, []string{"b2", "b9"}, e.lookup(t, "b"), "events flow again")
		assert.Equal(t, []string{"a1", "a2"}, e.lookup(t, "a"))
	})
}

// A service evicted for idleness has its watch closed.
func TestWatchPerServiceClosesTheWatchOfAnEvictedService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWatchEnv(t, cache.WithIdleEviction(time.Second))
		// b waits for its first re-validation, a retry interval after
		// its lookup, and is evicted after it.
		for i := 0; i < 100; i++ {
			e.lookup(t, "a")
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		assert.Equal(t, []string{"a"}, e.reg.Watched())
		assert.Equal(t, 1, e.c.Stats().Entries)
	})
}

// A failing Watch call is a lost stream: retried with backoff, and the
// lookups still served.
func TestWatchPerServiceRetriesAFailingWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWatchEnv(t)
		e.reg.SetWatchFault(fakereg.WatchFault{WatchErr: errOutage, BreakErr: errOutage})
		e.reg.Cut()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.Empty(t, e.reg.Watched())
		assert.Equal(t, []string{"a1"}, e.lookup(t, "a"))
		e.reg.ClearFaults()
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, []string{"a", "b"}, e.reg.Watched())
	})
}
