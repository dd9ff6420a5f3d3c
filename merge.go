package cache

import "go-micro.dev/v4/registry"

// Event merging: pure functions from a service's data and one watch event
// to its next data. They never change their input, so that a snapshot
// stays immutable once stored, and they take no lock.

// applyEvent returns the services that result from applying ev to cur,
// without changing cur or ev. ok is false for an event that cannot be
// applied: an unknown action, or one that names no node.
//
// create and update upsert the event's nodes, by Id, into the version of
// the same name, taking the event's metadata and endpoints; a new version is
// added. delete removes the event's nodes, and drops a version with no
// nodes left.
func applyEvent(cur []*registry.Service, ev *registry.Result) (next []*registry.Service, ok bool) {
	s := ev.Service
	if len(s.Nodes) == 0 {
		return nil, false
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
		if idx < 0 {
			next = make([]*registry.Service, len(cur), len(cur)+1)
			copy(next, cur)
			return append(next, s), true
		}
		merged := *s
		merged.Nodes = upsertNodes(cur[idx].Nodes, s.Nodes)
		return replaceAt(cur, idx, &merged), true
	case "delete":
		if idx < 0 {
			return cur, true
		}
		nodes := removeNodes(cur[idx].Nodes, s.Nodes)
		if len(nodes) == 0 {
			next = make([]*registry.Service, 0, len(cur)-1)
			next = append(next, cur[:idx]...)
			return append(next, cur[idx+1:]...), true
		}
		trimmed := *cur[idx]
		trimmed.Nodes = nodes
		return replaceAt(cur, idx, &trimmed), true
	default:
		return nil, false
	}
}

func replaceAt(cur []*registry.Service, i int, s *registry.Service) []*registry.Service {
	next := make([]*registry.Service, len(cur))
	copy(next, cur)
	next[i] = s
	return next
}

// smallMerge is the size (old × new nodes) up to which merges compare
// nodes pairwise; larger ones index by Id, so that an event naming every
// node of a 10 000-node service costs linear time under the cache's lock.
const smallMerge = 64

// upsertNodes keeps the order of old, replacing nodes with a matching Id,
// and appends the new ones.
func upsertNodes(old, add []*registry.Node) []*registry.Node {
	out := make([]*registry.Node, len(old), len(old)+len(add))
	copy(out, old)
	if len(old)*len(add) <= smallMerge {
	next:
		for _, n := range add {
			for i, o := range out {
				if o.Id == n.Id {
					out[i] = n
					continue next
				}
			}
			out = append(out, n)
		}
		return out
	}
	at := make(map[string]int, len(out)+len(add))
	for i := len(out) - 1; i >= 0; i-- { // the first of duplicate Ids wins, as above
		at[out[i].Id] = i
	}
	for _, n := range add {
		if i, ok := at[n.Id]; ok {
			out[i] = n
			continue
		}
		at[n.Id] = len(out)
		out = append(out, n)
	}
	return out
}

// removeNodes returns old without the nodes whose Ids del names.
func removeNodes(old, del []*registry.Node) []*registry.Node {
	out := make([]*registry.Node, 0, len(old))
	if len(old)*len(del) <= smallMerge {
	keep:
		for _, o := range old {
			for _, d := range del {
				if o.Id == d.Id {
					continue keep
				}
			}
			out = append(out, o)
		}
		return out
	}
	gone := make(map[string]bool, len(del))
	for _, d := range del {
		gone[d.Id] = true
	}
	for _, o := range old {
		if !gone[o.Id] {
			out = append(out, o)
		}
	}
	return out
}

// replay applies events that arrived during a refresh to its result. ok is
// false if one of them could not be applied.
func replay(svcs []*registry.Service, events []*registry.Result) ([]*registry.Service, bool) {
	ok := true
	for _, ev := range events {
		next, applied := applyEvent(svcs, ev)
		if !applied {
			ok = false
			continue
		}
		svcs = next
	}
	return svcs, ok
}

func hasNodes(svcs []*registry.Service) bool {
	for _, s := range svcs {
		if len(s.Nodes) > 0 {
			return true
		}
	}
	return false
}
