package cache

import (
	"reflect"
	"sync/atomic"

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
// Such a change makes two blocks. The nodes the event brings take one,
// and what holds them takes the other: the snapshot, the version, the
// slice of versions, the slice of nodes and the prints. Those live and die
// together, since the snapshot reaches every one of them and nothing in
// them reaches an older block. The nodes are kept apart because a later
// change to other nodes keeps them while it drops the rest: in one block,
// each change would pin every slice of nodes before it.

// A change is an event applied to data held in one version, made ready to
// store: next is the data, news is mergeEvent's, prints are next's, and
// snap is a snapshot to fill and store it in.
type change struct {
	next   []*registry.Service
	news   bool
	prints printSet
	snap   *snapshot
}

// changeNodes applies s, the service of a create or update event, to
// held, the one version a service is held in with prints p, when the
// prints have shown that s without its nodes is held (see
// printSet.repeats): it gives what mergeEvent would, sharing held's
// version. ok is false when the event's nodes are past the bounds of a
// copy, or the merge past those of prints; the event is then copied.
//
// heard holds the prints of the event's first nodes, which repeats made.
func changeNodes(held, s *registry.Service, p printSet, heard *eventPrints) (ch change, ok bool) {
	// The bounds of a copy, as measure would check them: the version's
	// items were counted as it was printed.
	items := heard.items + len(s.Nodes)
	for _, n := range s.Nodes {
		if n == nil {
			return change{}, false
		}
		items += len(n.Metadata)
	}
	if items > maxCopyItems || len(s.Nodes) == 0 || len(held.Nodes)+len(s.Nodes) > maxPrintNodes {
		return change{}, false
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
	svc.Nodes, ch.news = upsertNodesInto(nodes, held.Nodes, add, same)
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
	ch.next, ch.prints, ch.snap = list, prints, snap
	return ch, true
}

// changeLayouts[n] is the layout of the block of a change to a version
// of n nodes at most (see changeBlock).
var changeLayouts [maxPrintNodes + 1]atomic.Pointer[blockLayout]

var (
	snapshotType = reflect.TypeOf(snapshot{})
	printType    = reflect.TypeOf(uint64(0))
)

// changeBlock returns, in one allocation, a snapshot, a version, a slice
// of one version, an empty slice with room for n nodes, and room for the
// prints of n nodes.
func changeBlock(n int) (*snapshot, *registry.Service, []*registry.Service, []*registry.Node, printSet) {
	l := layout(&changeLayouts[n], func() *blockLayout {
		return newBlockLayout(
			[]reflect.Type{snapshotType, serviceType, reflect.PointerTo(serviceType), reflect.PointerTo(nodeType), printType},
			[]int{1, 1, 1, n, printsLen(n)})
	})
	b := reflect.New(l.typ).UnsafePointer()
	return &array[snapshot](b, l, 0, 1)[0], &array[registry.Service](b, l, 1, 1)[0],
		array[*registry.Service](b, l, 2, 1), array[*registry.Node](b, l, 3, n)[:0], array[uint64](b, l, 4, printsLen(n))
}
