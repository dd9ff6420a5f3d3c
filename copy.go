package cache

import (
	"errors"
	"fmt"
	"maps"

	"go-micro.dev/v4/registry"
)

// ErrAnswerTooLarge is matched (with errors.Is) by the error for a registry
// answer, or a watch event, that the cache refuses to copy: one version of
// a service whose endpoint Values nest deeper than 32 levels or form a
// cycle, or which holds more than 65 536 Value nodes, or more than about a
// million nodes, endpoints, metadata entries and Values in all. A Value
// reached by several paths counts once per path, because whoever walks the
// tree (the snapshot file's encoder, a debug print) visits it once per
// path. go-micro's servers describe endpoints three levels deep, so no real
// registration comes near these bounds; they keep a broken or hostile
// registry from exhausting the stack or the memory of every client.
var ErrAnswerTooLarge = errors.New("registry answer too large to copy")

const (
	// maxValueDepth bounds how deep an endpoint's Value tree may nest,
	// counting its Request or Response as level 1.
	maxValueDepth = 32
	// maxValueNodes bounds the Value nodes of one version, once per path.
	maxValueNodes = 1 << 16
	// maxCopyItems bounds the work of copying one version: its nodes,
	// endpoints, metadata entries, Value nodes and Values slice entries.
	maxCopyItems = 1 << 20
	// memoValues is the number of Value nodes per version above which
	// the copy remembers each Value it has copied, so that one reached by
	// several paths is copied once. Below it, a shared Value is copied
	// once per path, into one allocation, which costs at most a few
	// kilobytes and spares the common case a map.
	memoValues = 256
)

// tooLargeError names the version of the service that could not be copied
// and why.
type tooLargeError struct {
	service, version string
	reason           string
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("regcache: service %q version %q: %v: %s", e.service, e.version, ErrAnswerTooLarge, e.reason)
}

func (e *tooLargeError) Unwrap() error { return ErrAnswerTooLarge }

// cloneIn deep-copies services arriving from the registry, so that the
// cache never aliases memory that the registry may still change. Nil
// services, nil nodes and nil endpoints are dropped. Together with
// cloneEvent, this is the only place data is copied on the way in; the
// result is then treated as immutable. A version that cannot be copied
// (see ErrAnswerTooLarge) fails the whole answer: serving part of one would
// hide the rest.
func cloneIn(in []*registry.Service) ([]*registry.Service, error) {
	n := countNonNil(in)
	if n == 0 {
		return []*registry.Service{}, nil
	}
	svcs, out := structs[registry.Service](n)
	i := 0
	for _, s := range in {
		if s == nil {
			continue
		}
		if err := cloneInto(&svcs[i], s); err != nil {
			return nil, err
		}
		out[i] = &svcs[i]
		i++
	}
	return out, nil
}

// cloneService deep-copies one service; see cloneIn.
func cloneService(s *registry.Service) (*registry.Service, error) {
	c := new(registry.Service)
	if err := cloneInto(c, s); err != nil {
		return nil, err
	}
	return c, nil
}

// cloneEvent copies what applying a watch event keeps, and no more: a
// create or update is copied whole, a delete needs only the version and the
// node Ids, and any other action is never applied (it invalidates the
// entry), so only the name and version are kept.
func cloneEvent(res *registry.Result) (*registry.Result, error) {
	s := res.Service
	switch res.Action {
	case "create", "update":
		c, err := cloneService(s)
		if err != nil {
			return nil, err
		}
		return &registry.Result{Action: res.Action, Service: c}, nil
	case "delete":
		c := &registry.Service{Name: s.Name, Version: s.Version}
		if n := countNonNil(s.Nodes); n > 0 {
			buf, ptrs := structs[registry.Node](n)
			i := 0
			for _, node := range s.Nodes {
				if node != nil {
					buf[i].Id = node.Id
					ptrs[i] = &buf[i]
					i++
				}
			}
			c.Nodes = ptrs
		}
		return &registry.Result{Action: res.Action, Service: c}, nil
	}
	return &registry.Result{Action: res.Action, Service: &registry.Service{Name: s.Name, Version: s.Version}}, nil
}

// cloneInto copies s into c. It first walks s to size the copy, so that
// everything is refused before any of it is copied, and so that the nodes,
// the endpoints and the Values each take one allocation.
func cloneInto(c *registry.Service, s *registry.Service) error {
	var m measure
	if !m.service(s) {
		return &tooLargeError{service: s.Name, version: s.Version, reason: m.reason}
	}
	*c = registry.Service{Name: s.Name, Version: s.Version, Metadata: maps.Clone(s.Metadata)}
	c.Nodes = cloneNodes(s.Nodes, m.nodes)
	if m.endpoints > 0 {
		var vc valueCopier
		if m.values <= memoValues {
			vc.vals = make([]registry.Value, m.values)
			vc.slots = make([]*registry.Value, m.slots)
		} else {
			vc.seen = make(map[*registry.Value]*registry.Value)
		}
		buf, ptrs := structs[registry.Endpoint](m.endpoints)
		var prevIn, prevCopy map[string]string
		i := 0
		for _, e := range s.Endpoints {
			if e == nil {
				continue
			}
			// Endpoints of one service nearly always carry the same
			// metadata; share one copy, as cloneNodes does.
			md := prevCopy
			if i == 0 || !sameMap(e.Metadata, prevIn) {
				md = maps.Clone(e.Metadata)
				prevCopy = md
			}
			prevIn = e.Metadata
			buf[i] = registry.Endpoint{
				Name:     e.Name,
				Request:  vc.value(e.Request),
				Response: vc.value(e.Response),
				Metadata: md,
			}
			ptrs[i] = &buf[i]
			i++
		}
		c.Endpoints = ptrs
	}
	return nil
}

// cloneNodes copies the n non-nil nodes of in into one backing array.
//
// The nodes of one service nearly always carry identical metadata (the
// broker, codec, registry, server and transport that every instance of the
// binary shares), and those maps are most of the memory a cached service
// holds. Metadata maps are read-only once cached, so a node whose metadata
// equals the previous node's shares that node's copy: 100 identical nodes
// hold one map instead of 100. The copy is still the cache's own; it never
// aliases the registry's map.
func cloneNodes(in []*registry.Node, n int) []*registry.Node {
	if n == 0 {
		return nil
	}
	buf, out := structs[registry.Node](n)
	var prevIn, prevCopy map[string]string
	i := 0
	for _, node := range in {
		if node == nil {
			continue
		}
		md := prevCopy
		if i == 0 || !sameMap(node.Metadata, prevIn) {
			md = maps.Clone(node.Metadata)
			prevCopy = md
		}
		prevIn = node.Metadata
		buf[i] = registry.Node{Id: node.Id, Address: node.Address, Metadata: md}
		out[i] = &buf[i]
		i++
	}
	return out
}

func countNonNil[T any](in []*T) int {
	n := 0
	for _, p := range in {
		if p != nil {
			n++
		}
	}
	return n
}

// sameMap reports whether a and b hold the same entries; a nil map and an
// empty one differ, so that sharing never turns one into the other.
func sameMap(a, b map[string]string) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for k, va := range a {
		if vb, ok := b[k]; !ok || va != vb {
			return false
		}
	}
	return true
}

// measure is what copying one version will cost, found by walking it
// before copying anything. The walk stops at the first bound exceeded, so
// it costs at most maxCopyItems steps whatever the input: a cycle, or a
// tree that doubles at every level through shared Values, is refused
// after a bounded walk.
type measure struct {
	nodes, endpoints int // non-nil ones
	values, slots    int // Value nodes and Values entries, once per path
	items            int // everything, against maxCopyItems
	path             [maxValueDepth + 1]*registry.Value
	reason           string // why the copy is refused
}

func (m *measure) service(s *registry.Service) bool {
	m.items = len(s.Metadata) + len(s.Nodes) + len(s.Endpoints)
	for _, n := range s.Nodes {
		if n != nil {
			m.nodes++
			m.items += len(n.Metadata)
		}
	}
	if !m.check() {
		return false
	}
	for _, e := range s.Endpoints {
		if e == nil {
			continue
		}
		m.endpoints++
		m.items += len(e.Metadata)
		if !m.value(e.Request, 1) {
			m.reason = fmt.Sprintf("endpoint %q request: %s", e.Name, m.reason)
			return false
		}
		if !m.value(e.Response, 1) {
			m.reason = fmt.Sprintf("endpoint %q response: %s", e.Name, m.reason)
			return false
		}
	}
	return m.check()
}

func (m *measure) check() bool {
	if m.items > maxCopyItems {
		m.reason = fmt.Sprintf("more than %d nodes, endpoints, metadata entries and Values", maxCopyItems)
		return false
	}
	return true
}

// value walks v, at depth (1 for a Request or Response), counting each
// node once per path. Its recursion is bounded by maxValueDepth.
func (m *measure) value(v *registry.Value, depth int) bool {
	if v == nil {
		return true
	}
	if depth > maxValueDepth {
		m.reason = fmt.Sprintf("Values nested deeper than %d levels", maxValueDepth)
		if m.cyclic() {
			m.reason = "Values form a cycle"
		}
		return false
	}
	m.path[depth] = v
	m.values++
	m.slots += len(v.Values)
	m.items += 1 + len(v.Values)
	if m.values > maxValueNodes {
		m.reason = fmt.Sprintf("more than %d Value nodes", maxValueNodes)
		return false
	}
	if !m.check() {
		return false
	}
	for _, sub := range v.Values {
		if !m.value(sub, depth+1) {
			return false
		}
	}
	return true
}

// cyclic reports whether the path the walk gave up on visits a Value
// twice.
func (m *measure) cyclic() bool {
	for i := 1; i <= maxValueDepth; i++ {
		for j := i + 1; j <= maxValueDepth; j++ {
			if m.path[i] == m.path[j] {
				return true
			}
		}
	}
	return false
}

// valueCopier copies the Value trees of one version, after measure has
// accepted them. With vals and slots it copies each path into those
// buffers, which measure sized exactly; with seen it copies each distinct
// Value once, so that shared ones stay shared.
type valueCopier struct {
	vals  []registry.Value
	slots []*registry.Value
	seen  map[*registry.Value]*registry.Value
}

func (vc *valueCopier) value(v *registry.Value) *registry.Value {
	if v == nil {
		return nil
	}
	var c *registry.Value
	if vc.seen != nil {
		if done, ok := vc.seen[v]; ok {
			return done
		}
		c = &registry.Value{Name: v.Name, Type: v.Type}
		vc.seen[v] = c
	} else {
		c = &vc.vals[0]
		vc.vals = vc.vals[1:]
		*c = registry.Value{Name: v.Name, Type: v.Type}
	}
	if n := len(v.Values); n > 0 {
		var kids []*registry.Value
		if vc.seen != nil {
			kids = make([]*registry.Value, n)
		} else {
			// Capped, so that an append by a reader reallocates rather
			// than overwrite a sibling's entries.
			kids = vc.slots[:n:n]
			vc.slots = vc.slots[n:]
		}
		for i, sub := range v.Values {
			kids[i] = vc.value(sub)
		}
		c.Values = kids
	}
	return c
}

// copyOut gives a GetService caller its own Service, Node and Endpoint
// structs and slices, so it may change or append to them freely. Metadata
// maps and endpoint Values stay shared with the cache and are read-only, as
// in go-micro's cache.
//
// The structs are allocated in bulk rather than one allocation per node, so
// the number of allocations does not grow with the node count: at most six,
// and four for the usual single version with a few endpoints.
func copyOut(in []*registry.Service) []*registry.Service {
	var nodes, endpoints int
	for _, s := range in {
		nodes += len(s.Nodes)
		endpoints += len(s.Endpoints)
	}
	svcs, out := structs[registry.Service](len(in))
	nodeBuf, nodePtr := structs[registry.Node](nodes)
	epBuf, epPtr := structs[registry.Endpoint](endpoints)
	for i, s := range in {
		svcs[i] = *s
		out[i] = &svcs[i]
		if n := len(s.Nodes); n > 0 {
			// Full slice expressions cap each slice, so that a caller's
			// append reallocates instead of overwriting the next service.
			dst := nodePtr[:n:n]
			for j, node := range s.Nodes {
				nodeBuf[j] = *node
				dst[j] = &nodeBuf[j]
			}
			svcs[i].Nodes = dst
			nodeBuf, nodePtr = nodeBuf[n:], nodePtr[n:]
		}
		if n := len(s.Endpoints); n > 0 {
			dst := epPtr[:n:n]
			for j, ep := range s.Endpoints {
				epBuf[j] = *ep
				dst[j] = &epBuf[j]
			}
			svcs[i].Endpoints = dst
			epBuf, epPtr = epBuf[n:], epPtr[n:]
		}
	}
	return out
}

// structs returns n zeroed Ts and n pointers to point at them, both capped
// at n. Up to four, which covers most versions per service and endpoints
// per version, they share one allocation of exactly that size; beyond that
// they take two. Rounding larger counts up to a shared block would save an
// allocation but cost bytes, and bytes are what drive the garbage collector
// on this path.
func structs[T any](n int) ([]T, []*T) {
	switch n {
	case 0:
		return nil, nil
	case 1:
		b := new(struct {
			v [1]T
			p [1]*T
		})
		return b.v[:], b.p[:]
	case 2:
		b := new(struct {
			v [2]T
			p [2]*T
		})
		return b.v[:], b.p[:]
	case 3:
		b := new(struct {
			v [3]T
			p [3]*T
		})
		return b.v[:], b.p[:]
	case 4:
		b := new(struct {
			v [4]T
			p [4]*T
		})
		return b.v[:], b.p[:]
	}
	return make([]T, n), make([]*T, n)
}
