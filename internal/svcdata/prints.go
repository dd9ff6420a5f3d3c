package svcdata

import (
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"slices"

	"go-micro.dev/v4/registry"
)

// Most watch events repeat what the cache holds: an instance registering
// again, every few seconds, with the whole definition of its service.
// Telling such an event apart by comparing it with the data held reads
// every string, map and Value of the version, and that data is seldom in
// the CPU's caches: for a cache of thousands of services, the comparison
// alone cost more than half of an event.
//
// So a service held in one version also keeps its prints: a keyed 64-bit
// hash of the version without its nodes, and one of each node. An event
// is printed as it arrives, while its memory is still in the CPU's caches,
// and repeats the data when its version's print and each of its nodes'
// prints are among the ones kept. The event's memory is read once, and of
// the data held only the prints.
//
// Two different definitions share a print with a chance of 2^-64 for each
// print compared. The key is drawn once per process and never leaves it,
// so no registration can be made to match another's print on purpose.
// Were it ever to happen, a change would be taken for a repeat, and the
// cache would keep what it holds until the next change or refresh of the
// service, as when the stream loses an event.

// printSeed keys every print.
var printSeed = maphash.MakeSeed()

// Prints are the prints of a service held in one version: the
// version's, without its nodes, then each node's in the order of the
// nodes, so that a change to some nodes keeps the prints of the others;
// past linearPrints nodes, the nodes' prints again, sorted, to search.
// nil when the data has none (see PrintsOf): events are then compared
// with the data itself.
type Prints []uint64

// linearPrints is the number of nodes up to which a node's print is
// searched for one by one rather than in a sorted copy.
const linearPrints = 32

// printsLen is the length of the prints of n nodes.
func printsLen(n int) int {
	if n <= linearPrints {
		return 1 + n
	}
	return 1 + 2*n
}

// nodes returns the nodes' prints, in the order of the nodes.
func (p Prints) nodes() []uint64 {
	n := len(p) - 1
	if n > linearPrints {
		n /= 2
	}
	return p[1 : 1+n]
}

// has reports whether x is the print of one of the nodes.
func (p Prints) has(x uint64) bool {
	nodes := p.nodes()
	if len(nodes) <= linearPrints {
		return slices.Contains(nodes, x)
	}
	_, found := slices.BinarySearch(p[1+len(nodes):], x)
	return found
}

// fill writes the prints of nodes into p, whose version print is set
// and whose length is printsLen(len(nodes)): the print of nodes[i] is
// was(i), or made when was returns false.
func (p Prints) fill(nodes []*registry.Node, was func(i int) (uint64, bool)) {
	for i, n := range nodes {
		x, ok := was(i)
		if !ok {
			x = nodePrint(n)
		}
		p[1+i] = x
	}
	if len(nodes) > linearPrints {
		sorted := p[1+len(nodes):]
		copy(sorted, p[1:1+len(nodes)])
		slices.Sort(sorted)
	}
}

// maxPrintNodes bounds the nodes of a version with prints: the sort and
// the duplicate check of a larger one cost more at every refresh than its
// events would save.
const maxPrintNodes = 1024

// PrintsOf returns the prints of services, the cache's own copy, or nil
// when they cannot stand for the comparison: more or fewer than one
// version, a nil node or endpoint, too many nodes, or two nodes with the
// same Id (an event names a node by its Id, and the comparison takes the
// first).
func PrintsOf(services []*registry.Service) Prints {
	if len(services) != 1 {
		return nil
	}
	s := services[0]
	if len(s.Nodes) == 0 || len(s.Nodes) > maxPrintNodes || slices.Contains(s.Nodes, nil) || !uniqueIDs(s.Nodes) {
		return nil
	}
	p := make(Prints, printsLen(len(s.Nodes)))
	var ok bool
	if p[0], ok = versionPrint(s); !ok {
		return nil
	}
	p.fill(s.Nodes, func(int) (uint64, bool) { return 0, false })
	return p
}

// PrintsLike is PrintsOf(services), taking cur's prints when services
// holds cur's version as it is: what CloneInLike makes of an answer with
// nothing new, which shares every part of the version held.
func PrintsLike(services []*registry.Service, cur *Snapshot) Prints {
	if cur != nil && cur.Prints != nil && len(services) == 1 && len(cur.Services) == 1 && sharesAll(services[0], cur.Services[0]) {
		return cur.Prints
	}
	return PrintsOf(services)
}

// sharesAll reports whether a holds b's very parts.
func sharesAll(a, b *registry.Service) bool {
	return a.Name == b.Name && a.Version == b.Version && SameArray(a.Nodes, b.Nodes) &&
		SameArray(a.Endpoints, b.Endpoints) && reflect.ValueOf(a.Metadata).UnsafePointer() == reflect.ValueOf(b.Metadata).UnsafePointer()
}

// uniqueIDs reports whether no two of nodes share an Id.
func uniqueIDs(nodes []*registry.Node) bool {
	if len(nodes) <= 16 {
		for i, n := range nodes {
			for _, o := range nodes[:i] {
				if n.Id == o.Id {
					return false
				}
			}
		}
		return true
	}
	seen := make(map[string]struct{}, len(nodes))
	for _, n := range nodes {
		if _, dup := seen[n.Id]; dup {
			return false
		}
		seen[n.Id] = struct{}{}
	}
	return true
}

// repeats tells whether res repeats the data printed as p, as the
// function repeats would: ok is false when the prints cannot tell (p is
// nil, or the event has nil nodes or endpoints, or names more nodes than
// the version holds), and repeats must then decide. version reports
// whether the event's version, without its nodes, is the one printed: a
// change, then, is to the nodes alone.
func (p Prints) repeats(res *registry.Result, heard *eventPrints) (repeat, ok, version bool) {
	if p == nil {
		return false, false, false
	}
	s := res.Service
	if res.Action != "create" && res.Action != "update" || len(s.Nodes) == 0 {
		return false, true, false
	}
	if len(s.Nodes) > len(p.nodes()) || slices.Contains(s.Nodes, nil) {
		// Nil entries count towards the bounds of a copy, and a node
		// named twice may differ from itself: the comparison decides.
		return false, false, false
	}
	v, items, ok := versionPrintWith(s, heard.maps)
	heard.items = items
	if !ok {
		return false, false, false
	}
	if v != p[0] {
		return false, true, false
	}
	for _, n := range s.Nodes {
		x := heard.node(n)
		if !p.has(x) {
			return false, true, true
		}
	}
	return true, true, true
}

// eventPrints keeps the prints of an event's first nodes, and of their
// metadata, made while telling a repeat, for the change that applies the
// event (see changeNodes).
type eventPrints struct {
	n          int
	nodes, mds [4]uint64
	refs       [4]memoRef // where maps holds the metadata
	maps       *MapMemo   // prints the event's maps; nil to walk each
	items      int        // of the event's version, as measure counts them
}

// node returns the print of n, the next of the event's nodes, keeping it.
func (e *eventPrints) node(n *registry.Node) uint64 {
	md, ref := e.maps.find(n.Metadata)
	x := nodePrintOf(n, md)
	if e.n < len(e.nodes) {
		e.nodes[e.n], e.mds[e.n], e.refs[e.n] = x, md, ref
		e.n++
	}
	return x
}

// of returns the prints of the event's node i and its metadata, and where
// the memo holds the metadata, made now if they were not kept.
func (e *eventPrints) of(i int, n *registry.Node) (node, md uint64, ref memoRef) {
	if i < e.n {
		return e.nodes[i], e.mds[i], e.refs[i]
	}
	md, ref = e.maps.find(n.Metadata)
	return nodePrintOf(n, md), md, ref
}

// A printer hashes a definition: each string on its own, with the
// runtime's keyed hash (a hash of one's own, however quick, gave equal
// prints to strings such as "v1" and "v10" whatever the key), and the
// strings' hashes, counts and marks chained two at a time in the order the
// definition has them, so that no two definitions give the same words.
// The chain is wyhash's: the words are folded into the state by a 128-bit
// multiply, each side with a key of its own.
type printer struct {
	h      uint64
	values int // Values written so far
	items  int // and what a copy counts of them (see measure)
}

// The keys of the chain, drawn once per process apart from printSeed.
// They must not be prints of strings themselves: mix(a^k, b) is 0 for
// a == k whatever b, so a key that is some string's print (as a hash of
// "k0" under printSeed was) would make that string hide what is paired
// with it, and a changed value under such a key print as a repeat.
var (
	printK0 = rand.Uint64()
	printK1 = rand.Uint64()
	printK2 = rand.Uint64()
	printK3 = rand.Uint64()
)

// mix folds a and b into one word.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// pair chains x and y.
func (p *printer) pair(x, y uint64) {
	p.h = mix(p.h^x^printK0, y^printK1)
}

// strPrint hashes s with the runtime's keyed string hash.
func strPrint(s string) uint64 {
	return maphash.String(printSeed, s)
}

// printNil marks a nil map or Value, to tell it from an empty one.
const printNil uint64 = 1<<64 - 1

// metaPrint hashes m as the sum of its entries' hashes, which the order of
// a map does not change, and its length.
func metaPrint(m map[string]string) uint64 {
	if m == nil {
		return printNil
	}
	var sum uint64
	for k, v := range m {
		sum += mix(strPrint(k)^printK0, strPrint(v)^printK1)
	}
	return mix(sum^printK2, uint64(len(m))^printK3)
}

// value writes v and the Values within it, at depth; false past the
// bounds of a copy (an event's Values may nest deeper, or even in a
// cycle), which the comparison with the data held, bounded by it, handles.
func (p *printer) value(v *registry.Value, depth int) bool {
	if v == nil {
		p.pair(printNil, printNil)
		return true
	}
	if p.values++; depth > maxValueDepth || p.values > maxValueNodes {
		return false
	}
	p.items += 1 + len(v.Values)
	p.pair(strPrint(v.Name), strPrint(v.Type)+uint64(len(v.Values)))
	for _, sub := range v.Values {
		if !p.value(sub, depth+1) {
			return false
		}
	}
	return true
}

// versionPrint is the print of s without its nodes, or false when s has a
// nil endpoint or Values past the bounds of a copy.
func versionPrint(s *registry.Service) (uint64, bool) {
	x, _, ok := versionPrintWith(s, nil)
	return x, ok
}

// versionPrintWith is versionPrint, printing the maps through maps, and
// also counts the items of s without its nodes as measure does, for the
// bounds of a copy.
func versionPrintWith(s *registry.Service, maps *MapMemo) (x uint64, items int, ok bool) {
	var p printer
	p.pair(strPrint(s.Name), strPrint(s.Version))
	p.pair(maps.print(s.Metadata), uint64(len(s.Endpoints)))
	items = len(s.Metadata) + len(s.Endpoints)
	for _, e := range s.Endpoints {
		if e == nil {
			return 0, 0, false
		}
		p.pair(strPrint(e.Name), maps.print(e.Metadata))
		items += len(e.Metadata)
		if !p.value(e.Request, 1) || !p.value(e.Response, 1) {
			return 0, 0, false
		}
	}
	return p.h, items + p.items, true
}

// nodePrint is the print of n.
func nodePrint(n *registry.Node) uint64 {
	return nodePrintOf(n, metaPrint(n.Metadata))
}

// nodePrintOf is the print of n, whose metadata's print is md.
func nodePrintOf(n *registry.Node, md uint64) uint64 {
	var p printer
	p.pair(strPrint(n.Id), strPrint(n.Address))
	p.pair(md, 0)
	return p.h
}
