// Package fakereg is the one fake registry of regcache's tests: an
// in-memory registry.Registry whose answers, faults, latency and watch
// streams the test controls, and which checks the cache's promise about
// registry calls as the calls happen. The internal and the external tests
// of the root package both use it; it cannot see the cache's lock.
//
// It starts no goroutine, and it waits only on channels and on the timers
// and sleeps of the time package, so it lives inside a testing/synctest
// bubble: time is fake there, and a call left blocked when the test ends is
// reported rather than leaked. Create it, and its gates, inside the bubble
// that uses it.
//
// # Data
//
// Set stores a service's answer silently: a change that no event tells.
// Register and Deregister change it as a well-behaved plugin does, and send
// one event to every watcher of the service (see Register). Held reads it
// without a call.
//
// # GetService
//
// A call goes through these steps, in order:
//
//  1. It is counted and timed, and checked against the call bound (Calls,
//     CallTimes, InFlight, SetBound, Report).
//  2. It waits at a gate of Hold, if one holds its service, whatever its
//     context.
//  3. It takes the Fault in force when it started (SetFaultFor's for its
//     service, else SetFault's), which may delay it, hang it, make it panic
//     or fail, or make it answer nothing.
//  4. It fails as the registry does at that moment (Fail, PanicWith), or it
//     reads its answer: a fresh deep copy of what is stored, as from a
//     registry that decodes its answer anew (the stored structs themselves
//     with SetShared), or ErrNotFound for a service with nothing stored
//     (one node with SetAnyName).
//  5. It waits Fault.Late, then at a gate of HoldAnswers, if one holds its
//     service: its answer is then older than what changed meanwhile.
//  6. Fault.NilEntries spoils the answer.
//
// So a fault is fixed when a call starts, and the registry's state (its
// data, Fail and PanicWith) is read when the call answers.
//
// # Watch
//
// Watch hands out Streams. Register and Deregister queue their events on
// every open stream of the service, without bound and without blocking;
// Stream.Send hands the stream an event of the test's and waits until the
// cache's watcher has taken it. WatchFault injects faults into Watch, into
// the streams and into their events.
//
// # Wrap
//
// Wrap puts the faults, gates and records in front of another registry,
// such as go-micro's memory registry, whose own events arrive out of order
// and are dropped when a watcher is slow: its data and its streams are
// then the other registry's.
package fakereg

import (
	"sort"
	"sync"
	"time"

	"go-micro.dev/v4/registry"
)

// Registry is the fake. The zero value is not usable: call New.
type Registry struct {
	// inner, if not nil, holds the data and makes the streams (Wrap).
	inner registry.Registry

	// mu guards every field below, and is never held while a call waits
	// or panics.
	mu sync.Mutex

	services map[string][]*registry.Service // by name; each version's nodes in order of registration

	// The settings (see their setters).
	shared, anyName, stamp, listNodes, reuse bool
	interval                                 time.Duration

	// The registry's state, read when a call answers.
	failErr   error
	failPanic any

	// The faults, each read when a call starts.
	get      Fault
	getFor   map[string]Fault
	list     *Fault // nil: get
	watch    WatchFault
	watchFor map[string]WatchFault
	// release is closed by ReleaseHangs; nil until a call hangs.
	release chan struct{}

	// The gates installed, newest last.
	gates, listGates, watchGates []*Gate

	// The calls.
	calls      map[string]*callStats
	total      int
	starts     []time.Time // of GetService calls, in order
	inflight   map[string]int
	lists      int
	watchCalls []WatchCall

	// The streams.
	streams  []*Stream            // every stream handed out, in order
	watchers map[*Stream]struct{} // the streams that receive Register's events
	received int                  // events taken from the streams' queues
	open     int                  // streams not yet stopped
	// reading is the number of whole-registry streams read and not yet
	// stopped, and maxOpen the most of them at once: the cache reads one
	// such stream at a time.
	reading, maxOpen int

	violations  int
	firstFaults []string // the first few violations, for the failure message
}

var _ registry.Registry = (*Registry)(nil)

// New returns an empty registry: no service, no fault, no gate; answers
// are fresh copies, ListServices lists names only, and no call bound is
// checked but that calls for one service never overlap.
func New() *Registry {
	return &Registry{
		services: map[string][]*registry.Service{},
		getFor:   map[string]Fault{},
		watchFor: map[string]WatchFault{},
		calls:    map[string]*callStats{},
		inflight: map[string]int{},
		watchers: map[*Stream]struct{}{},
	}
}

// Wrap returns a fake in front of inner: GetService, ListServices,
// Register, Deregister, Init, Options and Watch go to inner behind the
// fake's faults, gates and records, and Held reads inner's GetService.
// What acts on the fake's own data (Set, SetNodes, Delete, Edit, Emit,
// Stream.Send and Offer) panics, and the settings of its answers
// (SetShared, SetAnyName, SetStamp, SetListNodes) do nothing.
func Wrap(inner registry.Registry) *Registry {
	r := New()
	r.inner = inner
	return r
}

// own panics if r wraps another registry: op acts on r's own data.
func (r *Registry) own(op string) {
	if r.inner != nil {
		panic("fakereg: " + op + " on a registry made by Wrap")
	}
}

// SetShared makes answers the stored structs themselves, uncopied, and
// makes Set from then on store the very slice it is given: a plugin that
// hands out memory it keeps and may change later.
func (r *Registry) SetShared(on bool) {
	r.mu.Lock()
	r.shared = on
	r.mu.Unlock()
}

// SetAnyName makes a service with nothing stored answer with one version
// "1" of one node "n" (see Service), as a gateway sees every name exist.
func (r *Registry) SetAnyName(on bool) {
	r.mu.Lock()
	r.anyName = on
	r.mu.Unlock()
}

// SetStamp makes each answer's node addresses the time of the answer, in
// Unix nanoseconds, so that a test can tell how old served data is.
func (r *Registry) SetStamp(on bool) {
	r.mu.Lock()
	r.stamp = on
	r.mu.Unlock()
}

// SetListNodes makes ListServices list every version with its nodes, as
// go-micro's etcd plugin and memory registry do; otherwise it lists names
// and versions only, as mdns does.
func (r *Registry) SetListNodes(on bool) {
	r.mu.Lock()
	r.listNodes = on
	r.mu.Unlock()
}

// SetReuseEvents makes the streams opened from now on overwrite the event
// they returned last when they are asked for the next (see Scramble), as a
// watcher that decodes each event into the same buffers.
func (r *Registry) SetReuseEvents(on bool) {
	r.mu.Lock()
	r.reuse = on
	r.mu.Unlock()
}

// Set stores svcs as name's answer, replacing what it held, and sends no
// event: a change that a broken or blocked stream never tells. The
// registry keeps a deep copy (svcs itself with SetShared). With no svcs,
// name answers an empty list and no error; Delete makes it not found.
func (r *Registry) Set(name string, svcs ...*registry.Service) {
	r.own("Set")
	if svcs == nil {
		svcs = []*registry.Service{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shared {
		r.services[name] = svcs
		return
	}
	r.services[name] = copyAll(svcs)
}

// SetNodes stores one version "1" of name with a node of each id (see
// Service), silently as Set does; with no ids it deletes name.
func (r *Registry) SetNodes(name string, ids ...string) {
	if len(ids) == 0 {
		r.Delete(name)
		return
	}
	r.Set(name, Service(name, "1", ids...))
}

// Delete removes name silently: it is not found from now on.
func (r *Registry) Delete(name string) {
	r.own("Delete")
	r.mu.Lock()
	delete(r.services, name)
	r.mu.Unlock()
}

// Edit calls edit with the structs the registry holds for name, under its
// lock, to change them in place: a registry that changes what it holds,
// and with SetShared what it handed out.
func (r *Registry) Edit(name string, edit func(svcs []*registry.Service)) {
	r.own("Edit")
	r.mu.Lock()
	defer r.mu.Unlock()
	edit(r.services[name])
}

// Held returns a deep copy of what the registry holds for name, nil for
// nothing, without a call: no count, no fault, no gate.
func (r *Registry) Held(name string) []*registry.Service {
	if r.inner != nil {
		svcs, _ := r.inner.GetService(name)
		return copyAll(svcs)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.services[name]; ok {
		return copyAll(cur)
	}
	return nil
}

// Register adds s's nodes to its version, replacing the nodes of the same
// Id, and sends a "create" event for a version new to the registry,
// "update" otherwise. The event names s's nodes only, as go-micro's
// registries do.
func (r *Registry) Register(s *registry.Service, opts ...registry.RegisterOption) error {
	if r.inner != nil {
		return r.inner.Register(s, opts...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.services[s.Name]
	action := "create"
	next := make([]*registry.Service, 0, len(cur)+1)
	found := false
	for _, v := range cur {
		if v.Version != s.Version {
			next = append(next, v)
			continue
		}
		found, action = true, "update"
		merged := Copy(v)
		index := make(map[string]int, len(merged.Nodes))
		for i, o := range merged.Nodes {
			if o != nil {
				index[o.Id] = i
			}
		}
		for _, n := range s.Nodes {
			cn := copyNode(n)
			if n == nil {
				merged.Nodes = append(merged.Nodes, nil)
				continue
			}
			if i, ok := index[n.Id]; ok {
				merged.Nodes[i] = cn
				continue
			}
			index[n.Id] = len(merged.Nodes)
			merged.Nodes = append(merged.Nodes, cn)
		}
		next = append(next, merged)
	}
	if !found {
		next = append(next, Copy(s))
	}
	r.services[s.Name] = next
	r.emitLocked(&registry.Result{Action: action, Service: s}, true)
	return nil
}

// Deregister removes s's nodes from its version, drops a version left
// without nodes and a service left without versions, and sends a "delete"
// event naming s's nodes.
func (r *Registry) Deregister(s *registry.Service, opts ...registry.DeregisterOption) error {
	if r.inner != nil {
		return r.inner.Deregister(s, opts...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	gone := make(map[string]bool, len(s.Nodes))
	for _, n := range s.Nodes {
		if n != nil {
			gone[n.Id] = true
		}
	}
	var next []*registry.Service
	for _, v := range r.services[s.Name] {
		if v.Version != s.Version {
			next = append(next, v)
			continue
		}
		trimmed := Copy(v)
		kept := trimmed.Nodes[:0]
		for _, n := range trimmed.Nodes {
			if n == nil || !gone[n.Id] {
				kept = append(kept, n)
			}
		}
		trimmed.Nodes = kept
		if len(trimmed.Nodes) > 0 {
			next = append(next, trimmed)
		}
	}
	if len(next) == 0 {
		delete(r.services, s.Name)
	} else {
		r.services[s.Name] = next
	}
	r.emitLocked(&registry.Result{Action: "delete", Service: s}, true)
	return nil
}

// Emit queues res, as it is, on every open stream of its service, as
// Register does with its events: an event that no change made, such as one
// of an action the cache does not know.
func (r *Registry) Emit(res *registry.Result) {
	r.own("Emit")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emitLocked(res, false)
}

// emitLocked queues res on every stream that watches its service; with
// copied, each stream gets a copy of its own.
func (r *Registry) emitLocked(res *registry.Result, copied bool) {
	for s := range r.watchers {
		if s.service != "" && (res.Service == nil || s.service != res.Service.Name) {
			continue
		}
		ev := res
		if copied {
			ev = &registry.Result{Action: res.Action, Service: Copy(res.Service)}
		}
		s.push(ev, nil)
	}
}

// Init does nothing, or inits the registry wrapped.
func (r *Registry) Init(opts ...registry.Option) error {
	if r.inner != nil {
		return r.inner.Init(opts...)
	}
	return nil
}

// Options returns no options, or those of the registry wrapped.
func (r *Registry) Options() registry.Options {
	if r.inner != nil {
		return r.inner.Options()
	}
	return registry.Options{}
}

// String names the fake, and the registry it wraps.
func (r *Registry) String() string {
	if r.inner != nil {
		return "fakereg(" + r.inner.String() + ")"
	}
	return "fakereg"
}

// Watched returns the services that the streams receiving the registry's
// events watch, sorted, "" standing for a stream of every service: the
// streams neither stopped nor ended by Cut or Break.
func (r *Registry) Watched() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := []string{}
	for s := range r.watchers {
		names = append(names, s.service)
	}
	sort.Strings(names)
	return names
}

// WatcherOf returns a stream of service name ("" for a stream of every
// service) that receives the registry's events, or nil.
func (r *Registry) WatcherOf(name string) *Stream {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range r.watchers {
		if s.service == name {
			return s
		}
	}
	return nil
}
