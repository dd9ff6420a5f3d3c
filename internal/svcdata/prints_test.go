package svcdata

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// printHeld is repeatHeld's first version alone: prints are kept for a
// service held in one version.
func printHeld(t *testing.T) []*registry.Service {
	t.Helper()
	held, err := CloneIn(repeatHeld(t)[:1])
	require.NoError(t, err)
	return held
}

// TestPrintsTellWhatTheComparisonTells: wherever the prints decide, they
// decide as the comparison with the data does, over the same changes as
// TestRepeatsAgreesWithTheMerge; and they decide the usual cases, or they
// save nothing.
func TestPrintsTellWhatTheComparisonTells(t *testing.T) {
	held := printHeld(t)
	p := PrintsOf(held)
	require.NotNil(t, p)
	rng := rand.New(rand.NewPCG(3, 4))
	told, repeated := 0, 0
	for i := 0; i < 5000; i++ {
		ids := []string{"a", "b", "c"}
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		ev := repeatEvent(t, held, ids[:1+rng.IntN(3)]...)
		s := ev.Service
		for k := rng.IntN(3); k > 0; k-- {
			n := s.Nodes[rng.IntN(len(s.Nodes))]
			if n == nil {
				continue
			}
			switch rng.IntN(12) {
			case 0:
				n.Address += "0"
			case 1:
				n.Metadata = nil
			case 2:
				n.Metadata = map[string]string{}
			case 3:
				n.Id = []string{"a", "b", "c", "d", "z"}[rng.IntN(5)]
			case 4:
				s.Version = []string{"1", "2", "3"}[rng.IntN(3)]
			case 5:
				s.Endpoints[0].Request.Values[0].Name = "x"
			case 6:
				s.Metadata = map[string]string{"team": "x"}
			case 7:
				ev.Action = []string{"create", "update", "delete"}[rng.IntN(3)]
			case 8:
				s.Nodes = append(s.Nodes, nil)
			case 9:
				s.Endpoints[0].Request.Values = append(s.Endpoints[0].Request.Values, nil)
			case 10:
				s.Nodes = append(s.Nodes, s.Nodes[0])
			case 11:
				s.Endpoints[0].Response = &registry.Value{}
			}
		}
		want := repeats(held, ev)
		got, ok, _ := p.repeats(ev, new(eventPrints))
		if !ok {
			continue
		}
		told++
		require.Equal(t, want, got, "draw %d: %+v", i, s)
		if got {
			repeated++
		}
	}
	assert.Greater(t, told, 4000, "draws the prints decide")
	assert.Greater(t, repeated, 500, "repeats the prints find")
}

// TestPrintsTellDefinitionsApart: pairs that a careless hash confuses,
// each a change that must not be taken for a repeat.
func TestPrintsTellDefinitionsApart(t *testing.T) {
	val := func(name, typ string, sub ...*registry.Value) *registry.Value {
		return &registry.Value{Name: name, Type: typ, Values: sub}
	}
	ep := func(name string, md map[string]string, req, rsp *registry.Value) *registry.Endpoint {
		return &registry.Endpoint{Name: name, Metadata: md, Request: req, Response: rsp}
	}
	version := func(md map[string]string, eps ...*registry.Endpoint) *registry.Service {
		return &registry.Service{Name: "s", Version: "1", Metadata: md, Endpoints: eps}
	}
	for _, tc := range []struct {
		name string
		a, b *registry.Service
	}{
		{"a key's end moved to its value", version(map[string]string{"ab": "c"}), version(map[string]string{"a": "bc"})},
		{"values swapped between keys", version(map[string]string{"a": "1", "b": "2"}), version(map[string]string{"a": "2", "b": "1"})},
		{"nil metadata and empty", version(nil), version(map[string]string{})},
		{"an empty entry", version(map[string]string{}), version(map[string]string{"": ""})},
		{"a Value's type", version(nil, ep("e", nil, val("a", "x"), nil)), version(nil, ep("e", nil, val("a", "y"), nil))},
		{"a Value's count", version(nil, ep("e", nil, val("a", "", val("", "")), nil)), version(nil, ep("e", nil, val("a", ""), nil))},
		{"name and type swapped", version(nil, ep("e", nil, val("A", "B"), nil)), version(nil, ep("e", nil, val("B", "A"), nil))},
		{"a Value nested one level deeper", version(nil, ep("e", nil, val("a", "", val("b", ""), val("c", "")), nil)),
			version(nil, ep("e", nil, val("a", "", val("b", "", val("c", ""))), nil))},
		{"request and response swapped", version(nil, ep("e", nil, val("a", ""), nil)), version(nil, ep("e", nil, nil, val("a", "")))},
		{"a nil Value and an empty one", version(nil, ep("e", nil, nil, nil)), version(nil, ep("e", nil, val("", ""), nil))},
		{"endpoints in another order", version(nil, ep("e", nil, nil, nil), ep("f", nil, nil, nil)),
			version(nil, ep("f", nil, nil, nil), ep("e", nil, nil, nil))},
		{"an endpoint's metadata moved to the version", version(nil, ep("e", map[string]string{"k": "v"}, nil, nil)),
			version(map[string]string{"k": "v"}, ep("e", nil, nil, nil))},
		{"a name split across two strings", version(nil, ep("ab", nil, val("", ""), nil)), version(nil, ep("a", nil, val("b", ""), nil))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pa, ok := versionPrint(tc.a)
			require.True(t, ok)
			pb, ok := versionPrint(tc.b)
			require.True(t, ok)
			assert.NotEqual(t, pa, pb)
		})
	}
	nodes := [][2]*registry.Node{
		{{Id: "a", Address: "b"}, {Id: "b", Address: "a"}},
		{{Id: "ab", Address: ""}, {Id: "a", Address: "b"}},
		{{Id: "a", Metadata: nil}, {Id: "a", Metadata: map[string]string{}}},
		{{Id: "a", Metadata: map[string]string{"x": "1"}}, {Id: "a", Metadata: map[string]string{"x": "1", "y": "1"}}},
	}
	for i, pair := range nodes {
		assert.NotEqual(t, nodePrint(pair[0]), nodePrint(pair[1]), "nodes %d", i)
	}
}

// TestStrPrintReadsEveryByte: a string's print changes with any one bit of
// it, at every length around the bounds of the loads.
func TestStrPrintReadsEveryByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	seen := map[uint64]string{}
	for n := 0; n <= 70; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		base := strPrint(string(b))
		if prev, dup := seen[base]; dup {
			t.Fatalf("%q and %q share a print", prev, b)
		}
		seen[base] = string(b)
		for i := range b {
			for bit := 0; bit < 8; bit++ {
				c := append([]byte(nil), b...)
				c[i] ^= 1 << bit
				require.NotEqual(t, base, strPrint(string(c)), "length %d, byte %d, bit %d", n, i, bit)
			}
		}
		// A string and its prefix, or the same bytes with a zero more.
		require.NotEqual(t, base, strPrint(string(append(b, 0))), "length %d and a zero more", n)
	}
	// Strings of different lengths that a hash folding the length into
	// the bytes' own word confuses whatever its key.
	for _, pair := range [][2]string{{"v1", "v10"}, {"ab", "abc"}, {"1", "113"}, {"10", "101"},
		{"0000", "10000"}, {"1.0.0", "3.0.0.0"}, {"00000000", "100000000"},
		{"AAAAAAAA\x18\x00\x00\x00\x00\x00\x00\x00-rotated", "BBBBBBBB\x18\x00\x00\x00\x00\x00\x00\x00-rotated"}} {
		assert.NotEqual(t, strPrint(pair[0]), strPrint(pair[1]), "%q and %q", pair[0], pair[1])
	}
	// The same bytes, whatever the alignment of the string within memory.
	long := strings.Repeat("0123456789abcdef", 5)
	for off := 0; off < 8; off++ {
		assert.Equal(t, strPrint(strings.Clone(long[off:off+40])), strPrint(long[off:off+40]))
	}
}

// TestPrintsOfWhatTheyCannotStandFor: no prints where they could decide
// otherwise than the comparison, or cost more than they save.
func TestPrintsOfWhatTheyCannotStandFor(t *testing.T) {
	one := func(ids ...string) []*registry.Service {
		held, err := CloneIn([]*registry.Service{svc("s", "1", ids...)})
		require.NoError(t, err)
		return held
	}
	assert.NotNil(t, PrintsOf(one("a", "b")))
	assert.Nil(t, PrintsOf(nil), "nothing held")
	assert.Nil(t, PrintsOf(repeatHeld(t)), "two versions: a node may move between them")
	dup := one("a", "b")
	dup[0].Nodes = append(dup[0].Nodes, &registry.Node{Id: "a", Address: "elsewhere:1"})
	assert.Nil(t, PrintsOf(dup), "an Id twice")
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprint("n", i)
	}
	bigDup := one(many...)
	assert.NotNil(t, PrintsOf(bigDup))
	bigDup[0].Nodes = append(bigDup[0].Nodes, &registry.Node{Id: "n7"})
	assert.Nil(t, PrintsOf(bigDup), "an Id twice among many")
	tooMany := make([]string, maxPrintNodes+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprint("n", i)
	}
	assert.Nil(t, PrintsOf(one(tooMany...)), "more nodes than the bound")
	nilEndpoint := one("a")
	nilEndpoint[0].Endpoints = []*registry.Endpoint{nil}
	assert.Nil(t, PrintsOf(nilEndpoint))

	// An event the prints cannot decide goes to the comparison.
	p := PrintsOf(one("a", "b"))
	cyclic := &registry.Value{Name: "loop"}
	cyclic.Values = []*registry.Value{cyclic}
	ev := &registry.Result{Action: "update", Service: svc("s", "1", "a")}
	ev.Service.Endpoints = []*registry.Endpoint{{Name: "e", Request: cyclic}}
	_, ok, _ := p.repeats(ev, new(eventPrints))
	assert.False(t, ok, "Values nested past the bounds, here in a cycle")
	ev = &registry.Result{Action: "update", Service: svc("s", "1", "a", "b", "a")}
	_, ok, _ = p.repeats(ev, new(eventPrints))
	assert.False(t, ok, "more nodes named than held")
}

// TestPrintsReadStringsThatWereChainKeys holds off a bug: the chain's
// keys were once hashes of "k0" to "k3" under the strings' own seed, so
// that strPrint("k0")^printK0 was 0, and mix(0, y) is 0 whatever y: a
// value under the key "k0", the key of a value "k1", the address of a
// node "k0" and the Id of a node at "k1" were left out of the prints, and
// a change to them was taken for a repeat.
func TestPrintsReadStringsThatWereChainKeys(t *testing.T) {
	assert.NotEqual(t, metaPrint(map[string]string{"k0": "a"}), metaPrint(map[string]string{"k0": "b"}), "metadata under k0 prints alike")
	assert.NotEqual(t, metaPrint(map[string]string{"a": "k1"}), metaPrint(map[string]string{"b": "k1"}), "keys of a value k1 print alike")
	assert.NotEqual(t, nodePrint(&registry.Node{Id: "k0", Address: "10.0.0.1:1"}), nodePrint(&registry.Node{Id: "k0", Address: "10.0.0.2:1"}), "the address of node k0 prints alike")
}

// FuzzPrints draws a version held and an event from the bytes, from a few
// strings that a careless hash confuses (a prefix, a split, the empty
// one), nil and empty maps, and Values that nest, and checks that wherever
// the prints decide, they decide as the comparison with the data does.
func FuzzPrints(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87, 0x98})
	f.Add([]byte{0xff, 0, 0xff, 0, 0x7f, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		words := []string{"", "a", "b", "ab", "ba", "aab", "0123456789abcdefg", "0123456789abcdefh"}
		str := func() string { return words[next()%8] }
		meta := func() map[string]string {
			switch b := next(); b % 4 {
			case 0:
				return nil
			case 1:
				return map[string]string{}
			default:
				m := map[string]string{}
				for i := 0; i < int(b>>2)%4; i++ {
					m[str()] = str()
				}
				return m
			}
		}
		var value func(depth int) *registry.Value
		value = func(depth int) *registry.Value {
			b := next()
			if b%5 == 0 || depth > 3 {
				return nil
			}
			v := &registry.Value{Name: str(), Type: str()}
			for i := 0; i < int(b>>4)%3; i++ {
				v.Values = append(v.Values, value(depth+1))
			}
			return v
		}
		version := func() *registry.Service {
			s := &registry.Service{Name: "s", Version: words[next()%2], Metadata: meta()}
			for i := 0; i < int(next()%3); i++ {
				s.Endpoints = append(s.Endpoints, &registry.Endpoint{Name: str(), Metadata: meta(), Request: value(1), Response: value(1)})
			}
			return s
		}
		node := func() *registry.Node {
			return &registry.Node{Id: words[1+next()%3], Address: str(), Metadata: meta()}
		}
		h := version()
		for i := 0; i < 1+int(next()%3); i++ {
			h.Nodes = append(h.Nodes, node())
		}
		held, err := CloneIn([]*registry.Service{h})
		if err != nil {
			return
		}
		p := PrintsOf(held)
		if p == nil {
			return
		}
		// The event: the held version decoded again, or one drawn, with
		// nodes held or drawn.
		var ev registry.Service
		if next()%2 == 0 {
			ev = *decoded(t, held[0])
			ev.Nodes = nil
		} else {
			ev = *version()
		}
		for i := 0; i < 1+int(next()%3); i++ {
			if b := next(); b%2 == 0 {
				ev.Nodes = append(ev.Nodes, decoded(t, &registry.Service{Nodes: []*registry.Node{held[0].Nodes[int(b>>1)%len(held[0].Nodes)]}}).Nodes[0])
			} else {
				ev.Nodes = append(ev.Nodes, node())
			}
		}
		res := &registry.Result{Action: []string{"create", "update", "delete"}[next()%3], Service: &ev}
		// The items a print counts are the ones a copy's measure counts.
		bare := ev
		bare.Nodes = nil
		if _, items, ok := versionPrintWith(&bare, nil); ok {
			var m measure
			if !m.service(&bare) || m.items != items {
				t.Fatalf("printed %d items, measured %d (%q)", items, m.items, m.reason)
			}
		}
		if got, ok, _ := p.repeats(res, new(eventPrints)); ok {
			if want := repeats(held, res); got != want {
				t.Fatalf("prints say %v, the comparison %v: held %+v, event %+v", got, want, held[0], &ev)
			}
		}
	})
}

// TestPrintsCountWhatACopyMeasures: printing a version counts the items
// that the bounds of a copy count, so that a change to the nodes alone
// keeps them without measuring the version again.
func TestPrintsCountWhatACopyMeasures(t *testing.T) {
	nested := &registry.Value{Name: "a", Type: "A", Values: []*registry.Value{
		{Name: "b", Values: []*registry.Value{{Name: "c"}, nil}}, nil,
	}}
	for name, s := range map[string]*registry.Service{
		"a go-micro server": copyBenchService(0),
		"held":              decoded(t, repeatHeld(t)[0]),
		"nested, with nils": {Name: "s", Version: "1", Metadata: map[string]string{"a": "1"}, Endpoints: []*registry.Endpoint{
			{Name: "e", Metadata: map[string]string{"x": "1", "y": "2"}, Request: nested, Response: nested},
		}},
		"nothing": {Name: "s"},
	} {
		s.Nodes = nil
		_, items, ok := versionPrintWith(s, nil)
		require.True(t, ok, name)
		var m measure
		require.True(t, m.service(s), name)
		assert.Equal(t, m.items, items, name)
	}
}
