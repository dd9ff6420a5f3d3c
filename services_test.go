//go:build go1.25

package cache

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
