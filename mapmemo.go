package cache

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

// mapMemoSlots is how many maps a memo remembers.
const mapMemoSlots = 8

// A mapMemo remembers the prints of the last small maps printed through
// it. It belongs to one goroutine. The strings it keeps are the events',
// which, like every string the cache keeps, are never changed.
type mapMemo struct {
	slots [mapMemoSlots]struct {
		n     int // entries, 1 to maxSharedMapLen; 0 for an empty slot
		kv    [2 * maxSharedMapLen]string
		print uint64
	}
	next int // the slot to fill next
}

// print returns metaPrint(m), through mm when it is not nil.
func (mm *mapMemo) print(m map[string]string) uint64 {
	if mm == nil || len(m) == 0 || len(m) > maxSharedMapLen {
		return metaPrint(m)
	}
	for i := range mm.slots {
		s := &mm.slots[i]
		if s.n == len(m) && holdsAll(m, s.kv[:2*s.n]) {
			return s.print
		}
	}
	s := &mm.slots[mm.next]
	mm.next = (mm.next + 1) % mapMemoSlots
	s.n = 0
	kv := s.kv[:0]
	for k, v := range m {
		kv = append(kv, k, v)
	}
	s.print, s.n = metaPrint(m), len(m)
	return s.print
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
