package svcdata

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// copyShapes are the shapes of cached data that CopyOut is tested with:
// the node and endpoint counts of each version. They cover no data, empty
// versions, the usual single version, several versions, counts at and
// past four, where the structs of a kind take two allocations instead of
// one (see structs), and large counts.
var copyShapes = []struct {
	name      string
	nodes     []int
	endpoints []int
}{
	{"no versions", nil, nil},
	{"one empty version", []int{0}, []int{0}},
	{"1 node", []int{1}, []int{3}},
	{"10 nodes", []int{10}, []int{3}},
	{"100 nodes", []int{100}, []int{3}},
	{"nodes, no endpoints", []int{7}, []int{0}},
	{"endpoints, no nodes", []int{0}, []int{2}},
	{"two versions", []int{2, 3}, []int{1, 2}},
	{"three versions, some empty", []int{1, 0, 4}, []int{0, 5, 1}},
	{"four of each", []int{1, 1, 1, 1}, []int{1, 1, 1, 1}},
	{"many nodes and endpoints", []int{1024}, []int{256}},
	{"more nodes and endpoints", []int{1025}, []int{257}},
	{"six versions", []int{2, 1, 2, 1, 2, 1}, []int{1, 1, 0, 1, 1, 1}},
}

// shapedServices returns versions of "svc" with the given node and
// endpoint counts, each node and endpoint with metadata of its own, each
// endpoint with a request and a response Value.
func shapedServices(nodes, endpoints []int) []*registry.Service {
	var svcs []*registry.Service
	for v := range nodes {
		s := &registry.Service{Name: "svc", Version: fmt.Sprint(v), Metadata: map[string]string{"v": fmt.Sprint(v)}}
		for i := 0; i < nodes[v]; i++ {
			id := fmt.Sprintf("v%d-n%d", v, i)
			s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: id + ":8080", Metadata: map[string]string{"id": id}})
		}
		for i := 0; i < endpoints[v]; i++ {
			name := fmt.Sprintf("V%d.E%d", v, i)
			s.Endpoints = append(s.Endpoints, &registry.Endpoint{
				Name:     name,
				Request:  &registry.Value{Name: name + "Req"},
				Response: &registry.Value{Name: name + "Rsp"},
				Metadata: map[string]string{"ep": name},
			})
		}
		svcs = append(svcs, s)
	}
	return svcs
}

// describe renders every field that CopyOut copies, and which maps and
// Values it shares, by address, so that a change to any of them shows.
func describe(svcs []*registry.Service) string {
	var b strings.Builder
	for _, s := range svcs {
		fmt.Fprintf(&b, "[%s@%s md=%p", s.Name, s.Version, s.Metadata)
		for _, e := range s.Endpoints {
			fmt.Fprintf(&b, " ep(%s req=%p rsp=%p md=%p)", e.Name, e.Request, e.Response, e.Metadata)
		}
		for _, n := range s.Nodes {
			fmt.Fprintf(&b, " node(%s %s md=%p)", n.Id, n.Address, n.Metadata)
		}
		b.WriteString("]")
	}
	return b.String()
}

// A copy is equal to the data held, shares its metadata maps and Values,
// and nothing else: a caller that changes or appends to any part of its
// copy changes neither the data held, nor another caller's copy, nor
// another part of its own copy (the structs of a copy share allocations).
func TestCopyOutIsTheCallersOwn(t *testing.T) {
	for _, shape := range copyShapes {
		t.Run(shape.name, func(t *testing.T) {
			held := shapedServices(shape.nodes, shape.endpoints)
			want := describe(held)
			wantVersion := make([]string, len(held))
			for i := range held {
				wantVersion[i] = describe(held[i : i+1])
			}

			mine, theirs := CopyOut(held), CopyOut(held)
			require.Equal(t, want, describe(mine))
			require.Len(t, mine, len(held))

			// Every struct is new, and no two of them are one.
			seen := map[any]bool{}
			distinct := func(p any, what string) {
				require.False(t, seen[p], "%s shared within the copy", what)
				seen[p] = true
			}
			for i, s := range mine {
				require.NotSame(t, held[i], s)
				distinct(s, "service")
				for j, n := range s.Nodes {
					require.NotSame(t, held[i].Nodes[j], n)
					distinct(n, "node")
				}
				for j, e := range s.Endpoints {
					require.NotSame(t, held[i].Endpoints[j], e)
					distinct(e, "endpoint")
				}
			}

			// Appending to any slice leaves its neighbours alone.
			mine = append(mine, &registry.Service{Name: "appended"})
			require.Equal(t, want, describe(mine[:len(held)]), "after an append to the services")
			for i, s := range mine[:len(held)] {
				s.Nodes = append(s.Nodes, &registry.Node{Id: fmt.Sprint("appended to ", i)})
				s.Endpoints = append(s.Endpoints, &registry.Endpoint{Name: fmt.Sprint("appended to ", i)})
			}
			for i, s := range mine[:len(held)] {
				n, e := len(held[i].Nodes), len(held[i].Endpoints)
				trimmed := *s
				trimmed.Nodes, trimmed.Endpoints = s.Nodes[:n], s.Endpoints[:e]
				assert.Equal(t, wantVersion[i], describe([]*registry.Service{&trimmed}), "version %d after the appends", i)
				assert.Equal(t, fmt.Sprint("appended to ", i), s.Nodes[n].Id)
				assert.Equal(t, fmt.Sprint("appended to ", i), s.Endpoints[e].Name)
			}

			// Changing every field, and every element of every slice.
			for _, s := range mine {
				s.Name, s.Version, s.Metadata = "changed", "changed", map[string]string{"changed": "1"}
				for j, n := range s.Nodes {
					n.Id, n.Address, n.Metadata = "changed", "changed", nil
					s.Nodes[j] = &registry.Node{Id: "replaced"}
				}
				for j, e := range s.Endpoints {
					e.Name, e.Request, e.Response, e.Metadata = "changed", nil, nil, nil
					s.Endpoints[j] = &registry.Endpoint{Name: "replaced"}
				}
			}
			assert.Equal(t, want, describe(held), "the data held")
			assert.Equal(t, want, describe(theirs), "another caller's copy")
			assert.Equal(t, want, describe(CopyOut(held)), "a later copy")
		})
	}
}

// A copy keeps an empty slice empty and a nil one nil, as they encode
// differently (JSON: [] and null), without sharing the one held.
func TestCopyOutKeepsEmptyAndNilSlices(t *testing.T) {
	held := []*registry.Service{
		{Name: "svc", Version: "1", Nodes: make([]*registry.Node, 0, 4), Endpoints: nil},
		{Name: "svc", Version: "2", Nodes: nil, Endpoints: []*registry.Endpoint{}},
	}
	cp := CopyOut(held)
	require.Len(t, cp, 2)
	assert.NotNil(t, cp[0].Nodes)
	assert.Empty(t, cp[0].Nodes)
	assert.Zero(t, cap(cp[0].Nodes), "an append must not write into the slice held")
	assert.Nil(t, cp[0].Endpoints)
	assert.Nil(t, cp[1].Nodes)
	assert.NotNil(t, cp[1].Endpoints)
	assert.Empty(t, cp[1].Endpoints)
}

// A copy takes the same number of allocations whatever the number of
// nodes: for each kind of struct (services, endpoints, nodes), none for
// none, one for up to four, with the slice of pointers to them, and two
// past four.
func TestCopyOutAllocations(t *testing.T) {
	allocs := func(nodes, endpoints []int) float64 {
		held := shapedServices(nodes, endpoints)
		return testing.AllocsPerRun(20, func() { CopyOut(held) })
	}
	for _, n := range []int{10, 100, 1000, 10000} {
		assert.Equal(t, 4.0, allocs([]int{n}, []int{3}), "%d nodes, three endpoints", n)
		assert.Equal(t, 4.0, allocs([]int{n / 2, n - n/2}, []int{1, 2}), "%d nodes in two versions", n)
	}
	assert.Equal(t, 3.0, allocs([]int{4}, []int{3}), "four nodes")
	assert.Equal(t, 2.0, allocs([]int{0}, []int{3}), "no nodes")
	assert.Equal(t, 3.0, allocs([]int{5}, []int{0}), "no endpoints")
	assert.Equal(t, 0.0, allocs(nil, nil), "no versions")
	assert.Equal(t, 3.0, allocs([]int{1, 1, 1, 1}, []int{1, 1, 1, 1}), "four versions")
	assert.Equal(t, 6.0, allocs([]int{1, 1, 1, 1, 1}, []int{1, 1, 1, 1, 1}), "five versions")
}
