package cache

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// TestPrintsFollowTheData: the data a refresh stores comes with its
// prints, a refresh that finds nothing new keeps them, a change drops
// them, and the next repeat prints the data it found by the comparison,
// so that a change after it is still seen.
func TestPrintsFollowTheData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("s", "a", "b", "c")
		c, _ := newTestCache(t, f, WithTTL(time.Hour), WithMinimumRetryInterval(0))
		defer c.Stop()
		warm(t, c, "s")
		first := c.snapshotOf("s")
		require.NotNil(t, first.Prints, "a refresh prints what it stores")
		assert.Equal(t, svcdata.PrintsOf(first.Services), first.Prints)

		expire(c, "s")
		warm(t, c, "s")
		again := c.snapshotOf("s")
		require.NotSame(t, first, again)
		assert.Same(t, &first.Prints[0], &again.Prints[0], "nothing new: the prints are kept")

		c.apply(repeatEvent(t, again.Services, "b"), nil)
		assert.Same(t, &first.Prints[0], &c.snapshotOf("s").Prints[0], "a repeat keeps them")
		applied := c.stats.EventsApplied.Load()

		changed := repeatEvent(t, again.Services, "b")
		changed.Service.Nodes[0].Metadata = map[string]string{"revision": "2"}
		c.apply(changed, nil)
		now := c.snapshotOf("s")
		assert.Equal(t, map[string]string{"revision": "2"}, nodeByID(now.Services[0].Nodes, "b").Metadata)
		assert.Equal(t, svcdata.PrintsOf(now.Services), now.Prints, "a change to the nodes alone prints what it stores")

		// A change to the version drops the prints, and the next event,
		// here a repeat, prints the data held.
		moved := repeatEvent(t, now.Services, "b")
		moved.Service.Metadata = map[string]string{"team": "moved"}
		c.apply(moved, nil)
		now = c.snapshotOf("s")
		assert.Equal(t, map[string]string{"team": "moved"}, now.Services[0].Metadata)
		assert.Nil(t, now.Prints, "a change to the version leaves the data unprinted")

		c.apply(repeatEvent(t, now.Services, "b"), nil)
		learned := c.snapshotOf("s")
		assert.Same(t, &now.Services[0], &learned.Services[0], "a repeat")
		assert.Equal(t, svcdata.PrintsOf(learned.Services), learned.Prints, "the repeat printed the data held")
		assert.Equal(t, applied+3, c.stats.EventsApplied.Load())

		// A change the prints must see: one Value's type, deep in an
		// endpoint, on a node that is held as it is.
		deep := repeatEvent(t, learned.Services, "a")
		deep.Service.Endpoints = []*registry.Endpoint{{Name: "H.Call", Request: &registry.Value{Name: "Req", Type: "Req2"}}}
		c.apply(deep, nil)
		got, err := c.GetService("s")
		require.NoError(t, err)
		require.Len(t, got[0].Endpoints, 1)
		assert.Equal(t, "Req2", got[0].Endpoints[0].Request.Type)
	})
}

// TestARefreshRacedByEventsPrintsWhatItStores: events that arrive while a
// refresh is out are replayed onto its answer, and the data stored is
// printed, so that the next change event takes the short way rather than
// a copy of the event, and every one after it too.
func TestARefreshRacedByEventsPrintsWhatItStores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("s", "a", "b", "c")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "s")
		held := c.snapshotOf("s")
		expire(c, "s")
		gate := f.Hold()
		go func() { _, _ = c.GetService("s") }()
		synctest.Wait()
		changed := repeatEvent(t, held.Services, "b")
		changed.Service.Nodes[0].Metadata = map[string]string{"revision": "2"}
		c.apply(changed, nil)
		gate.Open()
		synctest.Wait()
		s := c.snapshotOf("s")
		require.NotSame(t, held, s)
		assert.Equal(t, map[string]string{"revision": "2"}, nodeByID(s.Services[0].Nodes, "b").Metadata, "the event replayed")
		require.NotNil(t, s.Prints, "the answer with the event replayed is printed")
		assert.Equal(t, svcdata.PrintsOf(s.Services), s.Prints)

		again := repeatEvent(t, s.Services, "c")
		again.Service.Nodes[0].Metadata = map[string]string{"revision": "3"}
		c.apply(again, nil)
		assert.Equal(t, svcdata.PrintsOf(c.snapshotOf("s").Services), c.snapshotOf("s").Prints, "the next change keeps them")
	})
}

// TestAChangeAfterADeletePrintsWhatItStores: a delete leaves the data
// unprinted; the change that follows it (the new instance of a rolling
// deployment) prints the data held first, and takes the short way, so
// that the changes after it are told by prints too.
func TestAChangeAfterADeletePrintsWhatItStores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		acSetRegistry(f, "s", acBase("s", 5))
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "s")
		held := c.snapshotOf("s").Services[0]
		gone := repeatEvent(t, []*registry.Service{held}, "n0")
		gone.Action = "delete"
		c.apply(gone, nil)
		after := c.snapshotOf("s")
		require.Len(t, after.Services[0].Nodes, 4)
		assert.Nil(t, after.Prints, "a delete leaves the data unprinted")

		create := acChange(t, after.Services[0], &registry.Node{Id: "n5", Address: "10.0.0.5:1"})
		require.True(t, acIsChange(c, "s", create), "the change takes the short way")
		c.apply(create, nil)
		now := c.snapshotOf("s")
		require.Len(t, now.Services[0].Nodes, 5)
		require.NotNil(t, now.Prints)
		assert.Equal(t, svcdata.PrintsOf(now.Services), now.Prints)
		assert.Same(t, after.Services[0].Endpoints[0], now.Services[0].Endpoints[0], "the version is shared")
	})
}
