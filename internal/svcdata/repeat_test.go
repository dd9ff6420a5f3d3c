package svcdata

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// repeatHeld is data as the cache holds it: two versions, nodes with
// metadata (one with an empty map), endpoints with nested values.
func repeatHeld(t *testing.T) []*registry.Service {
	t.Helper()
	v1 := svc("s", "1", "a", "b", "c")
	v1.Metadata = map[string]string{"team": "x"}
	v1.Nodes[1].Metadata = map[string]string{"zone": "eu"}
	v1.Nodes[2].Metadata = map[string]string{}
	v1.Endpoints = []*registry.Endpoint{{
		Name:     "H.Call",
		Request:  &registry.Value{Name: "Req", Type: "Req", Values: []*registry.Value{{Name: "id", Type: "string"}}},
		Metadata: map[string]string{"stream": "false"},
	}}
	v2 := svc("s", "2", "d")
	held, err := CloneIn([]*registry.Service{v1, v2})
	require.NoError(t, err)
	return held
}

// repeatEvent is an update of version 1 naming nodes of held, each a fresh
// copy, with the version's metadata and endpoints, as a registry decodes
// them.
func repeatEvent(t *testing.T, held []*registry.Service, ids ...string) *registry.Result {
	t.Helper()
	v := held[0]
	s := decoded(t, &registry.Service{Name: v.Name, Version: v.Version, Metadata: v.Metadata, Endpoints: v.Endpoints})
	for _, id := range ids {
		n := decoded(t, &registry.Service{Nodes: []*registry.Node{nodeByID(v.Nodes, id)}})
		s.Nodes = append(s.Nodes, n.Nodes[0])
	}
	return &registry.Result{Action: "update", Service: s}
}

// decoded is s as a registry decodes it: every map, Value and string its
// own. (A copy of the cache's shares maps the cache holds already.)
func decoded(t *testing.T, s *registry.Service) *registry.Service {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var d registry.Service
	require.NoError(t, json.Unmarshal(b, &d))
	return &d
}

// merged is what the full path makes of ev: a copy, merged.
func merged(t *testing.T, cur []*registry.Service, ev *registry.Result) ([]*registry.Service, bool) {
	t.Helper()
	c, err := cloneEvent(ev, cur)
	require.NoError(t, err)
	return ApplyEvent(cur, c)
}

// TestRepeatsOnlyWhatChangesNothing: an event that repeats takes a path
// that keeps the data as it is, so repeats must hold only where the full
// merge would give the same data; and the usual re-announcements must be
// seen as repeats, or the path is never taken.
func TestRepeatsOnlyWhatChangesNothing(t *testing.T) {
	held := repeatHeld(t)
	for _, tc := range []struct {
		name   string
		change func(ev *registry.Result)
		want   bool
	}{
		{"a node again", nil, true},
		{"several nodes again, in another order", func(ev *registry.Result) {
			ev.Service.Nodes = append(ev.Service.Nodes, repeatEvent(t, held, "c", "b").Service.Nodes...)
		}, true},
		{"a nil node among them", func(ev *registry.Result) { ev.Service.Nodes = append(ev.Service.Nodes, nil) }, true},
		{"create", func(ev *registry.Result) { ev.Action = "create" }, true},
		{"delete", func(ev *registry.Result) { ev.Action = "delete" }, false},
		{"an unknown action", func(ev *registry.Result) { ev.Action = "expire" }, false},
		{"no node", func(ev *registry.Result) { ev.Service.Nodes = nil }, false},
		{"only a nil node", func(ev *registry.Result) { ev.Service.Nodes = []*registry.Node{nil} }, false},
		{"a new node", func(ev *registry.Result) {
			ev.Service.Nodes = append(ev.Service.Nodes, &registry.Node{Id: "e", Address: "e:1"})
		}, false},
		{"a node at a new address", func(ev *registry.Result) { ev.Service.Nodes[0].Address = "a:9" }, false},
		{"a node's metadata", func(ev *registry.Result) { ev.Service.Nodes[0].Metadata["k"] = "v" }, false},
		{"nil metadata for empty", func(ev *registry.Result) {
			ev.Service.Nodes = repeatEvent(t, held, "c").Service.Nodes
			ev.Service.Nodes[0].Metadata = nil
		}, false},
		{"the version's metadata", func(ev *registry.Result) { ev.Service.Metadata["team"] = "y" }, false},
		{"the version's metadata nil", func(ev *registry.Result) { ev.Service.Metadata = nil }, false},
		{"an endpoint's name", func(ev *registry.Result) { ev.Service.Endpoints[0].Name = "H.Other" }, false},
		{"an endpoint's metadata", func(ev *registry.Result) { ev.Service.Endpoints[0].Metadata["stream"] = "true" }, false},
		{"a nested value", func(ev *registry.Result) { ev.Service.Endpoints[0].Request.Values[0].Type = "int" }, false},
		{"a value more", func(ev *registry.Result) {
			r := ev.Service.Endpoints[0].Request
			r.Values = append(r.Values, &registry.Value{Name: "n"})
		}, false},
		{"an endpoint more", func(ev *registry.Result) {
			ev.Service.Endpoints = append(ev.Service.Endpoints, &registry.Endpoint{Name: "H.More"})
		}, false},
		{"no endpoints", func(ev *registry.Result) { ev.Service.Endpoints = nil }, false},
		{"a node of another version", func(ev *registry.Result) {
			ev.Service.Nodes = append(ev.Service.Nodes, &registry.Node{Id: "d", Address: "d:8080", Metadata: map[string]string{"id": "d"}})
		}, false},
		{"another version", func(ev *registry.Result) { ev.Service.Version = "3" }, false},
		{"the same Id twice, differing", func(ev *registry.Result) {
			n := *ev.Service.Nodes[0]
			n.Address = "a:9"
			ev.Service.Nodes = append(ev.Service.Nodes, &n)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := repeatEvent(t, held, "a")
			if tc.change != nil {
				tc.change(ev)
			}
			got := repeats(held, ev)
			assert.Equal(t, tc.want, got)
			if next, ok := merged(t, held, ev); got {
				assert.True(t, ok)
				assert.True(t, reflect.DeepEqual(held, next), "a repeat changes the data: %v", next)
			}
		})
	}
	assert.False(t, repeats(nil, repeatEvent(t, held, "a")), "nothing held")

	// An answer may list one Id in two versions; an event for one of
	// them moves the node out of the other.
	dup := repeatHeld(t)
	dup[1].Nodes = append(dup[1].Nodes, dup[0].Nodes[0])
	ev := repeatEvent(t, dup, "a")
	assert.False(t, repeats(dup, ev), "a node held in another version too")
	next, _ := merged(t, dup, ev)
	assert.NotEqual(t, nodeIDs(dup), nodeIDs(next))
}

// TestRepeatsAgreesWithTheMerge draws events from small changes to the
// data held, and checks the one direction that matters for correctness:
// whatever repeats accepts, the full merge leaves as it was.
func TestRepeatsAgreesWithTheMerge(t *testing.T) {
	held := repeatHeld(t)
	rng := rand.New(rand.NewPCG(1, 2))
	seen := 0
	for i := 0; i < 3000; i++ {
		ids := []string{"a", "b", "c"}
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		ev := repeatEvent(t, held, ids[:1+rng.IntN(3)]...)
		s := ev.Service
		for k := rng.IntN(3); k > 0; k-- {
			n := s.Nodes[rng.IntN(len(s.Nodes))]
			switch rng.IntN(8) {
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
			}
		}
		if !repeats(held, ev) {
			continue
		}
		seen++
		next, ok := merged(t, held, ev)
		require.True(t, ok)
		require.True(t, reflect.DeepEqual(held, next), "draw %d: a repeat that changes the data: %+v", i, s)
	}
	assert.Greater(t, seen, 500, "draws that repeat")
}
