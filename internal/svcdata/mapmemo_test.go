package svcdata

import (
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMapMemoPrintsAsMetaPrint: a memo gives every map the print that
// walking it gives, over maps drawn from a few keys and values, so that
// maps of one length holding some of the same entries, another value
// under a key, one entry more or fewer, and empty strings all come up; and
// it finds the maps it has seen.
func TestMapMemoPrintsAsMetaPrint(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	words := []string{"", "a", "b", "ab", "stream", "false", "true"}
	draw := func() map[string]string {
		n := rng.IntN(maxSharedMapLen + 3)
		if n == 0 {
			return nil
		}
		m := map[string]string{}
		for j := 0; j < n-1; j++ {
			m[words[rng.IntN(len(words))]] = words[rng.IntN(len(words))]
		}
		return m
	}
	pool := make([]map[string]string, 12) // seen again and again, as a stream's maps are
	for i := range pool {
		pool[i] = draw()
	}
	var memo MapMemo
	found := 0
	for i := 0; i < 20000; i++ {
		m := draw()
		if rng.IntN(4) > 0 {
			m = maps.Clone(pool[rng.IntN(len(pool))])
		}
		before := memo.fills
		got := memo.print(m)
		require.Equal(t, metaPrint(m), got, "draw %d: %v", i, m)
		if len(m) > 0 && len(m) <= maxSharedMapLen && memo.fills == before {
			found++
		}
	}
	assert.Greater(t, found, 5000, "maps found among those remembered")
}

// TestMapMemoTellsMapsApart: the maps a memo must not take for one it
// holds.
func TestMapMemoTellsMapsApart(t *testing.T) {
	var memo MapMemo
	held := map[string]string{"a": "1", "b": "2"}
	memo.print(held)
	for name, m := range map[string]map[string]string{
		"another value":     {"a": "1", "b": "3"},
		"one entry more":    {"a": "1", "b": "2", "c": "3"},
		"one entry fewer":   {"a": "1"},
		"a key renamed":     {"a": "1", "c": "2"},
		"values swapped":    {"a": "2", "b": "1"},
		"an empty value":    {"a": "1", "b": ""},
		"the empty map":     {},
		"a key's end moved": {"a": "1", "b2": ""},
	} {
		assert.Equal(t, metaPrint(m), memo.print(m), name)
		assert.NotEqual(t, metaPrint(held), memo.print(m), name)
	}
	assert.Equal(t, metaPrint(held), memo.print(map[string]string{"b": "2", "a": "1"}), "an equal map")
	var none *MapMemo
	assert.Equal(t, metaPrint(held), none.print(held), "no memo walks the map")
}

// TestMapMemoKeepsItsOwnCopy: a memo copies what it remembers, so the
// memory of the event it came from may be reused (a decoder's buffer) and
// is not kept alive; and a map too large to remember is printed all the
// same.
func TestMapMemoKeepsItsOwnCopy(t *testing.T) {
	var memo MapMemo
	buf := []byte("regionzone-eu")
	view := func(from, to int) string { return unsafe.String(&buf[from], to-from) }
	m := map[string]string{view(0, 6): view(6, 13)} // "region": "zone-eu", in buf
	want := metaPrint(map[string]string{"region": "zone-eu"})
	require.Equal(t, want, memo.print(m))
	copy(buf, "XXXXXXXXXXXXX") // the buffer is reused for another event
	before := memo.fills
	assert.Equal(t, want, memo.print(map[string]string{"region": "zone-eu"}), "found as it was")
	assert.Equal(t, before, memo.fills, "found, not remembered again")

	large := map[string]string{"k": strings.Repeat("v", mapMemoBytes)}
	assert.Equal(t, metaPrint(large), memo.print(large))
	assert.Equal(t, before, memo.fills, "too large to remember")
	assert.Equal(t, metaPrint(large), memo.print(large))
}

// TestMapMemoKeepsWhatItFinds: a memo forgets the map it found or
// remembered longest ago, so a map a stream keeps bringing stays while
// the maps of a passing change come and go.
func TestMapMemoKeepsWhatItFinds(t *testing.T) {
	var memo MapMemo
	rev := func(i int) map[string]string { return map[string]string{"revision": strings.Repeat("r", i+1)} }
	for i := 0; i < mapMemoSlots; i++ {
		memo.print(rev(i))
	}
	memo.print(rev(0))            // found: now the last one used
	memo.print(rev(mapMemoSlots)) // a new one takes rev(1)'s place
	before := memo.fills
	memo.print(rev(0))
	assert.Equal(t, before, memo.fills, "rev(0) was kept")
	memo.print(rev(1))
	assert.NotEqual(t, before, memo.fills, "rev(1) was forgotten")
}

// TestMapMemoKeepsTheCopyMadeOfAMap: the copy a change made of a map the
// memo found or remembered is handed out for the next map found equal to
// it, and only for as long as the memo keeps that map: once its slot holds
// another map, the copy is not handed out for it, nor for the old one.
func TestMapMemoKeepsTheCopyMadeOfAMap(t *testing.T) {
	var memo MapMemo
	meta := func(rev int) map[string]string {
		return map[string]string{"server": "mucp", "revision": strings.Repeat("r", rev+1)}
	}
	p, ref := memo.find(meta(0))
	require.Equal(t, metaPrint(meta(0)), p)
	assert.Nil(t, memo.copyOf(ref), "nothing kept before a copy is made")
	own := maps.Clone(meta(0))
	memo.keepCopy(ref, own)

	p2, ref2 := memo.find(meta(0))
	require.Equal(t, p, p2)
	got := memo.copyOf(ref2)
	require.NotNil(t, got, "an equal map is found with its copy")
	assert.True(t, sameMapObject(own, got), "the very copy kept")

	// Another map found, and then enough maps to take every slot.
	_, other := memo.find(meta(1))
	assert.Nil(t, memo.copyOf(other), "another map has no copy")
	for i := 2; i < 2+mapMemoSlots; i++ {
		memo.find(meta(i))
	}
	assert.Nil(t, memo.copyOf(ref), "a slot taken by another map drops the copy")
	assert.Nil(t, memo.copyOf(ref2))
	_, again := memo.find(meta(0))
	assert.Nil(t, memo.copyOf(again), "the map remembered afresh has no copy yet")
	memo.keepCopy(ref, own) // a stale reference keeps nothing
	assert.Nil(t, memo.copyOf(again))
	occupant := memoRef{ref.slot, memo.slots[ref.slot].fill} // the map in ref's slot now
	memo.keepCopy(occupant, map[string]string{"the": "occupant's copy"})
	assert.NotNil(t, memo.copyOf(occupant))
	assert.Nil(t, memo.copyOf(ref), "a stale reference finds the copy of the map in its slot now")
	memo.slots[ref.slot].own = nil
	for i := range memo.slots[:memo.used] {
		s := &memo.slots[i]
		kv := map[string]string{}
		for j := 0; j < 2*s.n; j += 2 {
			kv[s.kv[j]] = s.kv[j+1]
		}
		if s.own != nil {
			assert.Equal(t, kv, s.own, "slot %d keeps the copy of another map", i)
		}
	}

	var none *MapMemo
	p, ref = none.find(meta(0))
	assert.Equal(t, metaPrint(meta(0)), p)
	none.keepCopy(ref, own)
	assert.Nil(t, none.copyOf(ref))
	_, ref = memo.find(map[string]string{"k": strings.Repeat("v", mapMemoBytes)})
	assert.Nil(t, memo.copyOf(ref), "a map too large to remember")
}

// sameMapObject reports whether a and b are the same map.
func sameMapObject(a, b map[string]string) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
}

// TestMapMemoTellsSubsetsAndSupersetsApart: maps that are subsets or supersets
// of a remembered one, or differ by an empty key or value, are never
// given its print, and the shared table never hands out a wrong map.
func TestMapMemoTellsSubsetsAndSupersetsApart(t *testing.T) {
	maps := []map[string]string{
		nil, {}, {"": ""}, {"a": ""}, {"": "a"}, {"a": "1"}, {"a": "1", "b": "2"},
		{"a": "1", "b": "2", "c": "3"}, {"b": "2"}, {"a": "2"}, {"a": "1", "": ""},
		{"a": "1", "b": ""}, {"b": "2", "c": "3"}, {"k1": "1", "k2": "2", "k3": "3", "k4": "4", "k5": "5", "k6": "6", "k7": "7", "k8": "8"},
		{"k1": "1", "k2": "2", "k3": "3", "k4": "4", "k5": "5", "k6": "6", "k7": "7"},
	}
	var mm MapMemo
	for round := 0; round < 5; round++ {
		for i, m := range maps {
			for _, j := range []int{i, len(maps) - 1 - i, (i * 5) % len(maps)} {
				m2 := maps[j]
				assert.Equal(t, metaPrint(m2), mm.print(m2), "map %v after %v", m2, m)
				got := copyPrintedMap(m2, metaPrint(m2))
				assert.Equal(t, m2 == nil, got == nil)
				assert.Equal(t, len(m2), len(got))
				for k, v := range m2 {
					gv, ok := got[k]
					assert.True(t, ok && gv == v, "shared map %v for %v", got, m2)
				}
			}
		}
	}
}
