package svcdata

import "go-micro.dev/v4/registry"

// Event merging: pure functions from a service's data and one watch event
// to its next data. They never change their input, so that a snapshot
// stays immutable once stored, and they take no lock.

// ApplyEvent returns the services that result from applying ev to cur,
// without changing cur or ev. ok is false for an event that cannot be
// applied: an unknown action, or one that names no node.
//
// create and update upsert the event's nodes, by Id, into the version of
// the same name, taking the event's metadata and endpoints; a new version is
// added. A node Id is one instance, so the nodes leave any other version
// they were in: an instance that re-registers with a new version is not
// served under both. delete removes the event's nodes, and drops a version
// with no nodes left.
func ApplyEvent(cur []*registry.Service, ev *registry.Result) (next []*registry.Service, ok bool) {
	next, _, ok = MergeEvent(cur, ev)
	return next, ok
}

// MergeEvent is ApplyEvent, and also reports whether a create or update
// announced news: a node that cur's version lacked, or held with another
// address or metadata. A registry that re-announces the nodes the cache
// holds (a re-registration, a heartbeat) tells it nothing to confirm.
func MergeEvent(cur []*registry.Service, ev *registry.Result) (next []*registry.Service, news, ok bool) {
	s := ev.Service
	if len(s.Nodes) == 0 {
		return nil, false, false
	}
	idx := -1
	for i, old := range cur {
		if old.Version == s.Version {
			idx = i
			break
		}
	}
	switch ev.Action {
	case "create", "update":
		if idx == 0 && len(cur) == 1 {
			// The usual case, one version: its new struct and the slice
			// that holds it take one allocation.
			v, p := structs[registry.Service](1)
			v[0] = *s
			v[0].Nodes, news = upsertNodes(cur[0].Nodes, s.Nodes)
			p[0] = &v[0]
			return p, news, true
		}
		next = withoutNodes(cur, idx, s.Nodes)
		if idx < 0 {
			return append(next, s), true, true
		}
		merged := *s
		merged.Nodes, news = upsertNodes(cur[idx].Nodes, s.Nodes)
		for i, v := range next {
			if v == cur[idx] {
				next[i] = &merged
			}
		}
		return next, news, true
	case "delete":
		if idx < 0 {
			return cur, false, true
		}
		return withoutNodes(cur, -1, s.Nodes), false, true
	default:
		return nil, false, false
	}
}

// withoutNodes returns a new slice of cur's versions without the nodes
// whose Ids gone names, except in version keep, and without the versions
// left with no node. Versions it does not change are shared, not copied.
func withoutNodes(cur []*registry.Service, keep int, gone []*registry.Node) []*registry.Service {
	next := make([]*registry.Service, 0, len(cur)+1)
	for i, v := range cur {
		if i == keep {
			next = append(next, v)
			continue
		}
		nodes := removeNodes(v.Nodes, gone)
		switch {
		case len(nodes) == len(v.Nodes):
			next = append(next, v)
		case len(nodes) > 0:
			trimmed := *v
			trimmed.Nodes = nodes
			next = append(next, &trimmed)
		}
	}
	return next
}

// smallMerge is the size (old × new nodes) up to which merges compare
// nodes pairwise; larger ones index by Id, so that an event naming every
// node of a 10 000-node service costs linear time under the cache's lock.
const smallMerge = 64

// upsertNodes keeps the order of old, replacing nodes with a matching Id,
// and appends the new ones. news reports whether a node of add was not in
// old as it is (see MergeEvent).
func upsertNodes(old, add []*registry.Node) (out []*registry.Node, news bool) {
	return upsertNodesInto(make([]*registry.Node, 0, len(old)+len(add)), old, add, sameNode)
}

// upsertNodesInto is upsertNodes into dst, empty with room for old and
// add, with same telling whether a node of add holds a node of old as it
// is (sameNode, or what stands for it).
func upsertNodesInto(dst, old, add []*registry.Node, same func(h, n *registry.Node) bool) (out []*registry.Node, news bool) {
	out = append(dst, old...)
	// i is the place of n in out: the first node with its Id, which is
	// old's, or one this event appended, and so news.
	place := func(i int, n *registry.Node) {
		if i < len(old) {
			news = news || !same(old[i], n)
			out[i] = n
			return
		}
		out[i] = n
	}
	if len(old)*len(add) <= smallMerge {
	next:
		for _, n := range add {
			for i, o := range out {
				if o.Id == n.Id {
					place(i, n)
					continue next
				}
			}
			out = append(out, n)
			news = true
		}
		return out, news
	}
	at := make(map[string]int, len(out)+len(add))
	for i := len(out) - 1; i >= 0; i-- { // the first of duplicate Ids wins, as above
		at[out[i].Id] = i
	}
	for _, n := range add {
		if i, ok := at[n.Id]; ok {
			place(i, n)
			continue
		}
		at[n.Id] = len(out)
		out = append(out, n)
		news = true
	}
	return out, news
}

// sameNode reports whether n announces node h as it is held.
func sameNode(h, n *registry.Node) bool {
	return h == n || (h.Address == n.Address && sameEntries(h.Metadata, n.Metadata))
}

// removeNodes returns old without the nodes whose Ids del names; old itself
// when it has none of them, so that an unchanged version is not copied.
func removeNodes(old, del []*registry.Node) []*registry.Node {
	var keep func(o *registry.Node) bool
	if len(old)*len(del) <= smallMerge {
		keep = func(o *registry.Node) bool {
			for _, d := range del {
				if o.Id == d.Id {
					return false
				}
			}
			return true
		}
	} else {
		gone := make(map[string]bool, len(del))
		for _, d := range del {
			gone[d.Id] = true
		}
		keep = func(o *registry.Node) bool { return !gone[o.Id] }
	}
	first := -1
	for i, o := range old {
		if !keep(o) {
			first = i
			break
		}
	}
	if first < 0 {
		return old
	}
	out := make([]*registry.Node, first, len(old)-1)
	copy(out, old[:first])
	for _, o := range old[first+1:] {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out
}

// Replay applies events that arrived during a refresh to its result. ok is
// false if one of them could not be applied; news is set if one announced
// a node that the result lacked, or held otherwise.
func Replay(svcs []*registry.Service, events []*registry.Result) (_ []*registry.Service, ok, news bool) {
	ok = true
	for _, ev := range events {
		next, n, applied := MergeEvent(svcs, ev)
		if !applied {
			ok = false
			continue
		}
		svcs, news = next, news || n
	}
	return svcs, ok, news
}

// HasNodes reports whether a version of svcs holds a node: versions
// without nodes are served as they came, but data with no node at all is
// the registry saying the service is gone.
func HasNodes(svcs []*registry.Service) bool {
	for _, s := range svcs {
		if len(s.Nodes) > 0 {
			return true
		}
	}
	return false
}

// repeats reports whether res, a create or update, tells nothing that cur
// does not hold: its version is held with the same metadata and endpoints,
// and holds every node it names as it is, and no other version holds any
// of them. Applying it would give cur again. It copies nothing, and reads
// res without measuring it first: each comparison ends with cur's data,
// which is bounded, but for nil entries, which are measured.
func repeats(cur []*registry.Service, res *registry.Result) bool {
	s := res.Service
	if res.Action != "create" && res.Action != "update" {
		return false
	}
	// Nodes first: they are what changes most, and what is cheapest to
	// compare.
	held := versionOf(cur, s.Version)
	if held == nil || len(s.Nodes)*len(held.Nodes) > maxRepeatCheck {
		return false
	}
	named, nils := false, false
	for _, n := range s.Nodes {
		if n == nil {
			nils = true
			continue
		}
		h := nodeByID(held.Nodes, n.Id)
		if h == nil || h.Address != n.Address || !sameMap(n.Metadata, h.Metadata) {
			return false
		}
		if len(cur) > 1 && inOtherVersion(cur, held, n.Id) {
			return false
		}
		named = true
	}
	endpoints := countNonNil(s.Endpoints)
	if !named || !sameMap(s.Metadata, held.Metadata) || !sameEndpoints(s.Endpoints, endpoints, held.Endpoints) {
		return false
	}
	if nils || endpoints != len(s.Endpoints) {
		// Equal to what is held but for nil entries, which the bounds of
		// a copy count: an event too large to copy is refused, repeat
		// or not (see ErrAnswerTooLarge).
		var m measure
		return m.service(s)
	}
	return true
}

// maxRepeatCheck bounds the node pairs that repeats compares, so that its
// pairwise search stays cheap: a larger event takes the indexed merge.
const maxRepeatCheck = 4096

// nodeByID returns the first of nodes with Id id, or nil.
func nodeByID(nodes []*registry.Node, id string) *registry.Node {
	for _, n := range nodes {
		if n.Id == id {
			return n
		}
	}
	return nil
}

// inOtherVersion reports whether a version of cur other than v holds a
// node with Id id.
func inOtherVersion(cur []*registry.Service, v *registry.Service, id string) bool {
	for _, o := range cur {
		if o != v && nodeByID(o.Nodes, id) != nil {
			return true
		}
	}
	return false
}

// sameEntries reports whether a and b hold the same entries, a nil map
// and an empty one alike: registries return one where they were given the
// other.
func sameEntries(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		if vb, ok := b[k]; !ok || va != vb {
			return false
		}
	}
	return true
}
