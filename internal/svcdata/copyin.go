package svcdata

import (
	"go-micro.dev/v4/registry"
)

// Data is copied once on the way in, from a refresh or an event, so that the
// cache never aliases memory that the registry or the watcher may still
// change; the copy is then immutable. Immutability is what makes the copy
// cheap: a part of an answer equal to what the cache already holds (most of
// every TTL refresh, and the metadata and endpoints of a node re-announced
// by an event) is not copied again but shared with the data held, and the
// parts copied take one allocation per kind (nodes, endpoints, Values)
// rather than one per object. Every copy is first measured against the
// bounds in limits.go.

// CloneIn copies services arriving from the registry. Nil services, nil
// nodes and nil endpoints are dropped. A version that cannot be copied (see
// ErrAnswerTooLarge) fails the whole answer: serving part of one would hide
// the rest.
func CloneIn(in []*registry.Service) ([]*registry.Service, error) {
	return CloneInLike(in, nil)
}

// CloneInLike is CloneIn for a service whose data held now is cur (nil
// for none): each version shares what equals cur's version of it.
func CloneInLike(in, cur []*registry.Service) ([]*registry.Service, error) {
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
		if err := cloneInto(&svcs[i], s, versionOf(cur, s.Version)); err != nil {
			return nil, err
		}
		out[i] = &svcs[i]
		i++
	}
	return out, nil
}

// cloneService copies one service; see CloneIn.
func cloneService(s *registry.Service) (*registry.Service, error) {
	c := new(registry.Service)
	if err := cloneInto(c, s, nil); err != nil {
		return nil, err
	}
	return c, nil
}

// cloneEvent copies what applying a watch event keeps, and no more: a
// create or update is copied whole, sharing what equals the version held
// in cur; a delete needs only the version and the node Ids; and any other
// action is never applied (it invalidates the entry), so only the name and
// version are kept.
func cloneEvent(res *registry.Result, cur []*registry.Service) (*registry.Result, error) {
	s := res.Service
	// The result and its service take one allocation.
	b := &struct {
		res registry.Result
		svc registry.Service
	}{svc: registry.Service{Name: s.Name, Version: s.Version}}
	c := &b.svc
	switch res.Action {
	case "create", "update":
		if err := cloneInto(c, s, versionOf(cur, s.Version)); err != nil {
			return nil, err
		}
	case "delete":
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
	}
	b.res = registry.Result{Action: res.Action, Service: c}
	return &b.res, nil
}

func versionOf(svcs []*registry.Service, version string) *registry.Service {
	for _, s := range svcs {
		if s.Version == version {
			return s
		}
	}
	return nil
}

// cloneInto copies s into c, sharing what equals like (nil for nothing).
// It first measures s, so that a copy is refused before any of it is
// made, and so that the nodes, the endpoints and the Values each take one
// allocation.
func cloneInto(c *registry.Service, s, like *registry.Service) error {
	var m measure
	if !m.service(s) {
		return &tooLargeError{service: s.Name, version: s.Version, reason: m.reason}
	}
	if like == nil {
		like = &registry.Service{}
	}
	*c = registry.Service{Name: s.Name, Version: s.Version, Metadata: like.Metadata}
	if !sameMap(s.Metadata, like.Metadata) {
		c.Metadata = copyMap(s.Metadata)
	}
	c.Nodes = cloneNodes(s.Nodes, m.nodes, like.Nodes)
	if m.endpoints == 0 {
		return nil
	}
	if sameEndpoints(s.Endpoints, m.endpoints, like.Endpoints) {
		c.Endpoints = like.Endpoints
		return nil
	}
	var vc valueCopier
	if m.values <= memoValues {
		vc.vals = make([]registry.Value, m.values)
		vc.slots = make([]*registry.Value, m.slots)
	} else {
		vc.seen = make(map[*registry.Value]*registry.Value)
	}
	buf, ptrs := structs[registry.Endpoint](m.endpoints)
	md := mapSharer{}
	if len(like.Endpoints) > 0 {
		md.startWith(like.Endpoints[0].Metadata)
	}
	i := 0
	for _, e := range s.Endpoints {
		if e == nil {
			continue
		}
		buf[i] = registry.Endpoint{
			Name:     e.Name,
			Request:  vc.value(e.Request),
			Response: vc.value(e.Response),
			Metadata: md.clone(e.Metadata),
		}
		ptrs[i] = &buf[i]
		i++
	}
	c.Endpoints = ptrs
	return nil
}

// cloneNodes copies the n non-nil nodes of in into one backing array, or
// returns like itself if they equal its nodes.
//
// The nodes of one service nearly always carry identical metadata (the
// broker, codec, registry, server and transport that every instance of the
// binary shares), and those maps are most of the memory a cached service
// holds. Metadata maps are read-only once cached, so a node whose metadata
// equals the previous node's, or like's, shares that copy: 100 identical
// nodes hold one map instead of 100. The copy is still the cache's own; it
// never aliases the registry's map.
func cloneNodes(in []*registry.Node, n int, like []*registry.Node) []*registry.Node {
	if n == 0 {
		return nil
	}
	if sameNodes(in, n, like) {
		return like
	}
	buf, out := structs[registry.Node](n)
	md := mapSharer{}
	if len(like) > 0 {
		md.startWith(like[0].Metadata)
	}
	i := 0
	for _, node := range in {
		if node == nil {
			continue
		}
		buf[i] = registry.Node{Id: node.Id, Address: node.Address, Metadata: md.clone(node.Metadata)}
		out[i] = &buf[i]
		i++
	}
	return out
}

// mapSharer copies metadata maps, sharing one copy among equal maps that
// come one after another, the rule among the nodes or the endpoints of one
// service.
type mapSharer struct {
	last   map[string]string // a copy the cache holds
	usable bool              // last may be shared: nil is a map too
}

// startWith lets the first map equal to held share it: held is a copy
// the cache holds already.
func (s *mapSharer) startWith(held map[string]string) {
	s.last, s.usable = held, true
}

func (s *mapSharer) clone(m map[string]string) map[string]string {
	if !s.usable || !sameMap(m, s.last) {
		s.last, s.usable = copyMap(m), true
	}
	return s.last
}

// sameNodes reports whether the n non-nil nodes of in equal like.
func sameNodes(in []*registry.Node, n int, like []*registry.Node) bool {
	if n != len(like) {
		return false
	}
	i := 0
	for _, node := range in {
		if node == nil {
			continue
		}
		l := like[i]
		if node.Id != l.Id || node.Address != l.Address || !sameMap(node.Metadata, l.Metadata) {
			return false
		}
		i++
	}
	return true
}

// sameEndpoints reports whether the n non-nil endpoints of in equal like.
// in has been measured, so the walk is bounded.
func sameEndpoints(in []*registry.Endpoint, n int, like []*registry.Endpoint) bool {
	if n != len(like) {
		return false
	}
	i := 0
	for _, e := range in {
		if e == nil {
			continue
		}
		l := like[i]
		if e.Name != l.Name || !sameMap(e.Metadata, l.Metadata) ||
			!sameValue(e.Request, l.Request) || !sameValue(e.Response, l.Response) {
			return false
		}
		i++
	}
	return true
}

func sameValue(a, b *registry.Value) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Name != b.Name || a.Type != b.Type || len(a.Values) != len(b.Values) {
		return false
	}
	for i := range a.Values {
		if !sameValue(a.Values[i], b.Values[i]) {
			return false
		}
	}
	return true
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

// SameArray reports whether a and b are the same elements of one array:
// the cache never changes a slice it holds in place, so the same array
// is the same data.
func SameArray[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
