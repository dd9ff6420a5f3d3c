package svcdata

import (
	"go-micro.dev/v4/registry"
)

// CopyOut gives a GetService caller its own Service, Node and Endpoint
// structs and slices, so it may change or append to them freely. Metadata
// maps and endpoint Values stay shared with the cache and are read-only, as
// in go-micro's cache.
//
// What a copy costs is the memory it allocates far more than the bytes it
// moves, so the structs of each kind take one allocation (see structs),
// rather than one each: up to four, with the slice of pointers to them.
func CopyOut(in []*registry.Service) []*registry.Service {
	var nodes, endpoints int
	for _, s := range in {
		nodes += len(s.Nodes)
		endpoints += len(s.Endpoints)
	}
	svcs, out := structs[registry.Service](len(in))
	epBuf, epPtr := structs[registry.Endpoint](endpoints)
	nodeBuf, nodePtr := structs[registry.Node](nodes)
	// The structs are copied field by field rather than whole: while a
	// collection runs, a struct copy takes a bulk write barrier call per
	// struct, which costs more than the fields' inline barriers. The
	// conversions below keep this from missing a field.
	for i, s := range in {
		c := &svcs[i]
		c.Name, c.Version, c.Metadata = s.Name, s.Version, s.Metadata
		// Empty slices stay empty, and nil ones nil.
		c.Endpoints, c.Nodes = s.Endpoints[:0:0], s.Nodes[:0:0]
		if n := len(s.Nodes); n > 0 {
			// Full slice expressions cap each slice, so that a caller's
			// append reallocates instead of overwriting the next service.
			dst := nodePtr[:n:n]
			for j, node := range s.Nodes {
				d := &nodeBuf[j]
				d.Metadata, d.Id, d.Address = node.Metadata, node.Id, node.Address
				dst[j] = d
			}
			c.Nodes = dst
			nodeBuf, nodePtr = nodeBuf[n:], nodePtr[n:]
		}
		if n := len(s.Endpoints); n > 0 {
			dst := epPtr[:n:n]
			for j, ep := range s.Endpoints {
				d := &epBuf[j]
				d.Request, d.Response, d.Metadata, d.Name = ep.Request, ep.Response, ep.Metadata, ep.Name
				dst[j] = d
			}
			c.Endpoints = dst
			epBuf, epPtr = epBuf[n:], epPtr[n:]
		}
		out[i] = c
	}
	return out
}

// The fields that CopyOut copies one by one. The conversions fail to
// compile if go-micro adds, removes or reorders a field, so that a copy
// never drops one.
var (
	_ = registry.Service(struct {
		Name      string
		Version   string
		Metadata  map[string]string
		Endpoints []*registry.Endpoint
		Nodes     []*registry.Node
	}{})
	_ = registry.Endpoint(struct {
		Request  *registry.Value
		Response *registry.Value
		Metadata map[string]string
		Name     string
	}{})
	_ = registry.Node(struct {
		Metadata map[string]string
		Id       string
		Address  string
	}{})
)

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
