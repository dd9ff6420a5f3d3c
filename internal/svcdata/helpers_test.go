package svcdata

import "go-micro.dev/v4/registry"

// svc is one version of name with nodes ids, each with an address and
// metadata of its own, as a registry answers it.
func svc(name, version string, ids ...string) *registry.Service {
	s := &registry.Service{Name: name, Version: version, Metadata: map[string]string{"v": version}}
	for _, id := range ids {
		s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: id + ":8080", Metadata: map[string]string{"id": id}})
	}
	return s
}

// nodeIDs lists the node ids of every version, in order.
func nodeIDs(svcs []*registry.Service) []string {
	var ids []string
	for _, s := range svcs {
		for _, n := range s.Nodes {
			ids = append(ids, n.Id)
		}
	}
	return ids
}
