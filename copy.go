package cache

import (
	"maps"

	"go-micro.dev/v4/registry"
)

// cloneIn deep-copies services arriving from the registry or the watcher,
// so that the cache never aliases memory that the registry may still change.
// Nil services, nil nodes and nil endpoints are dropped. This is the only
// place data is copied on the way in; the result is then treated as
// immutable.
func cloneIn(in []*registry.Service) []*registry.Service {
	out := make([]*registry.Service, 0, len(in))
	for _, s := range in {
		if s == nil {
			continue
		}
		out = append(out, cloneService(s))
	}
	return out
}

func cloneService(s *registry.Service) *registry.Service {
	c := &registry.Service{
		Name:     s.Name,
		Version:  s.Version,
		Metadata: maps.Clone(s.Metadata),
	}
	if n := countNonNil(s.Endpoints); n > 0 {
		buf, ptrs := make([]registry.Endpoint, n), make([]*registry.Endpoint, n)
		i := 0
		for _, e := range s.Endpoints {
			if e == nil {
				continue
			}
			buf[i] = registry.Endpoint{
				Name:     e.Name,
				Request:  cloneValue(e.Request),
				Response: cloneValue(e.Response),
				Metadata: maps.Clone(e.Metadata),
			}
			ptrs[i] = &buf[i]
			i++
		}
		c.Endpoints = ptrs
	}
	c.Nodes = cloneNodes(s.Nodes)
	return c
}

// cloneNodes copies nodes into one backing array.
//
// The nodes of one service nearly always carry identical metadata (the
// broker, codec, registry, server and transport that every instance of the
// binary shares), and those maps are most of the memory a cached service
// holds. Metadata maps are read-only once cached, so a node whose metadata
// equals the previous node's shares that node's copy: 100 identical nodes
// hold one map instead of 100. The copy is still the cache's own; it never
// aliases the registry's map.
func cloneNodes(in []*registry.Node) []*registry.Node {
	n := countNonNil(in)
	if n == 0 {
		return nil
	}
	buf, out := make([]registry.Node, n), make([]*registry.Node, n)
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

func cloneValue(v *registry.Value) *registry.Value {
	if v == nil {
		return nil
	}
	c := &registry.Value{Name: v.Name, Type: v.Type}
	if len(v.Values) > 0 {
		c.Values = make([]*registry.Value, len(v.Values))
		for i, sub := range v.Values {
			c.Values[i] = cloneValue(sub)
		}
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
