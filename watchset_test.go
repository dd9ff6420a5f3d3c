//go:build go1.25

package cache_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// watched returns the services that r's open watchers watch, sorted; ""
// stands for a watcher of every service.
func (r *memReg) watched() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for w := range r.watchers {
		names = append(names, w.service)
	}
	slices.Sort(names)
	return names
}

// watcherOf returns the open watcher of service name, or nil.
func (r *memReg) watcherOf(name string) *memWatcher {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.watchers {
		if w.service == name {
			return w
		}
	}
	return nil
}

// watchEnv is a cache with WithWatchPerService over a registry of the
// services a and b, which it caches, and 20 others that it never looks up.
type watchEnv struct {
	reg *memReg
	f   *faultRegistry
	c   cache.Cache
}

func newWatchEnv(t *testing.T, opts ...cache.Option) *watchEnv {
	t.Helper()
	e := &watchEnv{reg: newMemReg()}
	e.f = newFaultRegistry(e.reg, 0)
	for _, name := range []string{"a", "b"} {
		require.NoError(t, e.reg.Register(faultService(name, name+"1")))
	}
	for i := 0; i < 20; i++ {
		require.NoError(t, e.reg.Register(faultService(otherName(i), "o1")))
	}
	base := []cache.Option{cache.WithWatchPerService(), cache.WithLogger(benchLogger)}
	e.c = cache.New(e.f, append(base, opts...)...)
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
		assert.Equal(t, []string{"a", "b"}, e.reg.watched())

		for i := 0; i < 20; i++ {
			require.NoError(t, e.reg.Register(faultService(otherName(i), "o2")))
		}
		calls := e.f.report().totalCalls
		require.NoError(t, e.reg.Register(faultService("a", "a2")))
		synctest.Wait()
		assert.Equal(t, []string{"a1", "a2"}, e.lookup(t, "a"))
		assert.Equal(t, calls, e.f.report().totalCalls, "from the event")
		st := e.c.Stats()
		assert.Zero(t, st.EventsIgnored, "nothing received of the services not cached")
		assert.Equal(t, uint64(1), st.EventsApplied)

		e.c.Stop()
		synctest.Wait()
		assert.Empty(t, e.reg.watched(), "every watch closed")
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
		assert.Equal(t, []string{"a", "b", "late"}, e.reg.watched())
		require.NoError(t, e.reg.Register(faultService("late", "l1")))
		synctest.Wait()
		assert.Equal(t, []string{"l1"}, e.lookup(t, "late"), "served from the create event")

		// Its watch opens only once the test lets it, after its lookup.
		e.f.setWatchFor(otherName(0), watchFault{watchHang: true})
		assert.Equal(t, []string{"o1"}, e.lookup(t, otherName(0)))
		assert.Equal(t, 1, e.f.callsFor(otherName(0)))
		synctest.Wait()
		// Changed between its lookup and its watch, with no event.
		e.reg.replaceSilently(otherName(0), "o9")
		e.f.setWatchFor(otherName(0), watchFault{})
		e.f.releaseHangs()
		synctest.Wait()
		assert.Equal(t, 2, e.f.callsFor(otherName(0)), "re-validated once its watch opened, ahead of its retry window")
		assert.Equal(t, []string{"o9"}, e.lookup(t, otherName(0)))
		time.Sleep(cache.DefaultTTL / 2)
		synctest.Wait()
		assert.Equal(t, 2, e.f.callsFor(otherName(0)), "and only once")
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
		watches := e.f.report().watches
		aCalls, bCalls := e.f.callsFor("a"), e.f.callsFor("b")
		aWatch := e.reg.watcherOf("a")
		e.reg.watcherOf("b").Stop() // b's watch ends: Next fails
		e.reg.replaceSilently("b", "b9")
		time.Sleep(cache.DefaultMinimumRetryInterval)
		synctest.Wait()
		assert.Equal(t, []string{"a", "b"}, e.reg.watched())
		assert.Same(t, aWatch, e.reg.watcherOf("a"), "a's watch goes on")
		assert.Equal(t, watches+1, e.f.report().watches, "b's reopened")
		assert.Equal(t, uint64(1), e.c.Stats().WatchReconnects)
		assert.Equal(t, bCalls+1, e.f.callsFor("b"), "b re-validated")
		assert.Equal(t, aCalls, e.f.callsFor("a"), "a not")
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
		assert.Equal(t, []string{"a"}, e.reg.watched())
		assert.Equal(t, 1, e.c.Stats().Entries)
	})
}

// A failing Watch call is a lost stream: retried with backoff, and the
// lookups still served.
func TestWatchPerServiceRetriesAFailingWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newWatchEnv(t)
		e.f.setWatch(watchFault{watchErr: errOutage, breakErr: errOutage})
		e.f.cutStreams()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.Empty(t, e.reg.watched())
		assert.Equal(t, []string{"a1"}, e.lookup(t, "a"))
		e.f.clear()
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, []string{"a", "b"}, e.reg.watched())
	})
}
