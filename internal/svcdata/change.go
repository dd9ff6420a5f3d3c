package svcdata

import (
	"go-micro.dev/v4/registry"
)

// Most events that change a service change its nodes alone: an instance
// registering with a new address or new metadata, or a new instance. The
// event's version without its nodes then has the print of the version
// held, which stands for comparing the two (see prints.go), so the change
// shares the version's metadata and endpoints with the data held, copies
// the event's nodes, and merges them into the nodes held: no copy of the
// event, and no read of the held version's endpoints, which are seldom in
// the CPU's caches.
//
// The snapshot, the version and the slice of versions of such a change
// take one allocation, since the snapshot reaches each of them and they
// live and die together; the slice of nodes, the prints and the nodes the
// event brings take one each. The nodes are kept apart because a later
// change to other nodes keeps them while it drops the rest.

// A Change is an event applied to data held in one version, made ready
// to store: Next is the data, News is MergeEvent's news, Prints are
// Next's, and Snap is a snapshot to fill and store it in, allocated with
// the version.
type Change struct {
	Next   []*registry.Service
	News   bool
	Prints Prints
	Snap   *Snapshot
}

// changeNodes applies s, the service of a create or update event, to
// held, the one version a service is held in with prints p, when the
// prints have shown that s without its nodes is held (see
// Prints.repeats): it gives what MergeEvent would, sharing held's
// version. ok is false when the event's nodes are past the bounds of a
// copy, or the merge past those of prints; the event is then copied.
//
// heard holds the prints of the event's first nodes, which repeats made.
func changeNodes(held, s *registry.Service, p Prints, heard *eventPrints) (ch Change, ok bool) {
	// The bounds of a copy, as measure would check them: the version's
	// items were counted as it was printed.
	items := heard.items + len(s.Nodes)
	for _, n := range s.Nodes {
		if n == nil {
			return Change{}, false
		}
		items += len(n.Metadata)
	}
	if items > maxCopyItems || len(s.Nodes) == 0 || len(held.Nodes)+len(s.Nodes) > maxPrintNodes {
		return Change{}, false
	}
	buf, add := structs[registry.Node](len(s.Nodes))
	var addPrints [4]uint64 // of add's first nodes
	for i, n := range s.Nodes {
		x, md, ref := heard.of(i, n)
		if i < len(addPrints) {
			addPrints[i] = x
		}
		own := heard.maps.copyOf(ref)
		if own == nil {
			own = copyPrintedMap(n.Metadata, md)
			heard.maps.keepCopy(ref, own)
		}
		buf[i] = registry.Node{Id: n.Id, Address: n.Address, Metadata: own}
		add[i] = &buf[i]
	}
	room := len(held.Nodes) + len(add)
	snap, svc, list, nodes, prints := changeBlock(room)
	svc.Name, svc.Version, svc.Metadata, svc.Endpoints = held.Name, held.Version, held.Metadata, held.Endpoints
	// A node whose print is held is held as it is. One whose print is
	// not differs from the node of its Id in its address or metadata,
	// which sameNode would find too, unless the two differ only as a nil
	// and an empty map, which sameNode takes as equal.
	printOf := func(n *registry.Node) (uint64, bool) { // of a node of add, if kept
		for j, a := range add[:min(len(add), len(addPrints))] {
			if a == n {
				return addPrints[j], true
			}
		}
		return 0, false
	}
	same := func(h, n *registry.Node) bool {
		if x, ok := printOf(n); ok {
			if p.has(x) {
				return true
			}
			if len(n.Metadata) > 0 {
				return false
			}
		}
		return sameNode(h, n)
	}
	svc.Nodes, ch.News = upsertNodesInto(nodes, held.Nodes, add, same)
	list[0] = svc
	prints = prints[:printsLen(len(svc.Nodes))]
	prints[0] = p[0]
	was := p.nodes()
	prints.fill(svc.Nodes, func(i int) (uint64, bool) {
		n := svc.Nodes[i]
		if i < len(held.Nodes) && n == held.Nodes[i] {
			return was[i], true
		}
		return printOf(n)
	})
	ch.Next, ch.Prints, ch.Snap = list, prints, snap
	return ch, true
}

// changeBlock returns a snapshot, a version and a slice of one version,
// in one allocation, since they live and die together; an empty slice
// with room for n nodes; and room for the prints of n nodes.
func changeBlock(n int) (*Snapshot, *registry.Service, []*registry.Service, []*registry.Node, Prints) {
	b := new(struct {
		snap Snapshot
		svc  registry.Service
		list [1]*registry.Service
	})
	return &b.snap, &b.svc, b.list[:], make([]*registry.Node, 0, n), make(Prints, printsLen(n))
}
