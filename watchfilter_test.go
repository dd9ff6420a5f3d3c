package cache

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/regcache/cache/watchscope"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// watchFilter is the watch filter of the newest Watch call's context, as
// github.com/regcache/cache/etcd reads it.
func watchFilter(t *testing.T, r *fakereg.Registry) func(string) bool {
	t.Helper()
	calls := r.WatchCalls()
	require.NotEmpty(t, calls, "no Watch call")
	f := watchscope.Filter(calls[len(calls)-1].Options.Context)
	require.NotNil(t, f, "the one stream's Watch carries a filter")
	return f
}

// deliverFiltered is what a registry that honours the filter does with an
// event it has received, as github.com/regcache/cache/etcd does before
// decoding it: it asks the filter, and delivers the event (and waits until
// it is applied) only if the filter keeps its service. It reports whether
// it delivered it.
func deliverFiltered(t *testing.T, r *fakereg.Registry, action string, s *registry.Service) bool {
	t.Helper()
	if !watchFilter(t, r)(s.Name) {
		return false
	}
	deliver(r.Stream(), action, s)
	return true
}

// The one stream's Watch carries a filter that keeps exactly the services
// the cache holds an entry for, with data or without, at the moment it is
// asked; a service it does not keep is counted as apply counts the event
// of a service not held: ignored, and the registry heard from.
func TestTheStreamIsToldTheServicesHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeRegistry()
		r.SetNodes("svc", "a")
		c, _ := newTestCache(t, r, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "svc")
		keep := watchFilter(t, r)

		ignored, heard := c.Stats().EventsIgnored, c.stats.Heard.Load()
		assert.True(t, keep("svc"))
		assert.Equal(t, ignored, c.Stats().EventsIgnored, "a service kept is counted when applied")
		assert.Equal(t, heard, c.stats.Heard.Load())
		assert.False(t, keep("other"))
		assert.False(t, keep(""))
		assert.Equal(t, ignored+2, c.Stats().EventsIgnored, "each service not kept is an event ignored")
		assert.Equal(t, heard+2, c.stats.Heard.Load(), "and the registry heard from")

		// A service that does not exist is held without data while its
		// throttle window is open: a create event then makes it servable.
		_, err := c.GetService("soon")
		require.ErrorIs(t, err, registry.ErrNotFound)
		assert.True(t, keep("soon"), "held without data")
		require.True(t, deliverFiltered(t, r, "create", svc("soon", "1", "s1")))
		got, err := c.Lookup("soon")
		require.NoError(t, err)
		assert.Equal(t, []string{"s1"}, nodeIDs(got))

		// A delete of its last node drops the data once the registry
		// confirms it; once the entry is gone, its events are skipped
		// again.
		require.True(t, deliverFiltered(t, r, "delete", svc("soon", "1", "s1")))
		time.Sleep(2 * c.opts.MinimumRetryInterval)
		_, _ = c.GetService("svc") // sweeps
		synctest.Wait()
		require.Nil(t, c.entryOf("soon"), "dropped once its window closed")
		assert.False(t, keep("soon"))
	})
}

// Nothing is lost to the filter: the entry of a cold lookup exists before
// its registry call starts, so the lookup's call answers for every change
// whose event was skipped before, and the events after are kept, replayed
// over the call's older answer.
func TestNoEventIsLostToTheFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeRegistry()
		r.SetNodes("anchor", "x") // starts the stream
		c, _ := newTestCache(t, r, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "anchor")

		// Not held: the change's event is skipped, the registry has it.
		r.SetNodes("late", "a")
		assert.False(t, deliverFiltered(t, r, "create", svc("late", "1", "a")))

		r.Hold() // the lookup's call will answer {a}
		done := make(chan []*registry.Service)
		go func() {
			got, err := c.GetService("late")
			assert.NoError(t, err)
			done <- got
		}()
		synctest.Wait() // the call is out
		require.True(t, watchFilter(t, r)("late"), "held from before its registry call")
		require.True(t, deliverFiltered(t, r, "create", svc("late", "1", "b")), "a change made during the call is kept")
		r.Release()
		assert.ElementsMatch(t, []string{"a", "b"}, nodeIDs(<-done))
		got, err := c.Lookup("late")
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"a", "b"}, nodeIDs(got))
	})
}
