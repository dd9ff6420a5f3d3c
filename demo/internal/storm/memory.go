package storm

import (
	"errors"
	"sync"

	"go-micro.dev/v4/registry"
)

// Memory is the Backend of `make demo`: go-micro's in-memory registry, which
// needs no network, with watch streams of its own. Down has every call that
// starts fail with ErrUnavailable after the injected latency (as a refused
// connection would), ends every open watch stream with an error, and refuses
// new ones until Up.
//
// The streams behave as a network registry's do: each watcher gets every
// change in the order it was made, in its own copy, and none is lost to a
// watcher that is busy. (go-micro's in-memory registry sends each event from
// a goroutine of its own, so two changes in a row can arrive in either order,
// and it drops an event that a watcher does not take within 10 ms.)
type Memory struct {
	mem registry.Registry

	// mu orders the changes and their events, and guards down and
	// watchers.
	mu       sync.Mutex
	down     bool
	watchers map[*memWatcher]struct{}
}

var errWatchStopped = errors.New("watch stream stopped")

// NewMemory returns an empty in-memory registry.
func NewMemory() *Memory {
	return &Memory{mem: registry.NewMemoryRegistry(), watchers: map[*memWatcher]struct{}{}}
}

func (m *Memory) Describe() string {
	return "go-micro's in-memory registry (registry.NewMemoryRegistry)"
}

func (m *Memory) OutageNote() string {
	return "every registry call fails after the injected latency, and watch streams break"
}

func (m *Memory) Refuses() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.down
}

// WritesWhileDown is true: the demo itself can still change what the
// registry holds during the outage, and no client sees it until Up.
func (m *Memory) WritesWhileDown() bool { return true }

func (m *Memory) Client() (registry.Registry, error) { return &memClient{Registry: m.mem, m: m}, nil }
func (m *Memory) Close()                             {}

// Register adds s's nodes and tells every open stream, as "create".
func (m *Memory) Register(s *registry.Service) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.mem.Register(s); err != nil {
		return err
	}
	m.notifyLocked("create", s)
	return nil
}

// Deregister removes s's nodes and tells every open stream, as "delete".
func (m *Memory) Deregister(s *registry.Service) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.mem.Deregister(s); err != nil {
		return err
	}
	m.notifyLocked("delete", s)
	return nil
}

func (m *Memory) notifyLocked(action string, s *registry.Service) {
	for w := range m.watchers {
		if w.service == "" || w.service == s.Name {
			w.push(&registry.Result{Action: action, Service: copyService(s)})
		}
	}
}

// copyService is s with its Service, Node and Endpoint structs copied, as a
// stream decoding the change would have made them: what a watcher does to
// its copy never reaches the registry's or another watcher's. Metadata maps
// and endpoint Values, which no client changes, are shared.
func copyService(s *registry.Service) *registry.Service {
	c := *s
	c.Nodes = make([]*registry.Node, len(s.Nodes))
	for i, n := range s.Nodes {
		nc := *n
		c.Nodes[i] = &nc
	}
	c.Endpoints = make([]*registry.Endpoint, len(s.Endpoints))
	for i, e := range s.Endpoints {
		ec := *e
		c.Endpoints[i] = &ec
	}
	return &c
}

func (m *Memory) Down() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = true
	for w := range m.watchers {
		w.end(ErrUnavailable)
		delete(m.watchers, w)
	}
	return nil
}

func (m *Memory) Up() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = false
	return nil
}

// memClient is one client's connection to the in-memory registry. Its
// GetService and ListServices calls are refused by the injector in front of
// it; its watch streams are the Memory's.
type memClient struct {
	registry.Registry
	m *Memory
}

func (c *memClient) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var wo registry.WatchOptions
	for _, o := range opts {
		o(&wo)
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if c.m.down {
		return nil, ErrUnavailable
	}
	w := &memWatcher{m: c.m, service: wo.Service, wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.m.watchers[w] = struct{}{}
	return w, nil
}

// memWatcher is one watch stream: a queue that Next drains, in order, and
// that ends with an error when the registry goes down or Stop is called.
type memWatcher struct {
	m       *Memory
	service string // only this service's changes; "" for all

	wake chan struct{} // a push since the last Next; buffer of one
	done chan struct{} // closed when the stream ends

	mu    sync.Mutex // guards queue and err
	queue []*registry.Result
	err   error
}

var _ registry.Watcher = (*memWatcher)(nil)

func (w *memWatcher) push(r *registry.Result) {
	w.mu.Lock()
	if w.err == nil {
		w.queue = append(w.queue, r)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// end ends the stream with err, dropping what is queued, as a broken
// connection does.
func (w *memWatcher) end(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
		w.queue = nil
		close(w.done)
	}
}

func (w *memWatcher) Next() (*registry.Result, error) {
	for {
		w.mu.Lock()
		if w.err != nil {
			err := w.err
			w.mu.Unlock()
			return nil, err
		}
		if len(w.queue) > 0 {
			r := w.queue[0]
			w.queue[0] = nil
			w.queue = w.queue[1:]
			w.mu.Unlock()
			return r, nil
		}
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-w.done:
		}
	}
}

func (w *memWatcher) Stop() {
	w.m.mu.Lock()
	delete(w.m.watchers, w)
	w.m.mu.Unlock()
	w.end(errWatchStopped)
}
