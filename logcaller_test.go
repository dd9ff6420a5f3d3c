package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	log "go-micro.dev/v4/logger"
)

// callerLogger records, for each line, the caller that go-micro's default
// logger would show: runtime.Caller(CallerSkipCount) from inside Logf.
type callerLogger struct {
	skip  int
	mu    sync.Mutex
	lines []string // "file:line message"
}

func (l *callerLogger) Init(...log.Option) error                 { return nil }
func (l *callerLogger) Options() log.Options                     { return log.Options{CallerSkipCount: l.skip} }
func (l *callerLogger) Fields(map[string]interface{}) log.Logger { return l }
func (l *callerLogger) String() string                           { return "caller" }
func (l *callerLogger) Log(level log.Level, v ...interface{})    { l.add(fmt.Sprint(v...)) }
func (l *callerLogger) Logf(level log.Level, format string, v ...interface{}) {
	l.add(fmt.Sprintf(format, v...))
}

func (l *callerLogger) add(msg string) {
	_, file, line, _ := runtime.Caller(l.skip + 1) // + 1 for add itself
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf("%s:%d %s", file, line, msg))
	l.mu.Unlock()
}

func (l *callerLogger) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// Every log line names the cache's own code as its caller, the way
// go-micro's logger computes it, whatever path led to it: New, a lookup, a
// background refresh, the watcher, the observer's goroutine, and Stop's
// final snapshot write (under sync.Once).
func TestLogLinesNameTheCachesCode(t *testing.T) {
	skip := log.NewLogger().Options().CallerSkipCount
	require.Equal(t, 2, skip, "go-micro's default logger")
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Dir(self)

	synctest.Test(t, func(t *testing.T) {
		lg := &callerLogger{skip: skip}
		dir := filepath.Join(t.TempDir(), "snaps")
		require.NoError(t, os.Mkdir(dir, 0o700))
		path := filepath.Join(dir, "snap.json")
		f := newFakeRegistry()
		f.SetNodes("a", "1")
		f.SetNodes("b", "1")
		c, _ := newTestCache(t, f, WithLogger(lg), WithTTL(time.Minute), WithSnapshot(path),
			WithObserver(func(Event) { panic("boom") }))
		warm(t, c, "a", "b")
		require.NoError(t, os.RemoveAll(dir))             // the writes fail from now on
		deliver(f.Stream(), "create", svc("a", "1", "2")) // a change to write
		f.Fail(errDown)
		f.Stream().Break(errDown)
		time.Sleep(time.Minute)
		_, _ = c.Lookup("a")
		_, _ = c.Lookup("b")
		synctest.Wait()
		time.Sleep(5 * time.Second)
		f.Fail(nil)
		time.Sleep(5 * time.Second)
		c.Stop()
		// New's warning of a folder that is not there.
		New(f, WithLogger(lg), WithSnapshot(filepath.Join(dir, "gone", "snap.json"))).Stop()

		lines := lg.all()
		require.Greater(t, len(lines), 5, "%q", lines)
		var persist int
		for _, l := range lines {
			file := l[:strings.Index(l, ":")]
			assert.Equal(t, root, filepath.Dir(file), "%s", l)
			assert.False(t, strings.HasSuffix(file, "_test.go"), "%s", l)
			if strings.Contains(l, "snap.json") {
				persist++
			}
		}
		assert.Equal(t, 4, persist, "loads, a failed write and New's warning: %q", lines)
		assert.Contains(t, strings.Join(lines, "\n"), "WithSnapshot: cannot write the snapshot")
	})
}

// New checks the snapshot's folder at once: a path it cannot write is a
// warning in the log and SnapshotError in Stats, not a surprise at Stop.
func TestNewChecksTheSnapshotPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for _, tc := range []struct {
		name, path, want string
	}{
		{"no folder", filepath.Join(dir, "missing", "snap.json"), "no such file or directory"},
		{"a file for a folder", filepath.Join(file, "snap.json"), "not a directory"},
		{"fine", filepath.Join(dir, "snap.json"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg := &testLogger{}
			c := New(newFakeRegistry(), WithLogger(lg), WithSnapshot(tc.path))
			defer c.Stop()
			st := c.Stats()
			if tc.want == "" {
				assert.Empty(t, st.SnapshotError)
				assert.NotContains(t, strings.Join(lg.all(), "\n"), "cannot write")
				left, _ := filepath.Glob(filepath.Join(dir, "*.check-*"))
				assert.Empty(t, left, "the check leaves nothing behind")
				return
			}
			assert.Contains(t, st.SnapshotError, tc.want)
			assert.Contains(t, strings.Join(lg.all(), "\n"), "WithSnapshot: cannot write the snapshot "+tc.path)
		})
	}
}
