package cache

import "go-micro.dev/v4/registry"

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
