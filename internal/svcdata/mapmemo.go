package svcdata

import "unsafe"

// The metadata maps of the events a stream carries are mostly the same
// few, over and over: every node of a deployment announces the same
// broker, protocol, registry, server and transport, and every endpoint the
// same stream flag. Printing a map walks it, and starting a walk of a Go
// map costs more than hashing a few short strings. So the goroutine that
// reads a stream remembers the last few small maps it printed, entry by
// entry, and finds an event's map among them by looking its entries up:
// a map of as many entries as one remembered, holding each of them,
// equals it, and has its print. The result is the print metaPrint gives,
// found or made.
//
// The memo keeps its own copy of the entries' bytes, next to each other:
// a map that differs from one remembered is told apart by a lookup or two
// in memory the CPU's caches hold, rather than in the strings of an event
// long gone, which they do not; and no event's memory is kept alive.
//
// A change to a node copies its metadata into the cache, sharing an equal
// map the cache holds already (see copyPrintedMap), and the memo keeps
// that copy with the map it found, for the next change that brings the
// same map: found in the memo, it is equal to the copy, and no lookup in
// the shared table or second comparison is needed.

// mapMemoSlots is how many maps a memo remembers, and mapMemoBytes the
// most bytes of keys and values each may have: a larger map is walked.
const (
	mapMemoSlots = 8
	mapMemoBytes = 256
)

// A MapMemo remembers the prints of the last small maps printed through
// it, for Prepare: the goroutine that reads a watch stream keeps one, so
// that the maps its events repeat are not walked again. It belongs to that
// one goroutine; its zero value is ready to use.
type MapMemo struct {
	slots [mapMemoSlots]memoSlot
	// order is the slots in use, the one found or filled last first, so
	// that a map is compared first with the maps it is most likely to
	// equal: a stream's maps come in runs, and a map that changed (a
	// new revision in every node's metadata) would otherwise be compared
	// with each of its older versions, one lookup or more each, first.
	order [mapMemoSlots]uint8
	used  int    // slots in use
	fills uint64 // slots filled so far: each fill's number tells it apart
}

// A memoSlot is one map a memo remembers.
type memoSlot struct {
	n     int                         // entries, 1 to maxSharedMapLen; 0 for an empty slot
	kv    [2 * maxSharedMapLen]string // keys each followed by its value, in bytes
	bytes [mapMemoBytes]byte
	print uint64
	fill  uint64            // the number of the fill that put the map here
	own   map[string]string // the cache's copy of the map, once a change made one
}

// A memoRef names a map a memo holds, as long as its slot holds it: the
// zero memoRef names none.
type memoRef struct {
	slot uint8
	fill uint64
}

// print returns metaPrint(m), through mm when it is not nil.
func (mm *MapMemo) print(m map[string]string) uint64 {
	p, _ := mm.find(m)
	return p
}

// find returns metaPrint(m), through mm when it is not nil, and the map
// the memo holds equal to m, if it does.
func (mm *MapMemo) find(m map[string]string) (uint64, memoRef) {
	if mm == nil || len(m) == 0 || len(m) > maxSharedMapLen {
		return metaPrint(m), memoRef{}
	}
	for j, i := range mm.order[:mm.used] {
		s := &mm.slots[i]
		if s.n == len(m) && holdsAll(m, s.kv[:2*s.n]) {
			mm.toFront(j)
			return s.print, memoRef{i, s.fill}
		}
	}
	p := metaPrint(m)
	var kv [2 * maxSharedMapLen]string
	size, n := 0, 0
	for k, v := range m {
		kv[n], kv[n+1] = k, v
		n += 2
		size += len(k) + len(v)
	}
	if size > mapMemoBytes {
		return p, memoRef{} // too large to remember
	}
	j := mm.used
	if j < mapMemoSlots {
		mm.order[j] = uint8(j)
		mm.used++
	} else {
		j = mapMemoSlots - 1 // the one found or filled longest ago
	}
	s := &mm.slots[mm.order[j]]
	used := 0
	for i, str := range kv[:n] {
		s.kv[i] = s.keep(&used, str)
	}
	mm.fills++
	s.print, s.n, s.fill, s.own = p, len(m), mm.fills, nil
	mm.toFront(j)
	return p, memoRef{mm.order[0], s.fill}
}

// slot returns the slot of ref, or nil when it holds another map now.
func (mm *MapMemo) slot(ref memoRef) *memoSlot {
	if mm == nil || ref.fill == 0 || mm.slots[ref.slot].fill != ref.fill {
		return nil
	}
	return &mm.slots[ref.slot]
}

// copyOf returns the cache's copy of the map ref names, or nil when no
// change has made one or the memo no longer holds the map.
func (mm *MapMemo) copyOf(ref memoRef) map[string]string {
	if s := mm.slot(ref); s != nil {
		return s.own
	}
	return nil
}

// keepCopy keeps own, the cache's copy of the map ref names, if the memo
// still holds that map.
func (mm *MapMemo) keepCopy(ref memoRef, own map[string]string) {
	if s := mm.slot(ref); s != nil {
		s.own = own
	}
}

// toFront moves the slot at order[j] to the front of the order.
func (mm *MapMemo) toFront(j int) {
	i := mm.order[j]
	copy(mm.order[1:j+1], mm.order[:j])
	mm.order[0] = i
}

// keep copies str into the slot's bytes from *used on, and returns the
// copy.
func (s *memoSlot) keep(used *int, str string) string {
	if str == "" {
		return ""
	}
	b := s.bytes[*used : *used+len(str)]
	copy(b, str)
	*used += len(str)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// holdsAll reports whether m holds every key and value of kv, a list of
// keys each followed by its value.
func holdsAll(m map[string]string, kv []string) bool {
	for i := 0; i < len(kv); i += 2 {
		if v, ok := m[kv[i]]; !ok || v != kv[i+1] {
			return false
		}
	}
	return true
}
