package cache

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
	var memo mapMemo
	found := 0
	for i := 0; i < 20000; i++ {
		m := draw()
		if rng.IntN(4) > 0 {
			m = maps.Clone(pool[rng.IntN(len(pool))])
		}
		before := memo.slots
		got := memo.print(m)
		require.Equal(t, metaPrint(m), got, "draw %d: %v", i, m)
		if len(m) > 0 && len(m) <= maxSharedMapLen && memo.slots == before {
			found++
		}
	}
	assert.Greater(t, found, 5000, "maps found among those remembered")
}

// TestMapMemoTellsMapsApart: the maps a memo must not take for one it
// holds.
func TestMapMemoTellsMapsApart(t *testing.T) {
	var memo mapMemo
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
	var none *mapMemo
	assert.Equal(t, metaPrint(held), none.print(held), "no memo walks the map")
}

// TestMapMemoKeepsItsOwnCopy: a memo copies what it remembers, so the
// memory of the event it came from may be reused (a decoder's buffer) and
// is not kept alive; and a map too large to remember is printed all the
// same.
func TestMapMemoKeepsItsOwnCopy(t *testing.T) {
	var memo mapMemo
	buf := []byte("regionzone-eu")
	view := func(from, to int) string { return unsafe.String(&buf[from], to-from) }
	m := map[string]string{view(0, 6): view(6, 13)} // "region": "zone-eu", in buf
	want := metaPrint(map[string]string{"region": "zone-eu"})
	require.Equal(t, want, memo.print(m))
	copy(buf, "XXXXXXXXXXXXX") // the buffer is reused for another event
	before := memo.slots
	assert.Equal(t, want, memo.print(map[string]string{"region": "zone-eu"}), "found as it was")
	assert.Equal(t, before, memo.slots, "found, not remembered again")

	large := map[string]string{"k": strings.Repeat("v", mapMemoBytes)}
	assert.Equal(t, metaPrint(large), memo.print(large))
	assert.Equal(t, before, memo.slots, "too large to remember")
	assert.Equal(t, metaPrint(large), memo.print(large))
}

// TestMapMemoKeepsWhatItFinds: a memo forgets the map it found or
// remembered longest ago, so a map a stream keeps bringing stays while
// the maps of a passing change come and go.
func TestMapMemoKeepsWhatItFinds(t *testing.T) {
	var memo mapMemo
	rev := func(i int) map[string]string { return map[string]string{"revision": strings.Repeat("r", i+1)} }
	for i := 0; i < mapMemoSlots; i++ {
		memo.print(rev(i))
	}
	memo.print(rev(0))            // found: now the last one used
	memo.print(rev(mapMemoSlots)) // a new one takes rev(1)'s place
	before := memo.slots
	memo.print(rev(0))
	assert.Equal(t, before, memo.slots, "rev(0) was kept")
	memo.print(rev(1))
	assert.NotEqual(t, before, memo.slots, "rev(1) was forgotten")
}
