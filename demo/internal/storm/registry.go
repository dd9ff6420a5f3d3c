package storm

import (
	"context"
	"sync/atomic"
	"time"

	"go-micro.dev/v4/registry"
)

// Backend is the registry under test, shared by every client.
type Backend interface {
	// Describe names the registry for the report.
	Describe() string
	// Client returns a new connection to the registry for one client.
	Client() (registry.Registry, error)
	// Register and Deregister change what the registry holds: the
	// services' instances starting and stopping.
	Register(*registry.Service) error
	Deregister(*registry.Service) error
	// Down starts the outage, Up ends it and returns once the registry
	// serves again. OutageNote says what the outage looks like to a
	// client.
	Down() error
	Up() error
	OutageNote() string
	// Refuses reports whether a call that starts now is refused (after the
	// injected latency, without queueing) instead of reaching the
	// registry; false if the registry itself decides, as etcd does.
	Refuses() bool
	// WritesWhileDown reports whether Register and Deregister work during
	// the outage. If they do, the instances that restart during the
	// outage are in the registry when it comes back; if not, they
	// register right after Up.
	WritesWhileDown() bool
	// Close releases everything.
	Close()
}

// injector wraps one client's connection to the registry with the injected
// latency, capacity and refusals. A GetService or ListServices call waits
// for one of the capacity slots, holds it for the latency of the moment it
// got it, then goes to the registry, whose own time (an etcd timeout, say)
// comes on top, outside the slot. A call that starts while the backend
// refuses calls fails after the latency, without queueing; one that started
// before is answered. It honours the
// context of registry.GetContext and registry.ListContext: regcache passes
// one that Stop cancels.
type injector struct {
	registry.Registry
	latency *atomic.Int64 // the current injected latency, in ns
	slots   chan struct{} // nil: no limit
	refuses func() bool
}

func (r *injector) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	var o registry.GetOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := r.wait(o.Context); err != nil {
		return nil, err
	}
	return r.Registry.GetService(name, opts...)
}

func (r *injector) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	var o registry.ListOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := r.wait(o.Context); err != nil {
		return nil, err
	}
	return r.Registry.ListServices(opts...)
}

// wait is the part of a call that the injector adds: the queue, the
// latency, and the refusal during the outage.
func (r *injector) wait(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if r.refuses() {
		if err := sleep(ctx, time.Duration(r.latency.Load())); err != nil {
			return err
		}
		return ErrUnavailable
	}
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-r.slots }()
	}
	return sleep(ctx, time.Duration(r.latency.Load()))
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

// counter counts the GetService and ListServices calls that reach the
// registry, by the scenario they start in and by the slot of it, and notes
// when the first that succeeded started. Everything else passes through.
type counter struct {
	registry.Registry
	tl      *timeline
	calls   []atomic.Int64
	slots   [][]atomic.Int64 // by scenario, then slot
	firstOK []atomic.Int64   // since the start of the scenario, in ns
}

func newCounter(r registry.Registry, tl *timeline) *counter {
	n := len(tl.phaseStart)
	c := &counter{Registry: r, tl: tl, calls: make([]atomic.Int64, n), slots: make([][]atomic.Int64, n), firstOK: make([]atomic.Int64, n)}
	for p := range c.slots {
		c.slots[p] = make([]atomic.Int64, tl.slots[p])
	}
	return c
}

func (c *counter) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	p, start := c.begin()
	svcs, err := c.Registry.GetService(name, opts...)
	c.end(p, start, err)
	return svcs, err
}

func (c *counter) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	p, start := c.begin()
	svcs, err := c.Registry.ListServices(opts...)
	c.end(p, start, err)
	return svcs, err
}

func (c *counter) begin() (int32, time.Time) {
	p := c.tl.phase()
	start := time.Now()
	c.calls[p].Add(1)
	c.slots[p][c.tl.slotOf(p, start)].Add(1)
	return p, start
}

// perSlot is scenario p's calls, slot by slot.
func (c *counter) perSlot(p int) []int64 {
	out := make([]int64, len(c.slots[p]))
	for i := range out {
		out[i] = c.slots[p][i].Load()
	}
	return out
}

func (c *counter) end(p int32, start time.Time, err error) {
	if err == nil && c.firstOK[p].Load() == 0 {
		c.firstOK[p].CompareAndSwap(0, int64(max(start.Sub(c.tl.phaseStart[p]), 1)))
	}
}
