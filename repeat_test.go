package cache

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/core"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// TestRepeatKeepsTheDataAndConfirmsIt: a node announced again as held
// keeps the very data (no copy) and confirms it: served fresh again, not as
// an event's news.
func TestRepeatKeepsTheDataAndConfirmsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("s", "a", "b")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "s")
		before := c.snapshotOf("s")
		time.Sleep(30 * time.Second)
		c.apply(repeatEvent(t, before.Services, "b"), nil)
		after := c.snapshotOf("s")
		require.Same(t, before, after, "the data is kept, and confirmed in place")
		assert.Equal(t, time.Now(), after.ConfirmedAt(), "confirmed now")
		assert.Equal(t, before.Source, after.Source)
		assert.Equal(t, before.Expires, after.Expires, "an event never extends an expiry")
		assert.EqualValues(t, 1, c.stats.EventsApplied.Load())
	})
}

// TestRepeatDuringARefreshIsReplayed: a refresh replays the events that
// arrived while it was out onto its answer, which may predate them. A
// repeat takes no copy on its way in, but one is kept for the replay:
// node b deregisters, a refresh reads the registry without it, b registers
// again, and its event (a repeat of the data held) arrives before the
// answer.
func TestRepeatDuringARefreshIsReplayed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("s", "a", "b")
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(0))
		defer c.Stop()
		warm(t, c, "s")
		f.SetNodes("s", "a")
		expire(c, "s")
		gate := f.Hold()
		go func() { _, _ = c.GetService("s") }() // stale, and starts a refresh
		synctest.Wait()
		c.mu.Lock()
		inFlight := c.entryOf0("s").Phase() == core.PhaseFetching
		c.mu.Unlock()
		require.True(t, inFlight, "a refresh is out")
		ev := repeatEvent(t, c.snapshotOf("s").Services, "b")
		require.True(t, repeats(c.snapshotOf("s").Services, ev))
		c.apply(ev, nil)
		gate.Open()
		synctest.Wait()
		assert.Equal(t, []string{"a", "b"}, nodeIDs(c.snapshotOf("s").Services))
	})
}

// entryOf0 is entryOf with c.mu held.
func (c *cache) entryOf0(name string) *core.Entry {
	v, _ := c.entries.Load(name)
	return v.(*core.Entry)
}

// TestEventAllocations: a repeat costs one allocation (the new state), and
// an event for a service not cached none.
func TestEventAllocations(t *testing.T) {
	f := newFakeRegistry()
	f.SetNodes("s", "a", "b", "c")
	c, _ := newTestCache(t, f, WithTTL(time.Hour))
	defer c.Stop()
	_, err := c.GetService("s")
	require.NoError(t, err)
	ev := repeatEvent(t, c.snapshotOf("s").Services, "b")
	assert.Zero(t, testing.AllocsPerRun(100, func() { c.apply(ev, nil) }), "a repeat")
	// A change to a node, each time: its copy; the snapshot with its
	// version; the slice of nodes; the prints. The metadata is shared
	// with the other nodes.
	moved := [2]*registry.Result{repeatEvent(t, c.snapshotOf("s").Services, "b"), repeatEvent(t, c.snapshotOf("s").Services, "b")}
	moved[0].Service.Nodes[0].Address, moved[1].Service.Nodes[0].Address = "10.0.0.1:1", "10.0.0.2:1"
	i := 0
	assert.Equal(t, 4.0, testing.AllocsPerRun(100, func() { c.apply(moved[i%2], nil); i++ }), "a change")
	c.apply(moved[i%2], nil)
	assert.Equal(t, moved[i%2].Service.Nodes[0].Address, nodeByID(c.snapshotOf("s").Services[0].Nodes, "b").Address)
	other := &registry.Result{Action: "update", Service: svc("other", "1", "x")}
	assert.Zero(t, testing.AllocsPerRun(100, func() { c.apply(other, nil) }), "a service not cached")
}

// TestARepeatConfirmsInPlace: a repeat confirms the data where it is
// held: WithMaximumStale measures from it and the stats age restarts from
// it, as if the data had been stored again.
func TestARepeatConfirmsInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a", "b")
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMaximumStale(10*time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		held := c.snapshotOf("svc")
		f.Fail(errDown)

		time.Sleep(8 * time.Minute) // stale, within the limit
		_, err := c.Lookup("svc")
		require.NoError(t, err)
		synctest.Wait()
		c.apply(repeatEvent(t, held.Services, "b"), nil)
		require.Same(t, held, c.snapshotOf("svc"))
		confirmed := time.Now()
		assert.Equal(t, confirmed, c.snapshotOf("svc").ConfirmedAt())
		row := c.dataRows()[0]
		assert.Zero(t, row.Age, "the age restarts from the repeat")

		time.Sleep(5 * time.Minute) // past the first limit, within the new one
		got, err := c.Lookup("svc")
		require.NoError(t, err, "the limit moved with the repeat")
		assert.Equal(t, []string{"a", "b"}, nodeIDs(got))
		synctest.Wait()

		time.Sleep(time.Until(confirmed.Add(10*time.Minute + time.Second)))
		_, err = c.Lookup("svc")
		require.ErrorIs(t, err, ErrTooStale, "10 minutes after the repeat")

		// A repeat confirms no further back than it was confirmed.
		held.Confirm(confirmed.Add(-time.Minute))
		assert.Equal(t, confirmed, held.ConfirmedAt())
	})
}
