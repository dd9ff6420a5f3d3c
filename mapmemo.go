package cache

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

// mapMemoSlots is how many maps a memo remembers, and mapMemoBytes the
// most bytes of keys and values each may have: a larger map is walked.
const (
	mapMemoSlots = 8
	mapMemoBytes = 256
)

// A mapMemo remembers the prints of the last small maps printed through
// it. It belongs to one goroutine.
type mapMemo struct {
	slots [mapMemoSlots]memoSlot
	// order is the slots in use, the one found or filled last first, so
	// that a map is compared first with the maps it is most likely to
	// equal: a stream's maps come in runs, and a map that changed (a
	// new revision in every node's metadata) would otherwise be compared
	// with each of its older versions, one lookup or more each, first.
	order [mapMemoSlots]uint8
	used  int // slots in use
}

// A memoSlot is one map a memo remembers.
type memoSlot struct {
	n     int                         // entries, 1 to maxSharedMapLen; 0 for an empty slot
	kv    [2 * maxSharedMapLen]string // keys each followed by its value, in bytes
	bytes [mapMemoBytes]byte
	print uint64
}

// print returns metaPrint(m), through mm when it is not nil.
func (mm *mapMemo) print(m map[string]string) uint64 {
	if mm == nil || len(m) == 0 || len(m) > maxSharedMapLen {
		return metaPrint(m)
	}
	for j, i := range mm.order[:mm.used] {
		s := &mm.slots[i]
		if s.n == len(m) && holdsAll(m, s.kv[:2*s.n]) {
			mm.toFront(j)
			return s.print
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
		return p // too large to remember
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
	s.print, s.n = p, len(m)
	mm.toFront(j)
	return p
}

// toFront moves the slot at order[j] to the front of the order.
func (mm *mapMemo) toFront(j int) {
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
