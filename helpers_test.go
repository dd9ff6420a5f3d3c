package cache

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/regcache/cache/internal/core"

	"github.com/regcache/cache/internal/fakereg"
	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
)

// newFakeRegistry returns the one fake registry (internal/fakereg) as the
// internal tests use it: its ListServices fails, as the registry these
// tests were written against had none, so that a resync asks per service.
func newFakeRegistry() *fakereg.Registry {
	f := fakereg.New()
	f.SetListFault(&fakereg.Fault{Err: errNoList})
	return f
}

// errNoList is what the internal tests' registry fails ListServices with.
var errNoList = errors.New("fake registry: no ListServices")

// svc is version of name with a node of each id (see fakereg.Service).
func svc(name, version string, ids ...string) *registry.Service {
	return fakereg.Service(name, version, ids...)
}

// nodeIDs lists the node ids of every version, in order.
func nodeIDs(svcs []*registry.Service) []string {
	var ids []string
	for _, s := range svcs {
		for _, n := range s.Nodes {
			ids = append(ids, n.Id)
		}
	}
	return ids
}

// testLogger records log lines instead of printing them.
type testLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *testLogger) Init(...log.Option) error                 { return nil }
func (l *testLogger) Options() log.Options                     { return log.Options{} }
func (l *testLogger) Fields(map[string]interface{}) log.Logger { return l }
func (l *testLogger) String() string                           { return "test" }
func (l *testLogger) Log(level log.Level, v ...interface{}) {
	l.add(level, fmt.Sprint(v...))
}
func (l *testLogger) Logf(level log.Level, format string, v ...interface{}) {
	l.add(level, fmt.Sprintf(format, v...))
}
func (l *testLogger) add(level log.Level, s string) {
	l.mu.Lock()
	l.lines = append(l.lines, level.String()+" "+s)
	l.mu.Unlock()
}

func (l *testLogger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

func (l *testLogger) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// newTestCache builds a cache over f with a recording logger.
func newTestCache(t *testing.T, f registry.Registry, opts ...Option) (*cache, *testLogger) {
	t.Helper()
	l := &testLogger{}
	c := New(f, append([]Option{WithLogger(l)}, opts...)...).(*cache)
	return c, l
}

// entryCount counts the entries the cache holds.
func (c *cache) entryCount() int {
	n := 0
	c.entries.Range(func(any, any) bool { n++; return true })
	return n
}

var errDown = errors.New("registry down")

// cacheGoroutines counts the goroutines running code of this package's
// cache, in the same synctest bubble as the caller when it is in one. A
// plain runtime.NumGoroutine would also count what other tests (and
// go-micro's own cache in the compatibility tests) leave winding down.
func cacheGoroutines() int {
	return len(goroutinesWith(cacheCode))
}

// cacheCode marks a stack frame of the cache's methods: its own goroutines
// (refreshes, watcher, maintainer, observer) and any caller still inside one
// of its methods. The external tests use it as CacheCode.
const cacheCode = "github.com/regcache/cache.(*cache)."

// exitGrace is how long a leak check outside a synctest bubble waits for
// goroutines to finish exiting: Stop returns once they have called
// WaitGroup.Done, which can be a moment before they are gone from
// runtime.Stack. (Inside a bubble, synctest.Wait covers that moment.)
const exitGrace = 2 * time.Second

// goroutinesLeft waits up to grace for at most n goroutines containing
// marker to remain (as goroutinesWith counts them), and returns the stacks
// of those that remain at the end. The external tests use it as
// GoroutinesLeft.
func goroutinesLeft(marker string, n int, grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		left := goroutinesWith(marker)
		if len(left) <= n || time.Now().After(deadline) {
			return left
		}
		time.Sleep(time.Millisecond)
	}
}

// goroutinesWith returns the stacks of the goroutines that contain marker
// and belong to the caller's synctest bubble, or to no bubble when the
// caller is in none. Goroutines of other bubbles (tests run theirs in
// parallel) are left out. The external tests use it as GoroutinesWith.
func goroutinesWith(marker string) []string {
	own := make([]byte, 1<<10)
	own = own[:runtime.Stack(own, false)]
	bubble := bubbleOf(string(own[:bytes.IndexByte(own, '\n')+1]))
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if bubbleOf(header) == bubble && strings.Contains(g, marker) {
			found = append(found, g)
		}
	}
	return found
}

// bubbleOf returns the synctest bubble named in a goroutine header, or "".
func bubbleOf(header string) string {
	_, b, ok := strings.Cut(header, "synctest bubble ")
	if !ok {
		return ""
	}
	b, _, _ = strings.Cut(b, "]")
	b, _, _ = strings.Cut(b, ",")
	return b
}

// checkByName checks that the core's index holds the entries the map
// does, each the same entry.
func checkByName(t *testing.T, c *cache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	c.entries.Range(func(k, v any) bool {
		n++
		if c.core.Find(k.(string)) != v.(*core.Entry) {
			t.Errorf("entry %q is not in the index as it is in the map", k)
		}
		return true
	})
	if n != c.core.Len() {
		t.Errorf("%d entries in the index, %d in the map", c.core.Len(), n)
	}
}

// dataRows returns the rows of the services held with data, without their
// node lists.
func (c *cache) dataRows() []ServiceStats {
	var rows []ServiceStats
	for _, r := range c.Services("", "", 0) {
		if r.Source != "" {
			r.NodeList = nil
			rows = append(rows, r)
		}
	}
	return rows
}

// epoch reads the core's resync epoch.
func (c *cache) epoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.Epoch()
}
