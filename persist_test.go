package cache

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/snapfile"
)

// fileOf is a snapshot file written at written, holding entries.
func fileOf(written time.Time, entries ...snapfile.Entry) *snapfile.File {
	f := snapfile.New(written)
	f.Services = entries
	return f
}

func readSnapshotFile(t *testing.T, path string) *snapfile.File {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var f snapfile.File
	require.NoError(t, json.Unmarshal(data, &f))
	return &f
}

// A process restarting while the registry is down resolves what the last
// one knew.
func TestSnapshotLetsARestartWorkWhileTheRegistryIsDown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "regcache.json")
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		names := []string{"a", "b", "c"}
		for _, n := range names {
			f.SetNodes(n, n+"1", n+"2")
		}
		first, _ := newTestCache(t, f, WithSnapshot(path))
		for _, n := range names {
			_, err := first.Lookup(n)
			require.NoError(t, err)
		}
		time.Sleep(time.Minute)
		refreshed := map[string]time.Time{}
		for _, n := range names {
			refreshed[n] = first.snapshotOf(n).Refreshed
		}
		first.Stop()
		info, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

		f.Fail(errDown)
		time.Sleep(time.Hour) // down for an hour before the restart
		calls := f.TotalCalls()
		second, l := newTestCache(t, f, WithSnapshot(path))
		defer second.Stop()
		assert.Equal(t, calls, f.TotalCalls(), "New makes no registry call")
		for _, n := range names {
			got, err := second.GetService(n)
			require.NoError(t, err, n)
			assert.Equal(t, []string{n + "1", n + "2"}, nodeIDs(got))
		}
		rows := second.dataRows()
		require.Len(t, rows, 3)
		for _, row := range rows {
			assert.False(t, row.Fresh, "%s is reported stale", row.Name)
			assert.Equal(t, time.Since(refreshed[row.Name]), row.Age, "%s keeps its recorded age", row.Name)
			assert.Greater(t, row.Age, time.Hour)
		}
		assert.Contains(t, strings.Join(l.all(), "\n"), "loaded 3 services")
	})
}

func TestSnapshotIsWrittenAtMostOncePerInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "regcache.json")
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("a", "a1")
		c, _ := newTestCache(t, f, WithSnapshot(path), WithTTL(time.Second), WithMinimumRetryInterval(time.Second))
		defer c.Stop()
		start := time.Now()
		_, err := c.Lookup("a")
		require.NoError(t, err)
		synctest.Wait()
		assert.True(t, start.Equal(readSnapshotFile(t, path).Written), "the first success is written at once")

		writes := map[time.Time]bool{}
		for i := 0; i < 120; i++ { // a refresh about every second for 2 min
			time.Sleep(time.Second)
			_, _ = c.Lookup("a")
			synctest.Wait()
			writes[readSnapshotFile(t, path).Written] = true
		}
		assert.LessOrEqual(t, len(writes), 1+int(2*time.Minute/snapshotInterval))
		assert.GreaterOrEqual(t, len(writes), int(2*time.Minute/snapshotInterval)-1)
		matches, _ := filepath.Glob(path + ".tmp-*")
		assert.Empty(t, matches, "no temporary file is left behind")
	})
}

func TestBadSnapshotsAreLoggedOnceAndIgnored(t *testing.T) {
	dir := t.TempDir()
	valid := func(written time.Time) []byte {
		data, _ := json.Marshal(fileOf(written, snapfile.Entry{Name: "a", Refreshed: written, Services: []*registry.Service{svc("a", "1", "a1")}}))
		return data
	}
	now := time.Now()
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"missing", nil, "no snapshot"},
		{"truncated", valid(now)[:40], "not a readable snapshot"},
		{"corrupt", []byte("\x00\xff{{{"), "not a readable snapshot"},
		{"foreign", []byte(`{"format":"something-else","version":1}`), "not a regcache snapshot"},
		{"a newer version", []byte(`{"format":"regcache-snapshot","version":2}`), "not a regcache snapshot"},
		{"too old", valid(now.Add(-snapshotMaxAge - time.Minute)), "over the 24h0m0s limit"},
		{"empty", []byte{}, "not a readable snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if tc.data != nil {
				require.NoError(t, os.WriteFile(path, tc.data, 0o600))
			}
			f := newFakeRegistry()
			f.Fail(errDown)
			c, l := newTestCache(t, f, WithSnapshot(path))
			defer c.Stop()
			require.Len(t, l.all(), 1)
			assert.Contains(t, l.all()[0], tc.want)
			_, err := c.Lookup("a")
			assert.ErrorIs(t, err, errDown, "nothing was loaded")
		})
	}
	t.Run("valid", func(t *testing.T) {
		path := filepath.Join(dir, "valid")
		require.NoError(t, os.WriteFile(path, valid(now.Add(-time.Hour)), 0o600))
		c, _ := newTestCache(t, newFakeRegistry(), WithSnapshot(path))
		defer c.Stop()
		assert.Equal(t, 1, c.entryCount())
	})
}

// Two caches writing the same path, while a reader reads it: the reader
// always finds a whole file from one of them.
func TestTwoCachesNeverCorruptTheSnapshot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.json")
	var caches []*cache
	for i := 0; i < 2; i++ {
		// Both registries know every service: the second cache may load
		// the first one's file, and its re-validation must not find the
		// services gone, which would rightly empty the file.
		f := newFakeRegistry()
		for k := 0; k < 2; k++ {
			for j := 0; j < 50; j++ {
				f.SetNodes(fmt.Sprintf("svc-%d-%d", k, j), "n1", "n2", "n3")
			}
		}
		c, _ := newTestCache(t, f, WithSnapshot(path))
		for j := 0; j < 50; j++ {
			_, err := c.Lookup(fmt.Sprintf("svc-%d-%d", i, j))
			require.NoError(t, err)
		}
		caches = append(caches, c)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, c := range caches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				c.mu.Lock()
				f := c.core.SnapshotFile(c.now())
				c.mu.Unlock()
				c.write(f)
			}
		}()
	}
	reads := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			data, err := os.ReadFile(path)
			if os.IsNotExist(err) {
				continue
			}
			require.NoError(t, err)
			got, _, err := snapfile.Parse(data, time.Now())
			require.NoError(t, err, "a reader saw a partial file")
			require.NotEmpty(t, got, "a whole file, from one cache or the other")
			reads++
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	for _, c := range caches {
		c.Stop()
	}
	t.Logf("%d whole reads during 200 writes", reads)
	matches, _ := filepath.Glob(path + ".tmp-*")
	assert.Empty(t, matches)
}

func TestWithSnapshotRejectsAnEmptyPath(t *testing.T) {
	assert.PanicsWithValue(t, "regcache: WithSnapshot: path must not be empty", func() {
		New(newFakeRegistry(), WithSnapshot(""))
	})
}
