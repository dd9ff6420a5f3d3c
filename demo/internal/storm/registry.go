package storm

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go-micro.dev/v4/registry"
	util "go-micro.dev/v4/util/registry"
)

// Backend is the registry under test, shared by every client.
type Backend interface {
	// Describe names the registry for the report.
	Describe() string
	// Client returns a new connection to the registry for one client.
	Client() (registry.Registry, error)
	// Register and Deregister change what the registry holds.
	Register(*registry.Service) error
	Deregister(*registry.Service) error
	// Down starts the outage, Up ends it and returns once the registry
	// serves again. OutageNote says what the outage looks like to a
	// client.
	Down() error
	// Refuses reports whether a call that starts now is refused (after the
	// injected latency, without queueing) instead of reaching the
	// registry; false if the registry itself decides, as etcd does.
	Refuses() bool
	Up() error
	OutageNote() string
	// Close releases everything.
	Close()
}

// injector wraps one client's connection to the registry with the injected
// latency, capacity and refusals. A GetService call takes the latency of
// the moment it starts; it waits for one of the capacity slots, holds it
// for that latency, then goes to the registry, whose own time (an etcd
// timeout, say) comes on top, outside the slot. A call that starts while
// the backend refuses calls fails after the latency, without queueing. It
// honours the context of registry.GetContext: regcache passes one that
// Stop cancels.
type injector struct {
	registry.Registry
	latency *atomic.Int64 // the current injected latency, in ns
	slots   chan struct{} // nil: no limit
	refuses func() bool
}

func (r *injector) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	ctx := context.Background()
	if len(opts) > 0 {
		var o registry.GetOptions
		for _, opt := range opts {
			opt(&o)
		}
		if o.Context != nil {
			ctx = o.Context
		}
	}
	d := time.Duration(r.latency.Load())
	if r.refuses() {
		if err := sleep(ctx, d); err != nil {
			return nil, err
		}
		return nil, ErrUnavailable
	}
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	err := sleep(ctx, d)
	if r.slots != nil {
		<-r.slots
	}
	if err != nil {
		return nil, err
	}
	return r.Registry.GetService(name, opts...)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// counter counts the GetService calls that reach the registry, by the
// phase they start in, and notes when the first that succeeded started.
// Everything else passes through.
type counter struct {
	registry.Registry
	tl      *timeline
	calls   [numPhases]atomic.Int64
	firstOK [numPhases]atomic.Int64 // since the start of the phase, in ns
}

func (c *counter) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	p := c.tl.phase()
	start := time.Now()
	c.calls[p].Add(1)
	svcs, err := c.Registry.GetService(name, opts...)
	if err == nil && c.firstOK[p].Load() == 0 {
		c.firstOK[p].CompareAndSwap(0, int64(max(start.Sub(c.tl.phaseStart[p]), 1)))
	}
	return svcs, err
}

// Memory is the Backend of `make demo`: go-micro's in-memory registry, which
// needs no network. Down has every call that starts fail with
// ErrUnavailable after the injected latency (as a refused connection
// would), ends every open watch stream with an error, and refuses new ones
// until Up.
type Memory struct {
	mem registry.Registry

	mu       sync.Mutex
	down     bool
	watchers map[*memWatcher]struct{}
}

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
func (m *Memory) Client() (registry.Registry, error)   { return &memClient{Registry: m.mem, m: m}, nil }
func (m *Memory) Register(s *registry.Service) error   { return m.mem.Register(s) }
func (m *Memory) Deregister(s *registry.Service) error { return m.mem.Deregister(s) }
func (m *Memory) Close()                               {}
func (m *Memory) isDown() bool                         { m.mu.Lock(); defer m.mu.Unlock(); return m.down }

func (m *Memory) Down() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = true
	for w := range m.watchers {
		w.Watcher.Stop()
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

// memClient is one client's view of the in-memory registry. GetService
// calls are refused by the injector in front of it.
type memClient struct {
	registry.Registry
	m *Memory
}

func (c *memClient) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if c.m.down {
		return nil, ErrUnavailable
	}
	w, err := c.Registry.Watch(opts...)
	if err != nil {
		return nil, err
	}
	mw := &memWatcher{Watcher: w, m: c.m}
	c.m.watchers[mw] = struct{}{}
	return mw, nil
}

// memWatcher hands every watcher its own copy of each event, as a network
// registry does: the in-memory registry sends one object to all of them,
// and go-micro's cache changes the events it receives.
type memWatcher struct {
	registry.Watcher
	m *Memory
}

func (w *memWatcher) Next() (*registry.Result, error) {
	res, err := w.Watcher.Next()
	if err != nil || res == nil {
		return res, err
	}
	cp := *res
	if res.Service != nil {
		cp.Service = util.CopyService(res.Service)
	}
	return &cp, nil
}

func (w *memWatcher) Stop() {
	w.m.mu.Lock()
	delete(w.m.watchers, w)
	w.m.mu.Unlock()
	w.Watcher.Stop()
}
