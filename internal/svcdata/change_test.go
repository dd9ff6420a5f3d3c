package svcdata

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// changeHeld is one version of n nodes, as the cache holds it, with the
// metadata that real nodes carry and the cases a careless merge confuses:
// nil and empty maps.
func changeHeld(t *testing.T, n int) []*registry.Service {
	t.Helper()
	s := repeatHeld(t)[0]
	v := &registry.Service{Name: s.Name, Version: s.Version, Metadata: s.Metadata, Endpoints: s.Endpoints}
	for i := 0; i < n; i++ {
		v.Nodes = append(v.Nodes, &registry.Node{Id: fmt.Sprintf("n%d", i), Address: fmt.Sprintf("10.0.0.%d:1", i), Metadata: changeMeta(i)})
	}
	held, err := CloneIn([]*registry.Service{v})
	require.NoError(t, err)
	return held
}

func changeMeta(i int) map[string]string {
	switch i % 4 {
	case 0:
		return nil
	case 1:
		return map[string]string{}
	case 2:
		return map[string]string{"zone": "eu"}
	}
	return map[string]string{"broker": "http", "protocol": "mucp", "registry": "etcd", "server": "mucp", "transport": "http"}
}

// TestChangeIsTheMerge: wherever an event's change is applied to the
// nodes alone, it gives the data, the news and the prints that copying the
// event and merging it give, keeps none of the event's memory, and leaves
// the data held as it was; and it is the path the usual changes take.
func TestChangeIsTheMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	changes := 0
	memo := new(MapMemo)
	for _, size := range []int{1, 3, linearPrints, linearPrints + 1, 40} {
		held := changeHeld(t, size)
		before := decoded(t, held[0])
		snap := &Snapshot{Services: held, Prints: PrintsOf(held)}
		require.NotNil(t, snap.Prints)
		for i := 0; i < 1000; i++ {
			ids := []string{}
			for k := 1 + rng.IntN(3); k > 0; k-- {
				ids = append(ids, fmt.Sprintf("n%d", rng.IntN(size+2))) // some new
			}
			res := repeatEvent(t, held, "n0")
			res.Service.Nodes = nil
			for _, id := range ids {
				n := &registry.Node{Id: id, Address: "10.1.0.1:1", Metadata: changeMeta(rng.IntN(4))}
				if h := nodeByID(held[0].Nodes, id); h != nil {
					switch rng.IntN(3) {
					case 0:
						n = decoded(t, &registry.Service{Nodes: []*registry.Node{h}}).Nodes[0] // held as it is
					case 1:
						n.Address = h.Address // only the metadata may differ, or be nil for empty
					}
				}
				res.Service.Nodes = append(res.Service.Nodes, n)
			}
			switch rng.IntN(8) {
			case 0:
				res.Service.Endpoints[0].Request.Values[0].Type = "int" // the version changed too
			case 1:
				res.Action = "create"
			}
			p := Prepare(res, snap, false, memo)
			if p.Repeat {
				continue
			}
			want, wantNews, ok := MergeEvent(held, copyEvent(res, held))
			require.True(t, ok)
			ch := p.Change
			if ch.Next == nil {
				require.NotNil(t, p.ev, "draw %d: neither a change nor a copy", i)
				continue
			}
			changes++
			require.Equal(t, want, ch.Next, "size %d, draw %d: %v", size, i, ids)
			assert.Equal(t, wantNews, ch.News, "size %d, draw %d: news", size, i)
			require.Equal(t, PrintsOf(ch.Next), ch.Prints, "size %d, draw %d: prints", size, i)
			v := ch.Next[0]
			require.True(t, SameArray(held[0].Endpoints, v.Endpoints), "the version's endpoints are the ones held")
			require.Equal(t, reflect.ValueOf(held[0].Metadata).Pointer(), reflect.ValueOf(v.Metadata).Pointer(), "the version's metadata is the map held")
			for _, n := range v.Nodes {
				for _, e := range res.Service.Nodes {
					require.NotSame(t, e, n, "an event's node kept")
					if n.Metadata != nil && e.Metadata != nil {
						require.NotEqual(t, reflect.ValueOf(e.Metadata).Pointer(), reflect.ValueOf(n.Metadata).Pointer(), "an event's map kept")
					}
				}
			}
			require.Equal(t, before, decoded(t, held[0]), "the data held changed")
		}
	}
	assert.Greater(t, changes, 3000, "changes to the nodes alone")
}

// TestChangeSeesTheVersion: an event whose version differs from the one
// held, in any part, is not applied to the nodes alone.
func TestChangeSeesTheVersion(t *testing.T) {
	held := changeHeld(t, 3)
	snap := &Snapshot{Services: held, Prints: PrintsOf(held)}
	memo := new(MapMemo)
	for name, change := range map[string]func(s *registry.Service){
		"metadata":         func(s *registry.Service) { s.Metadata = map[string]string{"team": "y"} },
		"nil metadata":     func(s *registry.Service) { s.Metadata = nil },
		"an endpoint":      func(s *registry.Service) { s.Endpoints[0].Name = "H.Other" },
		"a Value":          func(s *registry.Service) { s.Endpoints[0].Request.Values[0].Name = "key" },
		"no endpoints":     func(s *registry.Service) { s.Endpoints = nil },
		"endpoint md":      func(s *registry.Service) { s.Endpoints[0].Metadata = nil },
		"another endpoint": func(s *registry.Service) { s.Endpoints = append(s.Endpoints, &registry.Endpoint{Name: "x"}) },
	} {
		res := repeatEvent(t, held, "n1")
		res.Service.Nodes[0].Address = "10.9.9.9:1"
		change(res.Service)
		p := Prepare(res, snap, false, memo)
		assert.Nil(t, p.Change.Next, name)
		require.NotNil(t, p.ev, name)
		want, _, _ := MergeEvent(held, p.ev)
		a, b := *held[0], *want[0]
		a.Nodes, b.Nodes = nil, nil
		assert.NotEqual(t, a, b, name) // the version the merge gives differs
	}
}

// TestChangeKeepsTheBoundsOfACopy: a change whose nodes would take the
// event past the items a copy allows is not applied to the nodes alone;
// the copy then refuses it, as it refuses any event too large.
func TestChangeKeepsTheBoundsOfACopy(t *testing.T) {
	held := changeHeld(t, 3)
	p := PrintsOf(held)
	res := repeatEvent(t, held, "n1")
	res.Service.Nodes[0].Address = "10.9.9.9:1"
	res.Service.Nodes[0].Metadata = map[string]string{"a": "1", "b": "2"}
	var heard eventPrints
	_, told, version := p.repeats(res, &heard)
	require.True(t, told && version)
	_, ok := changeNodes(held[0], res.Service, p, &heard)
	require.True(t, ok, "within the bounds")
	heard.items = maxCopyItems - 2 // the node and its two entries make one too many
	_, ok = changeNodes(held[0], res.Service, p, &heard)
	assert.False(t, ok, "past the bounds")
	heard.items = maxCopyItems - 3
	_, ok = changeNodes(held[0], res.Service, p, &heard)
	assert.True(t, ok, "at the bounds")
}

// TestChangeTakesTheCopyTheMemoKeeps: a change takes the copy of a node's
// metadata that the stream's memo keeps for it, so equal maps stay shared
// across changes without the shared table's lookup; and it never takes
// the copy of another map, where the event has more maps than the memo
// has slots and a slot is taken again between the event's print and its
// change, nor from a slot taken by a newer map since.
func TestChangeTakesTheCopyTheMemoKeeps(t *testing.T) {
	held := changeHeld(t, mapMemoSlots+2) // an event names no more nodes than held, or the comparison decides
	snap := &Snapshot{Services: held, Prints: PrintsOf(held)}
	memo := new(MapMemo)
	meta := func(k int) map[string]string {
		return map[string]string{"server": "mucp", "revision": fmt.Sprint("r", k)}
	}
	event := func(ks ...int) *registry.Result {
		res := repeatEvent(t, held, "n0")
		res.Service.Nodes = nil
		for _, k := range ks {
			res.Service.Nodes = append(res.Service.Nodes, &registry.Node{Id: fmt.Sprint("x", k), Address: "10.9.0.1:1", Metadata: meta(k)})
		}
		return res
	}
	change := func(res *registry.Result) []*registry.Service {
		t.Helper()
		p := Prepare(res, snap, false, memo)
		require.NotNil(t, p.Change.Next, "a change to the nodes alone")
		want, _, ok := MergeEvent(held, copyEvent(res, held))
		require.True(t, ok)
		require.Equal(t, want, p.Change.Next)
		return p.Change.Next
	}
	many := make([]int, mapMemoSlots+2) // more maps than slots: the first ones' slots are taken again
	for i := range many {
		many[i] = i
	}
	change(event(many...))
	change(event(many...))
	first := change(event(0)) // remembered again, in a slot that held another map and its copy
	second := change(event(0))
	md := func(next []*registry.Service) map[string]string { return nodeByID(next[0].Nodes, "x0").Metadata }
	assert.True(t, sameMapObject(md(first), md(second)), "equal maps shared across changes")
	assert.True(t, sameMapObject(md(second), copyPrintedMap(meta(0), metaPrint(meta(0)))), "the map the shared table holds")
	_, ref := memo.find(meta(0))
	assert.True(t, sameMapObject(md(second), memo.copyOf(ref)), "the copy kept by the memo")
}

// acBase is version "1" of name with n nodes, endpoints with nested
// Values, and the metadata cases a careless merge confuses.
func acBase(name string, n int) *registry.Service {
	s := &registry.Service{
		Name:     name,
		Version:  "1",
		Metadata: map[string]string{"team": "x"},
		Endpoints: []*registry.Endpoint{{
			Name:     "H.Call",
			Request:  &registry.Value{Name: "Req", Type: "Req", Values: []*registry.Value{{Name: "id", Type: "string"}}},
			Response: &registry.Value{Name: "Rsp", Type: "Rsp"},
			Metadata: map[string]string{"stream": "false"},
		}},
	}
	for i := 0; i < n; i++ {
		s.Nodes = append(s.Nodes, &registry.Node{Id: fmt.Sprintf("n%d", i), Address: fmt.Sprintf("10.0.0.%d:1", i), Metadata: acMeta(i)})
	}
	return s
}

// acMeta: nil, empty, small, and one too large to share (past
// maxSharedMapLen).
func acMeta(i int) map[string]string {
	switch i % 5 {
	case 0:
		return nil
	case 1:
		return map[string]string{}
	case 2:
		return map[string]string{"zone": "eu"}
	case 3:
		return map[string]string{"broker": "http", "protocol": "mucp", "registry": "etcd", "server": "mucp", "transport": "http"}
	}
	m := map[string]string{}
	for k := 0; k < maxSharedMapLen+2; k++ {
		m[fmt.Sprintf("k%d", k)] = fmt.Sprintf("v%d", k)
	}
	return m
}

// acChange is an update of version 1 of held (one version) naming the
// given nodes, each fresh, as a registry decodes them.
func acChange(t *testing.T, held *registry.Service, nodes ...*registry.Node) *registry.Result {
	s := decoded(t, &registry.Service{Name: held.Name, Version: held.Version, Metadata: held.Metadata, Endpoints: held.Endpoints})
	s.Nodes = decoded(t, &registry.Service{Nodes: nodes}).Nodes
	return &registry.Result{Action: "update", Service: s}
}

// TestChangeChainsAreTheMerge: long chains of prepared changes,
// each applied to the last one's data and prints (as the cache stores
// them), against copyEvent + MergeEvent; with events heavy in duplicate
// Ids, past the four event prints kept, and at maxPrintNodes.
func TestChangeChainsAreTheMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 1))
	for _, size := range []int{2, 5, linearPrints, linearPrints + 1, maxPrintNodes - 3, maxPrintNodes} {
		held, err := CloneIn([]*registry.Service{acBase("s", size)})
		require.NoError(t, err)
		snap := &Snapshot{Services: held, Prints: PrintsOf(held)}
		require.NotNil(t, snap.Prints)
		changes, fallbacks := 0, 0
		steps := 400
		if size > 100 {
			steps = 60
		}
		for i := 0; i < steps; i++ {
			s := decoded(t, &registry.Service{Name: "s", Version: "1", Metadata: held[0].Metadata, Endpoints: held[0].Endpoints})
			k := 1 + rng.IntN(9)
			for j := 0; j < k; j++ {
				id := fmt.Sprintf("n%d", rng.IntN(size+3))
				if j > 0 && rng.IntN(3) == 0 {
					id = s.Nodes[rng.IntN(len(s.Nodes))].Id // a duplicate
				}
				var n *registry.Node
				if h := nodeByID(snap.Services[0].Nodes, id); h != nil && rng.IntN(2) == 0 {
					n = decoded(t, &registry.Service{Nodes: []*registry.Node{h}}).Nodes[0]
				} else {
					n = &registry.Node{Id: id, Address: fmt.Sprint("a", rng.IntN(2)), Metadata: acMeta(rng.IntN(5))}
				}
				s.Nodes = append(s.Nodes, n)
			}
			res := &registry.Result{Action: "update", Service: s}
			want, wantNews, ok := MergeEvent(snap.Services, copyEvent(res, snap.Services))
			require.True(t, ok)
			p := Prepare(res, snap, false, nil)
			switch {
			case p.Repeat:
				require.Equal(t, want, snap.Services, "size %d step %d: a change taken for a repeat", size, i)
				continue
			case p.Change.Next == nil:
				fallbacks++
				snap = &Snapshot{Services: want, Prints: PrintsOf(want)}
				continue
			}
			changes++
			require.Equal(t, want, p.Change.Next, "size %d step %d", size, i)
			require.Equal(t, wantNews, p.Change.News, "size %d step %d: news", size, i)
			require.Equal(t, PrintsOf(want), p.Change.Prints, "size %d step %d: prints", size, i)
			snap = &Snapshot{Services: p.Change.Next, Prints: p.Change.Prints}
		}
		t.Logf("size %d: %d changes, %d copies", size, changes, fallbacks)
		if size <= 100 {
			// (Near maxPrintNodes the bound counts the event's nodes
			// with the held ones, so most changes are copied.)
			assert.Greater(t, changes, steps/4)
		}
	}
}
