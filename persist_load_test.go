package cache

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/regcache/cache/internal/snapfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

func writeSnapshotFile(t *testing.T, path string, f *snapfile.File) {
	t.Helper()
	data, err := json.Marshal(f)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

func snapshotEntryAt(name string, refreshed time.Time) snapfile.Entry {
	return snapfile.Entry{Name: name, Refreshed: refreshed, Services: []*registry.Service{svc(name, "1", name+"1")}}
}

// The loader checked only the file's write time, so a service that no
// registry had confirmed for a month was still served.
func TestSnapshotSkipsServicesOlderThanTheLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "regcache.json")
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		writeSnapshotFile(t, path, fileOf(now.Add(-time.Minute),
			snapshotEntryAt("month-old", now.Add(-30*24*time.Hour)),
			snapshotEntryAt("day-and-a-minute-old", now.Add(-snapshotMaxAge-time.Minute)),
			snapshotEntryAt("hour-old", now.Add(-time.Hour)),
			snapshotEntryAt("ten-minutes-ahead", now.Add(10*time.Minute)),
			snapshotEntryAt("a-minute-ahead", now.Add(time.Minute)),
		))
		f := newFakeRegistry()
		f.Fail(errDown)
		c, l := newTestCache(t, f, WithSnapshot(path))
		defer c.Stop()

		for _, name := range []string{"month-old", "day-and-a-minute-old", "ten-minutes-ahead"} {
			// Not loaded: the lookup finds nothing to serve (it fails, or
			// is refused once the registry is held to be down).
			_, err := c.Lookup(name)
			assert.Error(t, err, "%s was not loaded", name)
			assert.Nil(t, c.snapshotOf(name), "%s was not loaded", name)
		}
		for _, name := range []string{"hour-old", "a-minute-ahead"} {
			got, err := c.Lookup(name)
			require.NoError(t, err, name)
			assert.Equal(t, []string{name + "1"}, nodeIDs(got))
		}
		assert.WithinDuration(t, now.Add(-time.Hour), c.snapshotOf("hour-old").Refreshed, 0)
		assert.WithinDuration(t, now, c.snapshotOf("a-minute-ahead").Refreshed, 0, "a little ahead reads as now")
		assert.Contains(t, strings.Join(l.all(), "\n"),
			"loaded 2 services from snapshot "+path+", as stale; skipped 3 whose data is older than 24h0m0s or dated in the future")
	})
}

// A service read back from the file is written again with its refresh
// time, in every file rewritten because other services refreshed. So
// processes restarting while its registry stays down pass it on only
// until it is a day old, though each file is new.
func TestSnapshotRewritesDoNotKeepOldDataAlive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "regcache.json")
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("old", "o1")
		f.SetNodes("live", "l1")
		first, _ := newTestCache(t, f, WithSnapshot(path))
		warm(t, first, "old")
		refreshed := first.snapshotOf("old").Refreshed
		first.Stop()

		f.SetFaultFor("old", fakereg.Fault{Err: errDown}) // down for old, answering for the others
		for restart := 1; restart <= 8; restart++ {
			time.Sleep(4 * time.Hour)
			c, _ := newTestCache(t, f, WithSnapshot(path))
			_, err := c.Lookup("live") // refreshed: the file is rewritten at Stop
			require.NoError(t, err)
			synctest.Wait()
			loaded := c.snapshotOf("old") != nil
			c.Stop()
			written := readSnapshotFile(t, path).Written
			assert.WithinDuration(t, time.Now(), written, 0, "restart %d rewrote the file", restart)
			if time.Since(refreshed) <= snapshotMaxAge {
				assert.True(t, loaded, "restart %d, %v after the last refresh", restart, time.Since(refreshed))
			} else {
				assert.False(t, loaded, "restart %d, %v after the last refresh", restart, time.Since(refreshed))
			}
		}
	})
}

func TestSnapshotWrittenInTheFutureIsRefused(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		for _, tc := range []struct {
			ahead time.Duration
			want  string
		}{
			{10 * time.Minute, "ignoring snapshot %s: written 10m0s in the future, beyond the 5m0s allowed for clock skew"},
			{time.Minute, "loaded 1 services from snapshot %s, as stale"},
		} {
			path := filepath.Join(dir, tc.ahead.String())
			writeSnapshotFile(t, path, fileOf(now.Add(tc.ahead), snapshotEntryAt("a", now)))
			c, l := newTestCache(t, newFakeRegistry(), WithSnapshot(path))
			c.Stop()
			require.Len(t, l.all(), 1)
			assert.Contains(t, l.all()[0], fmt.Sprintf(tc.want, path))
		}
	})
}
