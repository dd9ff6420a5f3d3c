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

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// fakeRegistry is a registry.Registry whose answers, failures, latency and
// watch streams the test controls. GetService blocks while a gate is set,
// until the test releases it, so interleavings are forced rather than slept
// for.
type fakeRegistry struct {
	registry.Registry // nil: unused methods panic

	mu       sync.Mutex
	services map[string][]*registry.Service
	err      error
	panicVal any
	delay    time.Duration
	gate     chan struct{}
	calls    map[string]int
	total    int
	// callTimes records when each GetService call arrived.
	callTimes []time.Time
	// anyName makes every name answer with one node, as a gateway sees.
	anyName bool
	// stamp makes each answer's node address the time of the answer, in
	// Unix nanoseconds, so a test can tell how old served data is.
	stamp bool

	watchErr   error
	watchPanic any
	watchGate  chan struct{} // Watch blocks until it is closed
	nextErr    error         // new streams fail in Next with it
	watchCalls []time.Time
	streams    []*fakeStream
}

func newFakeRegistry() *fakeRegistry {
	return &fakeRegistry{services: map[string][]*registry.Service{}, calls: map[string]int{}}
}

func (f *fakeRegistry) String() string { return "fake" }

// set makes name answer with one version holding the given node ids.
func (f *fakeRegistry) set(name string, ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(ids) == 0 {
		delete(f.services, name)
		return
	}
	f.services[name] = []*registry.Service{svc(name, "1", ids...)}
}

func (f *fakeRegistry) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

// hold makes every later GetService block until release, or until the
// returned gate is closed.
func (f *fakeRegistry) hold() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate = make(chan struct{})
	return f.gate
}

// passThrough lets later GetService calls through while the calls already
// held stay held.
func (f *fakeRegistry) passThrough() {
	f.mu.Lock()
	f.gate = nil
	f.mu.Unlock()
}

func (f *fakeRegistry) release() {
	f.mu.Lock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
	f.mu.Unlock()
}

func (f *fakeRegistry) GetService(name string, _ ...registry.GetOption) ([]*registry.Service, error) {
	f.mu.Lock()
	f.calls[name]++
	f.total++
	f.callTimes = append(f.callTimes, time.Now())
	gate, delay := f.gate, f.delay
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if delay > 0 {
		time.Sleep(delay) // fake time inside a synctest bubble
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.panicVal != nil {
		panic(f.panicVal)
	}
	if f.err != nil {
		return nil, f.err
	}
	s, ok := f.services[name]
	if !ok && f.anyName {
		return []*registry.Service{svc(name, "1", "n")}, nil
	}
	if !ok {
		return nil, registry.ErrNotFound
	}
	// Hand out fresh objects, as a real registry decodes them anew.
	out := make([]*registry.Service, len(s))
	for i := range s {
		copied, err := svcdata.CloneIn(s[i : i+1])
		if err != nil {
			return nil, err
		}
		out[i] = copied[0]
		if f.stamp {
			for _, n := range out[i].Nodes {
				n.Address = fmt.Sprint(time.Now().UnixNano())
			}
		}
	}
	return out, nil
}

func (f *fakeRegistry) callsFor(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func (f *fakeRegistry) totalCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

func (f *fakeRegistry) Watch(...registry.WatchOption) (registry.Watcher, error) {
	f.mu.Lock()
	gate := f.watchGate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watchCalls = append(f.watchCalls, time.Now())
	if f.watchPanic != nil {
		panic(f.watchPanic)
	}
	if f.watchErr != nil {
		return nil, f.watchErr
	}
	s := &fakeStream{events: make(chan *registry.Result), stop: make(chan struct{}), failWith: f.nextErr}
	f.streams = append(f.streams, s)
	return s, nil
}

// stream returns the newest stream, or nil.
func (f *fakeRegistry) stream() *fakeStream {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.streams) == 0 {
		return nil
	}
	return f.streams[len(f.streams)-1]
}

// openStreams counts streams not yet stopped.
func (f *fakeRegistry) openStreams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.streams {
		if !s.stopped() {
			n++
		}
	}
	return n
}

func (f *fakeRegistry) watchTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.watchCalls...)
}

// fakeStream is a watch stream fed by the test.
type fakeStream struct {
	events chan *registry.Result
	stop   chan struct{}
	once   sync.Once

	mu        sync.Mutex
	failWith  error
	panicWith any
	stops     int
	// empty makes Next return neither an event nor an error, at once.
	empty bool
}

func (s *fakeStream) Next() (*registry.Result, error) {
	s.mu.Lock()
	err, p, empty := s.failWith, s.panicWith, s.empty
	s.mu.Unlock()
	if empty {
		return nil, nil
	}
	if p != nil {
		panic(p)
	}
	if err != nil {
		return nil, err
	}
	select {
	case r := <-s.events:
		return r, nil
	case <-s.stop:
		return nil, registry.ErrWatcherStopped
	}
}

func (s *fakeStream) Stop() {
	s.mu.Lock()
	s.stops++
	s.mu.Unlock()
	s.once.Do(func() { close(s.stop) })
}

func (s *fakeStream) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// send delivers an event; it blocks until the watcher takes it.
func (s *fakeStream) send(action string, service *registry.Service) {
	s.events <- &registry.Result{Action: action, Service: service}
}

// breakWith makes the stream fail: a Next in progress returns at once.
func (s *fakeStream) breakWith(err error) {
	s.mu.Lock()
	s.failWith = err
	s.mu.Unlock()
	s.once.Do(func() { close(s.stop) })
}

func svc(name, version string, ids ...string) *registry.Service {
	s := &registry.Service{Name: name, Version: version, Metadata: map[string]string{"v": version}}
	for _, id := range ids {
		s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: id + ":8080", Metadata: map[string]string{"id": id}})
	}
	return s
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

// checkByName checks that the watcher's index holds the entries the map
// does, each the same entry.
func checkByName(t *testing.T, c *cache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	c.entries.Range(func(k, v any) bool {
		n++
		if c.byName[k.(string)] != v.(*entry) {
			t.Errorf("entry %q is not in the index as it is in the map", k)
		}
		return true
	})
	if n != len(c.byName) {
		t.Errorf("%d entries in the index, %d in the map", len(c.byName), n)
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
