package fakereg

import (
	"go-micro.dev/v4/registry"
)

// Service returns version of name with a node of each id: node id has the
// address id+":8080" and the metadata {"id": id}, and the service the
// metadata {"v": version}.
func Service(name, version string, ids ...string) *registry.Service {
	s := &registry.Service{Name: name, Version: version, Metadata: map[string]string{"v": version}}
	for _, id := range ids {
		s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: id + ":8080", Metadata: map[string]string{"id": id}})
	}
	return s
}

// Copy deep-copies s: its metadata, nodes, endpoints and their Values.
// Nil entries stay nil, and so do nil maps and slices, so that a copy is
// what a registry that decodes its answer anew hands out. A Value tree
// with a cycle never ends: store such a service with SetShared.
func Copy(s *registry.Service) *registry.Service {
	if s == nil {
		return nil
	}
	c := *s
	c.Metadata = copyMap(s.Metadata)
	c.Endpoints = nil
	for _, e := range s.Endpoints {
		if e == nil {
			c.Endpoints = append(c.Endpoints, nil)
			continue
		}
		ce := *e
		ce.Request = copyValue(e.Request)
		ce.Response = copyValue(e.Response)
		ce.Metadata = copyMap(e.Metadata)
		c.Endpoints = append(c.Endpoints, &ce)
	}
	c.Nodes = nil
	for _, n := range s.Nodes {
		c.Nodes = append(c.Nodes, copyNode(n))
	}
	return &c
}

// copyAll copies each service of svcs; a nil list stays nil, an empty one
// empty.
func copyAll(svcs []*registry.Service) []*registry.Service {
	if svcs == nil {
		return nil
	}
	out := make([]*registry.Service, len(svcs))
	for i, s := range svcs {
		out[i] = Copy(s)
	}
	return out
}

func copyNode(n *registry.Node) *registry.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Metadata = copyMap(n.Metadata)
	return &c
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func copyValue(v *registry.Value) *registry.Value {
	if v == nil {
		return nil
	}
	c := *v
	c.Values = nil
	for _, sub := range v.Values {
		c.Values = append(c.Values, copyValue(sub))
	}
	return &c
}

// Scramble overwrites everything reachable from s in place, as a registry
// that reuses the memory of an event it handed out: versions, ids and
// names get "-scrambled" or "scrambled", addresses "scrambled:0", every
// metadata map the entry "scrambled": "1", and the first node is replaced
// by node "zz".
func Scramble(s *registry.Service) {
	if s == nil {
		return
	}
	s.Version += "-scrambled"
	scrambleMap(s.Metadata)
	for _, n := range s.Nodes {
		if n == nil {
			continue
		}
		n.Id += "-scrambled"
		n.Address = "scrambled:0"
		scrambleMap(n.Metadata)
	}
	for _, e := range s.Endpoints {
		if e == nil {
			continue
		}
		e.Name = "scrambled"
		for k := range e.Metadata {
			e.Metadata[k] = "scrambled"
		}
		scrambleValue(e.Request)
		scrambleValue(e.Response)
	}
	if len(s.Nodes) > 0 {
		s.Nodes[0] = &registry.Node{Id: "zz", Address: "zz:0"}
	}
}

func scrambleMap(m map[string]string) {
	for k := range m {
		m[k] = "scrambled"
	}
	if m != nil {
		m["scrambled"] = "1"
	}
}

func scrambleValue(v *registry.Value) {
	if v == nil {
		return
	}
	v.Name, v.Type = "scrambled", "scrambled"
	for _, sub := range v.Values {
		scrambleValue(sub)
	}
}
