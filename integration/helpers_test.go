package integration

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// countingRegistry wraps a registry and counts GetService calls per service,
// and Watch calls. Its watch streams can drop events on command, so that a
// test can show that a change reached the cache by some other way.
// Everything else passes through.
type countingRegistry struct {
	registry.Registry

	start   time.Time
	mu      sync.Mutex
	gets    map[string]int
	watches int
	events  []string // what the watch streams returned, with times
	drop    func(*registry.Result) bool
}

// DropEvents makes the watch streams drop, from now on, every event for
// which drop returns true; nil drops nothing.
func (c *countingRegistry) DropEvents(drop func(*registry.Result) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop = drop
}

func (c *countingRegistry) dropped(res *registry.Result) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.drop != nil && res != nil && c.drop(res)
}

func newCountingRegistry(r registry.Registry) *countingRegistry {
	return &countingRegistry{Registry: r, gets: map[string]int{}, start: time.Now()}
}

func (c *countingRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	c.mu.Lock()
	c.gets[name]++
	c.mu.Unlock()
	return c.Registry.GetService(name, opts...)
}

func (c *countingRegistry) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	c.mu.Lock()
	c.watches++
	c.mu.Unlock()
	w, err := c.Registry.Watch(opts...)
	if err != nil {
		c.record("Watch error: %v", err)
		return nil, err
	}
	return &recordingWatcher{Watcher: w, c: c}, nil
}

func (c *countingRegistry) record(format string, args ...interface{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, fmt.Sprintf("+%v ", time.Since(c.start).Round(time.Millisecond))+fmt.Sprintf(format, args...))
}

// Events is what the watch streams have returned so far, one line each.
func (c *countingRegistry) Events() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.events...)
}

// recordingWatcher records what Next returns.
type recordingWatcher struct {
	registry.Watcher
	c *countingRegistry
}

func (w *recordingWatcher) Next() (*registry.Result, error) {
	for {
		res, err := w.Watcher.Next()
		switch {
		case err != nil:
			w.c.record("Next error: %v", err)
		case res != nil && res.Service != nil && w.c.dropped(res):
			w.c.record("dropped: %s %s %v", res.Action, res.Service.Name, nodeIDs([]*registry.Service{res.Service}))
			continue
		case res != nil && res.Service != nil:
			w.c.record("Next: %s %s %v", res.Action, res.Service.Name, nodeIDs([]*registry.Service{res.Service}))
		}
		return res, err
	}
}

// Gets is the number of GetService calls made for name so far.
func (c *countingRegistry) Gets(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets[name]
}

// Watches is the number of Watch calls made so far.
func (c *countingRegistry) Watches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watches
}

// testLogger is a go-micro logger that writes to the test log, so that what
// the cache logs during an outage shows up next to the test's own lines.
// It goes quiet when the test ends; create it before the cache, so that
// its cleanup runs after the cache has stopped.
type testLogger struct {
	t      *testing.T
	start  time.Time
	mu     sync.Mutex
	closed bool
}

func newTestLogger(t *testing.T) *testLogger {
	l := &testLogger{t: t, start: time.Now()}
	t.Cleanup(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
	})
	return l
}

func (l *testLogger) Init(...logger.Option) error                 { return nil }
func (l *testLogger) Options() logger.Options                     { return logger.Options{Level: logger.DebugLevel} }
func (l *testLogger) Fields(map[string]interface{}) logger.Logger { return l }
func (l *testLogger) String() string                              { return "test" }
func (l *testLogger) Log(level logger.Level, v ...interface{}) {
	l.write(level, fmt.Sprint(v...))
}
func (l *testLogger) Logf(level logger.Level, format string, v ...interface{}) {
	l.write(level, fmt.Sprintf(format, v...))
}

func (l *testLogger) write(level logger.Level, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.t.Logf("[%s +%v] %s", level, time.Since(l.start).Round(time.Millisecond), msg)
}

// newCache builds the cache under test over r and stops it when the test
// ends. It logs to the test log.
func newCache(t *testing.T, r registry.Registry, opts ...cache.Option) cache.Cache {
	t.Helper()
	opts = append([]cache.Option{cache.WithLogger(newTestLogger(t))}, opts...)
	c := cache.New(r, opts...)
	t.Cleanup(c.Stop)
	return c
}

// service builds a one-version service with nodes of the given ids. Each
// node's address is a dummy loopback address: nothing dials it.
func service(name string, ids ...string) *registry.Service {
	s := &registry.Service{Name: name, Version: "1.0.0"}
	for _, id := range ids {
		s.Nodes = append(s.Nodes, &registry.Node{
			Id:       id,
			Address:  "127.0.0.1:1",
			Metadata: map[string]string{"id": id},
		})
	}
	return s
}

// registerTTL is the lease the tests give nodes that must outlive the test.
// The etcd plugin v1.2.0 dereferences a nil lease when Register is called
// without a TTL, so every Register in these tests passes one.
const registerTTL = time.Minute

func mustRegister(t *testing.T, r registry.Registry, s *registry.Service, ttl time.Duration) {
	t.Helper()
	if err := r.Register(s, registry.RegisterTTL(ttl)); err != nil {
		t.Fatalf("register %s %v: %v", s.Name, nodeIDs([]*registry.Service{s}), err)
	}
}

func mustDeregister(t *testing.T, r registry.Registry, s *registry.Service) {
	t.Helper()
	if err := r.Deregister(s); err != nil {
		t.Fatalf("deregister %s %v: %v", s.Name, nodeIDs([]*registry.Service{s}), err)
	}
}

// nodeIDs returns the sorted node ids of all versions.
func nodeIDs(svcs []*registry.Service) []string {
	var ids []string
	for _, s := range svcs {
		for _, n := range s.Nodes {
			ids = append(ids, n.Id)
		}
	}
	sort.Strings(ids)
	return ids
}

func hasNode(svcs []*registry.Service, id string) bool {
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if n.Id == id {
				return true
			}
		}
	}
	return false
}

// cachedIDs is what the cache holds for name right now, read with Lookup
// (no copy), or "<err>" on error.
func cachedIDs(c cache.Cache, name string) string {
	svcs, err := c.Lookup(name)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return strings.Join(nodeIDs(svcs), ",")
}

// waitFor polls cond every 10 ms until it holds, and fails the test if it
// does not hold within limit. It returns how long it took. The limits in
// these tests are generous "within seconds" bounds: the machine is shared
// and the tests run with -race.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(limit)
	for {
		if cond() {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// warmUpWatch makes sure the cache's watch stream for name is established.
// The watcher starts in the background with the first lookup, and its
// stream is established only once etcd has answered the watch's create
// request, so an event right after the first lookup could come before it.
// It registers probe nodes until one shows up in the cache through an
// event, then removes them. The cache must hold name already.
func warmUpWatch(t *testing.T, c cache.Cache, r registry.Registry, name string) {
	t.Helper()
	var probes []*registry.Service
	defer func() {
		for _, p := range probes {
			mustDeregister(t, r, p)
		}
		waitFor(t, 10*time.Second, "warm-up probes removed", func() bool {
			svcs, _ := c.Lookup(name)
			for _, p := range probes {
				if hasNode(svcs, p.Nodes[0].Id) {
					return false
				}
			}
			return true
		})
	}()
	for i := 0; i < 20; i++ {
		p := service(name, fmt.Sprintf("probe-%d", i))
		mustRegister(t, r, p, registerTTL)
		probes = append(probes, p)
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			svcs, _ := c.Lookup(name)
			if hasNode(svcs, p.Nodes[0].Id) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Fatalf("the cache's watch stream never delivered a probe for %s", name)
}

func joinIDs(svcs []*registry.Service) string { return strings.Join(nodeIDs(svcs), ",") }

// waitStream waits until the watch stream of the cache over c is
// established: a service registered through writer shows up in it. The etcd
// plugin's Watch does not return until its stream is, and while etcd is
// down it waits, ignoring the context it is given, so a cache whose first
// Watch call meets an outage cannot stop until etcd is back. Tests that stop
// etcd call this first.
func waitStream(t *testing.T, c *countingRegistry, writer registry.Registry) {
	t.Helper()
	probe := service(fmt.Sprintf("it.stream-probe.%d", time.Now().UnixNano()), "p1")
	mustRegister(t, writer, probe, registerTTL)
	waitFor(t, 10*time.Second, "an event through the cache's watch stream", func() bool {
		return streamDelivered(c, "create "+probe.Name+" [p1]")
	})
	mustDeregister(t, writer, probe)
}
