package cache

import (
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/core"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A program must be able to export Stats and the rows of Services as JSON:
// the observer and the logger in Options are left out, everything else
// goes and comes back.
func TestStatsEncodesToJSON(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a", "b")
		c, _ := newTestCache(t, f, WithObserver(func(Event) {}), WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		f.Fail(errDown)
		expire(c, "svc")
		_, _ = c.Lookup("svc")
		synctest.Wait()

		st := c.Stats()
		data, err := json.Marshal(st)
		require.NoError(t, err)
		var back Stats
		require.NoError(t, json.Unmarshal(data, &back))
		again, err := json.Marshal(back)
		require.NoError(t, err)
		assert.JSONEq(t, string(data), string(again), "every field comes back")
		assert.Equal(t, st.Lookups, back.Lookups)
		assert.Equal(t, st.Options.TTL, back.Options.TTL)
		assert.Nil(t, back.Options.Logger)

		rows := c.Services("", "", 0)
		require.NotEmpty(t, rows[0].LastError)
		data, err = json.Marshal(rows)
		require.NoError(t, err)
		var backRows []ServiceStats
		require.NoError(t, json.Unmarshal(data, &backRows))
		again, err = json.Marshal(backRows)
		require.NoError(t, err)
		assert.JSONEq(t, string(data), string(again), "every field of a row comes back")
		assert.Equal(t, rows[0].LastError, backRows[0].LastError)
		assert.True(t, rows[0].LastErrorAt.Equal(backRows[0].LastErrorAt))
	})
}

// A service restarting during a deploy is served from its create event
// until the registry confirms it: those lookups are event serves, not
// stale serves, and the service's row says where its nodes came from.
func TestStatsRestartServedFromEventIsNotStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "old")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		time.Sleep(time.Second)

		// The restart: the old instance goes, the new one comes.
		f.SetNodes("svc", "new")
		deliver(f.Stream(), "delete", svc("svc", "1", "old"))
		deliver(f.Stream(), "create", svc("svc", "1", "new"))
		for i := 0; i < 20; i++ { // within core.ReplacementGrace
			got, err := c.Lookup("svc")
			require.NoError(t, err)
			require.Equal(t, []string{"new"}, nodeIDs(got))
			time.Sleep(10 * time.Millisecond)
		}
		st := c.Stats()
		assert.Equal(t, uint64(20), st.EventServes)
		assert.Zero(t, st.StaleServes, "a restart is no staleness")
		assert.Zero(t, st.StaleServedAge)
		require.Len(t, c.dataRows(), 1)
		row := c.dataRows()[0]
		assert.False(t, row.Fresh, "no refresh has confirmed it")
		assert.True(t, row.Unconfirmed)
		assert.Equal(t, SourceEvent, row.Source)

		// The refresh that the delete asked for goes after
		// core.ReplacementGrace, and confirms the new node: fresh.
		time.Sleep(core.ReplacementGrace)
		synctest.Wait()
		_, err := c.Lookup("svc")
		require.NoError(t, err)
		st = c.Stats()
		assert.Equal(t, uint64(20), st.EventServes, "confirmed before the lookup")
		assert.Zero(t, st.StaleServes)
		row = c.dataRows()[0]
		assert.True(t, row.Fresh)
		assert.False(t, row.Unconfirmed)
		assert.Equal(t, SourceRefresh, row.Source)
	})
}

// An outage is counted, with its length, as the registry's state changes,
// whether or not any refresh is due.
func TestStatsCountOutages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("a", "1")
		f.SetNodes("b", "1")
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "a", "b")
		st := c.Stats()
		assert.Equal(t, StreamConnected, st.Stream)
		assert.Zero(t, st.Outages)

		f.Fail(errDown)
		f.SetWatchFault(fakereg.WatchFault{WatchErr: errDown})
		f.Stream().Break(errDown)
		time.Sleep(10 * time.Second)
		st = c.Stats()
		require.True(t, st.RegistryDown, "the stream lost and its redial failed")
		assert.Equal(t, uint64(1), st.Outages)
		assert.Equal(t, StreamReconnecting, st.Stream)
		assert.Contains(t, st.RegistryError, errDown.Error())
		assert.Equal(t, time.Since(st.RegistryDownSince), st.DownTime)
		assert.Positive(t, st.DownTime)

		f.Fail(nil)
		f.SetWatchFault(fakereg.WatchFault{})
		time.Sleep(2 * time.Second)
		st = c.Stats()
		require.False(t, st.RegistryDown)
		assert.Equal(t, StreamConnected, st.Stream)
		down := st.DownTime
		assert.Greater(t, down, 9*time.Second)
		time.Sleep(time.Minute)
		st = c.Stats()
		assert.Equal(t, uint64(1), st.Outages)
		assert.Equal(t, down, st.DownTime, "no time down once it is back")
	})
}

// A registry that re-announces the nodes the cache holds (a
// re-registration) confirms nothing new: the data keeps its source, and
// once expired it is stale, not unconfirmed.
func TestStatsReannouncedNodesKeepTheirSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		deliver(f.Stream(), "update", svc("svc", "1", "a"))
		row := c.dataRows()[0]
		assert.Equal(t, SourceRefresh, row.Source)
		assert.False(t, row.Unconfirmed)

		deliver(f.Stream(), "update", svc("svc", "1", "b"))
		row = c.dataRows()[0]
		assert.Equal(t, SourceEvent, row.Source, "a node the cache did not hold")
		assert.True(t, row.Unconfirmed)
	})
}
