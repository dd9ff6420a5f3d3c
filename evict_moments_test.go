package cache

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// Idle eviction measured in moments, from right after New: an entry read
// within the idle time stays, one left idle is dropped between d and
// d + d/4 after its last read, and an event for it afterwards is ignored
// with no registry call; the watcher's index agrees with the map.
func TestIdleEvictionRightAfterNewAndEventsForTheEvicted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("hot", "h")
		f.SetNodes("cold", "c")
		const idle = time.Second
		c, _ := newTestCache(t, f, WithTTL(time.Hour), WithIdleEviction(idle), WithMinimumRetryInterval(0))
		defer c.Stop()
		_, err := c.Lookup("hot")
		require.NoError(t, err)
		_, err = c.Lookup("cold")
		require.NoError(t, err)
		synctest.Wait()
		s := f.Stream()
		require.NotNil(t, s)
		for i := 0; i < 8; i++ { // 2 s, hot read every quarter second
			time.Sleep(idle / 4)
			_, err = c.Lookup("hot")
			require.NoError(t, err)
			synctest.Wait()
		}
		time.Sleep(idle / 2)
		synctest.Wait()
		assert.NotNil(t, c.entryOf("hot"), "read within the idle time")
		assert.Nil(t, c.entryOf("cold"), "idle past d + d/4")
		checkByName(t, c)

		calls, ignored := f.TotalCalls(), c.Stats().EventsIgnored
		deliver(s, "update", svc("cold", "1", "c2"))
		assert.Equal(t, calls, f.TotalCalls(), "an event for an evicted service makes no call")
		assert.Equal(t, ignored+1, c.Stats().EventsIgnored)
		assert.Nil(t, c.entryOf("cold"))
		got, err := c.GetService("cold")
		require.NoError(t, err)
		assert.Equal(t, []string{"c"}, nodeIDs(got), "asked afresh, not the ignored event")
		assert.Equal(t, calls+1, f.TotalCalls())
		checkByName(t, c)
	})
}

// A dataless entry is kept for its retry window, measured in moments from
// right after New: a create event within it is applied and served with no
// call, and once the sweep dropped an entry its events are ignored.
func TestSweepOfDatalessEntriesRightAfterNew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("other", "o")
		const window = 5 * time.Second
		c, _ := newTestCache(t, f, WithTTL(time.Hour), WithMinimumRetryInterval(window))
		defer c.Stop()
		_, err := c.Lookup("ghost")
		require.ErrorIs(t, err, registry.ErrNotFound)
		_, err = c.Lookup("late")
		require.Error(t, err)
		synctest.Wait()
		s := f.Stream()
		require.NotNil(t, s)
		calls := f.TotalCalls()

		time.Sleep(window / 2)
		deliver(s, "create", svc("ghost", "1", "g"))
		got, err := c.GetService("ghost")
		require.NoError(t, err)
		assert.Equal(t, []string{"g"}, nodeIDs(got))
		assert.Equal(t, calls, f.TotalCalls(), "the event's nodes, with no call")

		time.Sleep(window) // late's window closed: swept
		synctest.Wait()
		assert.Nil(t, c.entryOf("late"))
		assert.NotNil(t, c.entryOf("ghost"))
		checkByName(t, c)
		ignored := c.Stats().EventsIgnored
		deliver(s, "create", svc("late", "1", "l"))
		assert.Equal(t, ignored+1, c.Stats().EventsIgnored)
		assert.Equal(t, calls, f.TotalCalls())
	})
}
