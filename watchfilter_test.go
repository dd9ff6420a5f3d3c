//go:build go1.25

package cache

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/watchscope"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// filterRegistry is a fakeRegistry that keeps the watch filter of each
// Watch call's context, and whose streams skip the events it does not
// keep, as github.com/regcache/cache/etcd does before decoding them.
type filterRegistry struct {
	*fakeRegistry

	mu      sync.Mutex
	filters []func(string) bool // one a Watch call, nil for none
}

func (r *filterRegistry) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var o registry.WatchOptions
	for _, opt := range opts {
		opt(&o)
	}
	r.mu.Lock()
	r.filters = append(r.filters, watchscope.Filter(o.Context))
	r.mu.Unlock()
	return r.fakeRegistry.Watch(opts...)
}

// filter is the newest Watch call's filter.
func (r *filterRegistry) filter(t *testing.T) func(string) bool {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.filters, "no Watch call")
	f := r.filters[len(r.filters)-1]
	require.NotNil(t, f, "the one stream's Watch carries a filter")
	return f
}

// deliver is what a registry that honours the filter does with an event
// it has received: it asks the filter, and delivers the event (and waits
// until it is applied) only if the filter keeps its service. It reports
// whether it delivered it.
func (r *filterRegistry) deliver(t *testing.T, action string, s *registry.Service) bool {
	t.Helper()
	if !r.filter(t)(s.Name) {
		return false
	}
	deliver(r.stream(), action, s)
	return true
}

// The one stream's Watch carries a filter that keeps exactly the services
// the cache holds an entry for, with data or without, at the moment it is
// asked; a service it does not keep is counted as apply counts the event
// of a service not held: ignored, and the registry heard from.
func TestTheStreamIsToldTheServicesHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &filterRegistry{fakeRegistry: newFakeRegistry()}
		r.set("svc", "a")
		c, _ := newTestCache(t, r, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "svc")
		keep := r.filter(t)

		ignored, heard := c.Stats().EventsIgnored, c.heard.Load()
		assert.True(t, keep("svc"))
		assert.Equal(t, ignored, c.Stats().EventsIgnored, "a service kept is counted when applied")
		assert.Equal(t, heard, c.heard.Load())
		assert.False(t, keep("other"))
		assert.False(t, keep(""))
		assert.Equal(t, ignored+2, c.Stats().EventsIgnored, "each service not kept is an event ignored")
		assert.Equal(t, heard+2, c.heard.Load(), "and the registry heard from")

		// A service that does not exist is held without data while its
		// throttle window is open: a create event then makes it servable.
		_, err := c.GetService("soon")
		require.ErrorIs(t, err, registry.ErrNotFound)
		assert.True(t, keep("soon"), "held without data")
		require.True(t, r.deliver(t, "create", svc("soon", "1", "s1")))
		got, err := c.Lookup("soon")
		require.NoError(t, err)
		assert.Equal(t, []string{"s1"}, nodeIDs(got))

		// A delete of its last node drops the data once the registry
		// confirms it; once the entry is gone, its events are skipped
		// again.
		require.True(t, r.deliver(t, "delete", svc("soon", "1", "s1")))
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
		r := &filterRegistry{fakeRegistry: newFakeRegistry()}
		r.set("anchor", "x") // starts the stream
		c, _ := newTestCache(t, r, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "anchor")

		// Not held: the change's event is skipped, the registry has it.
		r.set("late", "a")
		assert.False(t, r.deliver(t, "create", svc("late", "1", "a")))

		r.hold() // the lookup's call will answer {a}
		done := make(chan []*registry.Service)
		go func() {
			got, err := c.GetService("late")
			assert.NoError(t, err)
			done <- got
		}()
		synctest.Wait() // the call is out
		require.True(t, r.filter(t)("late"), "held from before its registry call")
		require.True(t, r.deliver(t, "create", svc("late", "1", "b")), "a change made during the call is kept")
		r.release()
		assert.ElementsMatch(t, []string{"a", "b"}, nodeIDs(<-done))
		got, err := c.Lookup("late")
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"a", "b"}, nodeIDs(got))
	})
}
