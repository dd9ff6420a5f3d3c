package cache

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

func TestServicesPagesByNameAndPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		var names []string
		for i := 0; i < 300; i++ {
			name := fmt.Sprintf("svc-%03d", i)
			names = append(names, name)
			f.SetNodes(name, "n")
		}
		f.SetNodes("other", "x")
		c, _ := newTestCache(t, f)
		defer c.Stop()
		for _, n := range names {
			_, err := c.Lookup(n)
			require.NoError(t, err)
		}
		_, err := c.Lookup("other")
		require.NoError(t, err)

		var got []string
		after := ""
		for pages := 0; ; pages++ {
			rows := c.Services("svc-", after, 64)
			if len(rows) == 0 {
				assert.Equal(t, 5, pages)
				break
			}
			for _, r := range rows {
				got = append(got, r.Name)
			}
			after = rows[len(rows)-1].Name
		}
		assert.Equal(t, names, got, "every svc- service once, in order")
		assert.Len(t, c.Services("", "", 0), 301)
		assert.Equal(t, "other", c.Services("o", "", 0)[0].Name)
		assert.Empty(t, c.Services("svc-299", "svc-299", 0))
	})
}

func TestServicesRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		s := svc("svc", "2", "a")
		s.Nodes[0].Metadata = map[string]string{"zone": "<b>eu</b>"}
		f.Set("svc", s)
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		f.Fail(errDown)
		_, err := c.Lookup("cold")
		require.Error(t, err)

		rows := c.Services("", "", 0)
		require.Len(t, rows, 2)
		cold, row := rows[0], rows[1]
		assert.Equal(t, "cold", cold.Name, "a service without data has a row")
		assert.Zero(t, cold.Nodes)
		assert.Empty(t, cold.Source)
		assert.Contains(t, cold.LastError, errDown.Error())
		assert.Equal(t, time.Now(), cold.LastErrorAt)
		assert.Equal(t, time.Now().Add(c.opts.MinimumRetryInterval), cold.RetryAt)

		assert.Equal(t, "svc", row.Name)
		assert.True(t, row.Fresh)
		assert.Equal(t, SourceRefresh, row.Source)
		require.Equal(t, []NodeStats{{Id: "a", Address: "a:8080", Version: "2", Metadata: map[string]string{"zone": "<b>eu</b>"}}}, row.NodeList)
		row.NodeList[0].Metadata["zone"] = "changed"
		held, _ := c.Lookup("svc")
		assert.Equal(t, "<b>eu</b>", held[0].Nodes[0].Metadata["zone"], "the metadata is a copy")
	})
}

// TestServicesKeepsRowsOfEntriesDroppedAfterThePick holds off a page that
// never ended: Services picked a page's names, skipped the entries dropped
// before their rows were read, and picked again after the last name. With
// lookups of ever-new missing names, each dropped once its retry window
// closed, every pick was dropped before it was read, and the page of a
// cache of 100 000 services chased the new names without end. Now the
// names are picked once, and an entry dropped meanwhile keeps its row:
// that of the entry that took its name since, else as it stood.
func TestServicesKeepsRowsOfEntriesDroppedAfterThePick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("z-1", "n")
		c, _ := newTestCache(t, f)
		defer c.Stop()
		warm(t, c, "z-1")
		for i := 0; i < 8; i++ {
			_, err := c.Lookup(fmt.Sprintf("a-%d", i))
			require.ErrorIs(t, err, registry.ErrNotFound)
		}

		c.mu.Lock()
		hint := c.core.Len()
		c.mu.Unlock()
		picked := c.pick("", "", 4, hint)

		// Between the pick and the rows: every retry window closes and the
		// names without data are dropped; a-1 comes back with a node.
		time.Sleep(c.opts.MinimumRetryInterval + time.Second)
		synctest.Wait()
		require.Equal(t, 1, c.entryCount(), "only z-1 is left")
		f.SetNodes("a-1", "m")
		warm(t, c, "a-1")

		rows := c.rowsOf(picked)
		require.Len(t, rows, 4, "the page is not cut short")
		var names []string
		for _, r := range rows {
			names = append(names, r.Name)
		}
		assert.Equal(t, []string{"a-0", "a-1", "a-2", "a-3"}, names)
		assert.Empty(t, rows[0].Source, "a-0 as it stood when dropped: no data")
		assert.Equal(t, SourceRefresh, rows[1].Source, "a-1 as the entry that took its name")
		assert.Equal(t, 1, rows[1].Nodes)
		require.Len(t, rows[1].NodeList, 1)
		assert.Equal(t, "m", rows[1].NodeList[0].Id)

		// The next page, after the last row, goes on from there.
		next := c.Services("", rows[3].Name, 4)
		require.Len(t, next, 1)
		assert.Equal(t, "z-1", next[0].Name)
	})
}
