package cache

import (
	"reflect"
	"strconv"
	"sync/atomic"
	"unsafe"

	"go-micro.dev/v4/registry"
)

// copyOut gives a GetService caller its own Service, Node and Endpoint
// structs and slices, so it may change or append to them freely. Metadata
// maps and endpoint Values stay shared with the cache and are read-only, as
// in go-micro's cache.
//
// What a copy costs is the memory it allocates far more than the bytes it
// moves: every byte allocated is zeroed, brings the next collection
// nearer, and is paid for again in mark assists and write barriers while
// one runs; and each allocation has a cost of its own. So a copy takes
// two allocations whatever the number of nodes: one block for the
// services and their endpoints, one for the nodes, each holding the
// structs and then the slices of pointers to them, and no bigger than the
// allocator makes separate slices (see blockLayout). Past the bounds of
// the layouts kept, which real services do not reach, it takes a few
// more.
func copyOut(in []*registry.Service) []*registry.Service {
	var nodes, endpoints int
	for _, s := range in {
		nodes += len(s.Nodes)
		endpoints += len(s.Endpoints)
	}
	svcs, out, epBuf, epPtr := serviceBlock(len(in), endpoints)
	nodeBuf, nodePtr := nodeBlock(nodes)
	// The structs are copied field by field rather than whole: while a
	// collection runs, a struct copy takes a bulk write barrier call per
	// struct, which costs more than the fields' inline barriers. The
	// conversions below keep this from missing a field.
	for i, s := range in {
		c := &svcs[i]
		c.Name, c.Version, c.Metadata = s.Name, s.Version, s.Metadata
		// Empty slices stay empty, and nil ones nil.
		c.Endpoints, c.Nodes = s.Endpoints[:0:0], s.Nodes[:0:0]
		if n := len(s.Nodes); n > 0 {
			// Full slice expressions cap each slice, so that a caller's
			// append reallocates instead of overwriting the next service.
			dst := nodePtr[:n:n]
			for j, node := range s.Nodes {
				d := &nodeBuf[j]
				d.Metadata, d.Id, d.Address = node.Metadata, node.Id, node.Address
				dst[j] = d
			}
			c.Nodes = dst
			nodeBuf, nodePtr = nodeBuf[n:], nodePtr[n:]
		}
		if n := len(s.Endpoints); n > 0 {
			dst := epPtr[:n:n]
			for j, ep := range s.Endpoints {
				d := &epBuf[j]
				d.Request, d.Response, d.Metadata, d.Name = ep.Request, ep.Response, ep.Metadata, ep.Name
				dst[j] = d
			}
			c.Endpoints = dst
			epBuf, epPtr = epBuf[n:], epPtr[n:]
		}
		out[i] = c
	}
	return out
}

// The fields that copyOut copies one by one. The conversions fail to
// compile if go-micro adds, removes or reorders a field, so that a copy
// never drops one.
var (
	_ = registry.Service(struct {
		Name      string
		Version   string
		Metadata  map[string]string
		Endpoints []*registry.Endpoint
		Nodes     []*registry.Node
	}{})
	_ = registry.Endpoint(struct {
		Request  *registry.Value
		Response *registry.Value
		Metadata map[string]string
		Name     string
	}{})
	_ = registry.Node(struct {
		Metadata map[string]string
		Id       string
		Address  string
	}{})
)

// The bounds of the block layouts kept: a copy of more nodes, versions or
// endpoints takes a few more allocations instead. A layout is made when a
// shape is first met and kept for the life of the process, and so is its
// type. Shapes that the allocator rounds to the same size share a type
// (see roundUp): the shapes within the bounds, were every one of them met,
// would make about 200 types and take under half a megabyte.
const (
	maxBlockNodes     = 1024
	maxBlockVersions  = 4
	maxBlockEndpoints = 256
)

var (
	// nodeLayouts[n] holds at least n Nodes, then as many pointers.
	nodeLayouts [maxBlockNodes + 1]atomic.Pointer[blockLayout]
	// serviceLayouts[v-1][e] holds v Services, v pointers to them, and at
	// least e Endpoints and as many pointers.
	serviceLayouts [maxBlockVersions][maxBlockEndpoints + 1]atomic.Pointer[blockLayout]

	nodeType     = reflect.TypeOf(registry.Node{})
	serviceType  = reflect.TypeOf(registry.Service{})
	endpointType = reflect.TypeOf(registry.Endpoint{})
)

// A blockLayout is a struct type of arrays, made at run time to fit a
// shape of copy, so that one allocation holds what would otherwise take one
// per array. The garbage collector sees the arrays' real types, so a block
// is as safe as separate slices.
type blockLayout struct {
	typ    reflect.Type
	offset [5]uintptr // of each array in the block; 0 for an empty one
}

// newBlockLayout makes the layout of arrays of the given element types and
// lengths. Empty arrays take no field: a zero-sized last field would pad
// the struct, and could push it into a larger size.
func newBlockLayout(elems []reflect.Type, lens []int) *blockLayout {
	var fields []reflect.StructField
	for i, t := range elems {
		if lens[i] > 0 {
			fields = append(fields, reflect.StructField{Name: "A" + strconv.Itoa(i), Type: reflect.ArrayOf(lens[i], t)})
		}
	}
	l := &blockLayout{typ: reflect.StructOf(fields)}
	f := 0
	for i := range elems {
		if lens[i] > 0 {
			l.offset[i] = l.typ.Field(f).Offset
			f++
		}
	}
	return l
}

// layout returns the layout kept in slot, making it first if need be. Two
// callers that make the same one at once both keep a sound layout:
// reflect makes equal types of equal fields.
func layout(slot *atomic.Pointer[blockLayout], build func() *blockLayout) *blockLayout {
	if l := slot.Load(); l != nil {
		return l
	}
	l := build()
	slot.Store(l)
	return l
}

// array is the array i of block, of n Ts.
func array[T any](block unsafe.Pointer, l *blockLayout, i, n int) []T {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Add(block, l.offset[i])), n)
}

// roundUp returns the number of items of itemSize, n or more, that fit
// after size bytes into the memory the allocator gives a block of size
// bytes and n items that holds pointers. The allocator rounds every
// allocation up to one of a few sizes, so a layout of that many items
// costs no more than one of n, and every count that rounds to the same
// size shares it. growslice rounds a slice's capacity the same way, which
// is how the rounded size is found without reaching into the runtime;
// should it ever stop rounding, roundUp returns n.
func roundUp(size uintptr, n int, itemSize uintptr) int {
	const word = unsafe.Sizeof(unsafe.Pointer(nil))
	words := (size + uintptr(n)*itemSize + word - 1) / word
	rounded := uintptr(cap(append([]unsafe.Pointer(nil), make([]unsafe.Pointer, words)...))) * word
	return max(n, int((rounded-size)/itemSize))
}

// nodeBlock returns n zeroed Nodes and n pointers to point at them, both
// capped at n, in one allocation for up to maxBlockNodes nodes. Up to
// four, structs does that with types known when compiling, which spares
// reflect.New's look-up of the block's pointer type.
func nodeBlock(n int) ([]registry.Node, []*registry.Node) {
	if n <= 4 || n > maxBlockNodes {
		return structs[registry.Node](n)
	}
	l := layout(&nodeLayouts[n], func() *blockLayout {
		k := roundUp(0, n, nodeType.Size()+ptrSize)
		return newBlockLayout([]reflect.Type{nodeType, reflect.PointerTo(nodeType)}, []int{k, k})
	})
	b := reflect.New(l.typ).UnsafePointer()
	return array[registry.Node](b, l, 0, n), array[*registry.Node](b, l, 1, n)
}

// serviceBlock returns v zeroed Services and v pointers to point at them,
// and e zeroed Endpoints and e pointers, each capped at its length, in one
// allocation within the layout bounds.
func serviceBlock(v, e int) ([]registry.Service, []*registry.Service, []registry.Endpoint, []*registry.Endpoint) {
	if v == 0 || v > maxBlockVersions || e > maxBlockEndpoints {
		svcs, out := structs[registry.Service](v)
		eps, epPtr := structs[registry.Endpoint](e)
		return svcs, out, eps, epPtr
	}
	l := layout(&serviceLayouts[v-1][e], func() *blockLayout {
		k := e
		if e > 0 {
			k = roundUp(uintptr(v)*(serviceType.Size()+ptrSize), e, endpointType.Size()+ptrSize)
		}
		return newBlockLayout(
			[]reflect.Type{serviceType, reflect.PointerTo(serviceType), endpointType, reflect.PointerTo(endpointType)},
			[]int{v, v, k, k})
	})
	b := reflect.New(l.typ).UnsafePointer()
	return array[registry.Service](b, l, 0, v), array[*registry.Service](b, l, 1, v),
		array[registry.Endpoint](b, l, 2, e), array[*registry.Endpoint](b, l, 3, e)
}

const ptrSize = unsafe.Sizeof(unsafe.Pointer(nil))

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
