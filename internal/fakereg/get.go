package fakereg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go-micro.dev/v4/registry"
)

// Fault is what the registry does to a GetService or ListServices call.
// Faults combine: Latency comes first, then a hang, a panic, an error or
// no answer; Late and NilEntries act on the answers that get through.
type Fault struct {
	// Latency delays every call, or ends it early with the context's
	// error when the caller's context is done first (unless IgnoreCtx).
	Latency time.Duration
	// Hang blocks every call until its context is done (unless IgnoreCtx)
	// or the test calls ReleaseHangs; then it fails with ErrHung.
	Hang bool
	// IgnoreCtx makes Latency and Hang ignore the caller's context, as
	// go-micro's etcd plugin does: it uses a timeout of its own instead.
	IgnoreCtx bool
	// Panic, when set, is what every call panics with.
	Panic any
	// Err, when set, is what every call fails with.
	Err error
	// Unheard answers every GetService call with no service and no
	// error, as the NATS plugin and mdns do when no peer answers within
	// their query timeout, whether the service is gone or the registry
	// unreachable.
	Unheard bool
	// Late reads the answer when the call gets that far, and returns it
	// Late after that, whatever changed meanwhile: an answer older than
	// the events that arrive while it is out. It ignores the context.
	Late time.Duration
	// NilEntries adds a nil Service, a version with nil Nodes and a
	// version whose nodes are all nil to every GetService answer.
	NilEntries bool
}

// ErrHung is what a hung call fails with once it is released, as a
// registry client fails once its own timeout passes.
var ErrHung = errors.New("fakereg: call hung until its timeout")

// SetFault sets the fault of the GetService calls of every service without
// a fault of its own, and of ListServices unless SetListFault set one. It
// acts on the calls that start from now on.
func (r *Registry) SetFault(f Fault) {
	r.mu.Lock()
	r.get = f
	r.mu.Unlock()
}

// SetFaultFor sets the fault of name's GetService calls, in place of
// SetFault's; Fault{} gives name no fault under any SetFault.
func (r *Registry) SetFaultFor(name string, f Fault) {
	r.mu.Lock()
	r.getFor[name] = f
	r.mu.Unlock()
}

// SetListFault sets the fault of ListServices calls, in place of
// SetFault's; nil makes them follow SetFault's again. ListServices ignores
// its context: a list fault's latency and hang ignore it too, and it has
// no Unheard or NilEntries.
func (r *Registry) SetListFault(f *Fault) {
	r.mu.Lock()
	if f != nil {
		c := *f
		f = &c
	}
	r.list = f
	r.mu.Unlock()
}

// ClearFaults removes every fault (SetFault, SetFaultFor, SetListFault,
// SetWatchFault, SetWatchFaultFor) and ends every hang in progress. Fail,
// PanicWith and the gates stay.
func (r *Registry) ClearFaults() {
	r.mu.Lock()
	r.get, r.watch, r.list = Fault{}, WatchFault{}, nil
	clear(r.getFor)
	clear(r.watchFor)
	r.mu.Unlock()
	r.ReleaseHangs()
}

// ReleaseHangs ends every hang in progress, of Fault.Hang, WatchFault.
// WatchHang and WatchFault.NextHang; calls made later may hang again.
func (r *Registry) ReleaseHangs() {
	r.mu.Lock()
	if r.release != nil {
		close(r.release)
		r.release = nil
	}
	r.mu.Unlock()
}

// releaseLocked returns the channel that ReleaseHangs closes next.
func (r *Registry) releaseLocked() chan struct{} {
	if r.release == nil {
		r.release = make(chan struct{})
	}
	return r.release
}

// Fail makes every GetService and ListServices call that comes to read
// its answer from now on fail with err, as a registry that is down: a call
// held at a gate of Hold when Fail is called too, once it is let go.
// Fail(nil) ends it.
func (r *Registry) Fail(err error) {
	r.mu.Lock()
	r.failErr = err
	r.mu.Unlock()
}

// PanicWith makes every call that answers from now on panic with v, as
// Fail makes it fail; PanicWith(nil) ends it.
func (r *Registry) PanicWith(v any) {
	r.mu.Lock()
	r.failPanic = v
	r.mu.Unlock()
}

// GetService answers as the package documentation says.
func (r *Registry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	var o registry.GetOptions
	for _, opt := range opts {
		opt(&o)
	}
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	r.mu.Lock()
	st := r.startLocked(name, time.Now())
	g, ok := r.getFor[name]
	if !ok {
		g = r.get
	}
	var release chan struct{}
	if g.Hang {
		release = r.releaseLocked()
	}
	gate := gateFor(r.gates, name)
	r.mu.Unlock()
	// Deferred, so that a panicking call is recorded as ended too, before
	// the cache recovers the panic and reads its clock.
	defer r.end(name, st)

	if gate != nil && !gate.answers {
		<-gate.ch
	}
	if err := wait(ctx, g, release); err != nil {
		return nil, err
	}
	if g.Panic != nil {
		panic(g.Panic)
	}
	if g.Err != nil {
		return nil, g.Err
	}
	if g.Unheard {
		return nil, nil
	}
	svcs, err := r.answer(name, opts)
	if g.Late > 0 {
		time.Sleep(g.Late)
	}
	if gate != nil && gate.answers {
		select {
		case <-gate.ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err == nil && g.NilEntries {
		svcs = append([]*registry.Service{nil}, svcs...)
		svcs = append(svcs,
			&registry.Service{Name: name, Version: "nil-nodes"},
			&registry.Service{Name: name, Version: "nil-node-entries", Nodes: []*registry.Node{nil, nil}})
	}
	return svcs, err
}

// wait applies g's latency and hang to a call; a non-nil error ends the
// call with it.
func wait(ctx context.Context, g Fault, release chan struct{}) error {
	done := ctx.Done()
	if g.IgnoreCtx {
		done = nil
	}
	if g.Latency > 0 {
		t := time.NewTimer(g.Latency)
		select {
		case <-t.C:
		case <-done:
			t.Stop()
			return ctx.Err()
		}
	}
	if g.Hang {
		select {
		case <-release:
			return ErrHung
		case <-done:
			return ctx.Err()
		}
	}
	return nil
}

// answer is what the registry answers for name now: its failure, or a copy
// of what it holds, or the wrapped registry's answer.
func (r *Registry) answer(name string, opts []registry.GetOption) ([]*registry.Service, error) {
	r.mu.Lock()
	failPanic, failErr, inner := r.failPanic, r.failErr, r.inner
	r.mu.Unlock()
	switch {
	case failPanic != nil:
		panic(failPanic)
	case failErr != nil:
		return nil, failErr
	case inner != nil:
		return inner.GetService(name, opts...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.services[name]
	switch {
	case !ok && r.anyName:
		cur = []*registry.Service{Service(name, "1", "n")}
	case !ok:
		return nil, registry.ErrNotFound
	case r.shared:
		return cur, nil
	}
	out := copyAll(cur)
	if r.stamp {
		now := fmt.Sprint(time.Now().UnixNano())
		for _, s := range out {
			for _, n := range s.Nodes {
				n.Address = now
			}
		}
	}
	return out, nil
}

// ListServices counts the call, applies the list fault (latency, then a
// hang, a panic or an error, all ignoring the context), fails as the
// registry does now (Fail, PanicWith), or lists every version: names and
// versions only, or whole with SetListNodes. It waits Late, then at a gate
// of HoldList, and returns the list it read before.
func (r *Registry) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	r.mu.Lock()
	r.lists++
	g := r.get
	if r.list != nil {
		g = *r.list
	}
	g.IgnoreCtx = true
	var release chan struct{}
	if g.Hang {
		release = r.releaseLocked()
	}
	gate := gateFor(r.listGates, "")
	r.mu.Unlock()
	if err := wait(context.Background(), g, release); err != nil {
		return nil, err
	}
	if g.Panic != nil {
		panic(g.Panic)
	}
	if g.Err != nil {
		return nil, g.Err
	}
	list, err := r.listNow(opts)
	if g.Late > 0 {
		time.Sleep(g.Late)
	}
	if gate != nil {
		<-gate.ch
	}
	return list, err
}

func (r *Registry) listNow(opts []registry.ListOption) ([]*registry.Service, error) {
	r.mu.Lock()
	failPanic, failErr, inner := r.failPanic, r.failErr, r.inner
	r.mu.Unlock()
	switch {
	case failPanic != nil:
		panic(failPanic)
	case failErr != nil:
		return nil, failErr
	case inner != nil:
		return inner.ListServices(opts...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*registry.Service
	for _, cur := range r.services {
		for _, s := range cur {
			if s == nil {
				continue
			}
			if r.listNodes {
				out = append(out, Copy(s))
				continue
			}
			out = append(out, &registry.Service{Name: s.Name, Version: s.Version})
		}
	}
	return out, nil
}
