package cache

import "go-micro.dev/v4/registry"

// cloneIn deep-copies services arriving from the registry or the watcher,
// so that the cache never aliases memory that the registry may still change.
// Nil services and nil nodes are dropped. This is the only place data is
// copied on the way in; the result is then treated as immutable.
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
		Metadata: cloneMap(s.Metadata),
	}
	if len(s.Endpoints) > 0 {
		c.Endpoints = make([]*registry.Endpoint, 0, len(s.Endpoints))
		for _, e := range s.Endpoints {
			if e == nil {
				continue
			}
			c.Endpoints = append(c.Endpoints, &registry.Endpoint{
				Name:     e.Name,
				Request:  cloneValue(e.Request),
				Response: cloneValue(e.Response),
				Metadata: cloneMap(e.Metadata),
			})
		}
	}
	c.Nodes = cloneNodes(s.Nodes)
	return c
}

func cloneNodes(in []*registry.Node) []*registry.Node {
	if len(in) == 0 {
		return nil
	}
	out := make([]*registry.Node, 0, len(in))
	for _, n := range in {
		if n == nil {
			continue
		}
		out = append(out, &registry.Node{Id: n.Id, Address: n.Address, Metadata: cloneMap(n.Metadata)})
	}
	return out
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
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
// The structs are allocated in a few bulk slices rather than one allocation
// per node, so the number of allocations does not grow with the node count.
func copyOut(in []*registry.Service) []*registry.Service {
	var nodes, endpoints int
	for _, s := range in {
		nodes += len(s.Nodes)
		endpoints += len(s.Endpoints)
	}
	svcs := make([]registry.Service, len(in))
	ptrs := make([]*registry.Service, len(in))
	var (
		nodeBuf []registry.Node
		nodePtr []*registry.Node
		epBuf   []registry.Endpoint
		epPtr   []*registry.Endpoint
	)
	if nodes > 0 {
		nodeBuf = make([]registry.Node, nodes)
		nodePtr = make([]*registry.Node, nodes)
	}
	if endpoints > 0 {
		epBuf = make([]registry.Endpoint, endpoints)
		epPtr = make([]*registry.Endpoint, endpoints)
	}
	for i, s := range in {
		svcs[i] = *s
		ptrs[i] = &svcs[i]
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
	return ptrs
}
