package svcdata

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// withValue returns a one-node service whose one endpoint has req as its
// Request.
func withValue(req *registry.Value) *registry.Service {
	s := svc("svc", "1", "n1")
	s.Endpoints = []*registry.Endpoint{{Name: "Svc.Call", Request: req, Response: &registry.Value{Name: "Rsp"}}}
	return s
}

// chain returns a Value nested depth levels deep, counting itself.
func chain(depth int) *registry.Value {
	v := &registry.Value{Name: "leaf", Type: "string"}
	for i := 1; i < depth; i++ {
		v = &registry.Value{Name: fmt.Sprint("level-", depth-i), Type: "Msg", Values: []*registry.Value{v}}
	}
	return v
}

// doubling returns a Value of levels distinct nodes in which every node
// lists the next one twice: 2^levels - 1 paths.
func doubling(levels int) *registry.Value {
	v := &registry.Value{Name: "leaf", Type: "string"}
	for i := 1; i < levels; i++ {
		v = &registry.Value{Name: fmt.Sprint("level-", levels-i), Type: "Msg", Values: []*registry.Value{v, v}}
	}
	return v
}

// render writes v out once per path, as an encoder would.
func render(v *registry.Value) string {
	if v == nil {
		return "nil"
	}
	parts := make([]string, len(v.Values))
	for i, sub := range v.Values {
		parts[i] = render(sub)
	}
	return fmt.Sprintf("%s:%s(%s)", v.Name, v.Type, strings.Join(parts, ","))
}

func requireTooLarge(t *testing.T, err error, want string) {
	t.Helper()
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrAnswerTooLarge), "%v", err)
	assert.Contains(t, err.Error(), `service "svc" version "1"`)
	assert.Contains(t, err.Error(), want)
}

// A cyclic Value tree used to recurse until the stack overflowed, which
// no recover catches: the process died.
func TestCloneRefusesCyclicValues(t *testing.T) {
	self := &registry.Value{Name: "self"}
	self.Values = []*registry.Value{self}
	a, b, c := &registry.Value{Name: "a"}, &registry.Value{Name: "b"}, &registry.Value{Name: "c"}
	a.Values = []*registry.Value{{Name: "leaf"}, b}
	b.Values = []*registry.Value{c}
	c.Values = []*registry.Value{a}
	for name, v := range map[string]*registry.Value{"self": self, "a-b-c-a": a} {
		t.Run(name, func(t *testing.T) {
			_, err := cloneService(withValue(v))
			requireTooLarge(t, err, `endpoint "Svc.Call" request: Values form a cycle`)
			_, err = CloneIn([]*registry.Service{svc("svc", "0", "n0"), withValue(v)})
			requireTooLarge(t, err, "cycle")

			s := withValue(nil)
			s.Endpoints[0].Response = v
			_, err = cloneService(s)
			requireTooLarge(t, err, `endpoint "Svc.Call" response: Values form a cycle`)
		})
	}
}

func TestCloneBoundsTheDepthOfValues(t *testing.T) {
	c, err := cloneService(withValue(chain(maxValueDepth)))
	require.NoError(t, err)
	assert.Equal(t, render(chain(maxValueDepth)), render(c.Endpoints[0].Request))

	_, err = cloneService(withValue(chain(maxValueDepth + 1)))
	requireTooLarge(t, err, "Values nested deeper than 32 levels")
}

// 21 distinct Values, each listing the next twice, took 606 ms and 144 MiB
// to copy once per path. The copy is now refused after a bounded walk.
func TestCloneRefusesValuesThatExplodeThroughSharing(t *testing.T) {
	s := withValue(doubling(21))
	_, err := cloneService(s)
	requireTooLarge(t, err, "more than 65536 Value nodes")

	var m measure
	require.False(t, m.service(s))
	assert.Equal(t, maxValueNodes+1, m.values, "the walk stops at the bound")
}

// Below the bounds, a Value reached by several paths is copied once, and
// stays shared in the copy.
func TestCloneCopiesSharedValuesOnce(t *testing.T) {
	const levels = 12 // 4095 paths over 12 Values
	in := withValue(doubling(levels))
	c, err := cloneService(in)
	require.NoError(t, err)
	v, orig := c.Endpoints[0].Request, in.Endpoints[0].Request
	assert.Equal(t, render(orig), render(v))
	for v.Values != nil {
		assert.NotSame(t, orig, v, "never aliases the registry's Value")
		assert.Same(t, v.Values[0], v.Values[1], "copied once, shared in the copy")
		v, orig = v.Values[0], orig.Values[0]
	}

	// About two allocations per distinct Value, not per path.
	allocs := testing.AllocsPerRun(20, func() { _, _ = cloneService(in) })
	assert.Less(t, allocs, float64(4*levels+20))
}

// Small trees are copied into one buffer; a shared Value there is copied
// per path, which memoValues bounds, and reads back the same.
func TestCloneCopiesSmallSharedValuesAsTrees(t *testing.T) {
	in := withValue(doubling(5)) // 31 paths
	c, err := cloneService(in)
	require.NoError(t, err)
	assert.Equal(t, render(in.Endpoints[0].Request), render(c.Endpoints[0].Request))
}

// Values slices of a copy share one buffer: a reader's append must
// reallocate rather than overwrite the next Value's entries.
func TestCloneCapsValuesSlices(t *testing.T) {
	c, err := cloneService(withValue(&registry.Value{Name: "Req", Values: []*registry.Value{
		{Name: "x", Values: []*registry.Value{{Name: "x1"}}},
		{Name: "y", Values: []*registry.Value{{Name: "y1"}}},
	}}))
	require.NoError(t, err)
	req := c.Endpoints[0].Request
	x := req.Values[0]
	x.Values = append(x.Values, &registry.Value{Name: "appended"})
	assert.Equal(t, "y:(y1:())", render(req.Values[1]))
}

func TestCloneBoundsTheTotalWork(t *testing.T) {
	t.Run("Value nodes", func(t *testing.T) {
		wide := &registry.Value{Name: "wide"}
		leaf := &registry.Value{Name: "leaf"}
		for i := 0; i < maxValueNodes; i++ {
			wide.Values = append(wide.Values, leaf)
		}
		_, err := cloneService(withValue(wide))
		requireTooLarge(t, err, "more than 65536 Value nodes")
	})
	t.Run("metadata entries", func(t *testing.T) {
		// One map of 1100 entries shared by 1000 nodes: cheap to send,
		// and a million entries to compare or copy.
		md := map[string]string{}
		for i := 0; i < 1100; i++ {
			md[fmt.Sprint("k", i)] = "v"
		}
		s := svc("svc", "1")
		for i := 0; i < 1000; i++ {
			s.Nodes = append(s.Nodes, &registry.Node{Id: fmt.Sprint(i), Metadata: md})
		}
		_, err := cloneService(s)
		requireTooLarge(t, err, "more than 1048576 nodes, endpoints, metadata entries and Values")
	})
}

func TestCloneCopiesEverythingOnce(t *testing.T) {
	in := withValue(&registry.Value{Name: "Req", Type: "Req", Values: []*registry.Value{
		{Name: "a", Type: "string"}, nil, {Name: "b", Type: "Sub", Values: []*registry.Value{{Name: "c", Type: "int"}}},
	}})
	in.Endpoints = append(in.Endpoints, nil, &registry.Endpoint{Name: "Svc.Other", Metadata: map[string]string{"stream": "true"}})
	in.Endpoints[0].Metadata = map[string]string{"stream": "false"}
	in.Nodes = append(in.Nodes, nil, &registry.Node{Id: "n2", Address: "n2:1"})
	out, err := CloneIn([]*registry.Service{nil, in, svc("svc", "2", "m")})
	require.NoError(t, err)
	require.Len(t, out, 2)
	c := out[0]
	assert.Equal(t, []string{"n1", "n2"}, nodeIDs(out[:1]), "nil nodes dropped")
	require.Len(t, c.Endpoints, 2, "nil endpoints dropped")
	assert.Equal(t, render(in.Endpoints[0].Request), render(c.Endpoints[0].Request))
	assert.Nil(t, c.Endpoints[1].Request)
	assert.Equal(t, map[string]string{"stream": "true"}, c.Endpoints[1].Metadata)

	in.Endpoints[0].Request.Values[0].Name = "changed"
	in.Endpoints[0].Metadata["stream"] = "changed"
	in.Metadata["v"] = "changed"
	in.Nodes[0].Metadata["id"] = "changed"
	assert.Equal(t, "a", c.Endpoints[0].Request.Values[0].Name)
	assert.Equal(t, "false", c.Endpoints[0].Metadata["stream"])
	assert.Equal(t, "1", c.Metadata["v"])
	assert.Equal(t, "n1", c.Nodes[0].Metadata["id"])
}

// Events are copied for what applying them keeps: a delete needs the node
// Ids, an action that is never applied needs nothing.
func TestCloneEventKeepsWhatIsApplied(t *testing.T) {
	cyclic := &registry.Value{Name: "self"}
	cyclic.Values = []*registry.Value{cyclic}
	in := withValue(cyclic)
	in.Nodes = append(in.Nodes, nil)

	del, err := cloneEvent(&registry.Result{Action: "delete", Service: in}, nil)
	require.NoError(t, err, "a delete never copies Values")
	assert.Equal(t, &registry.Service{Name: "svc", Version: "1", Nodes: []*registry.Node{{Id: "n1"}}}, del.Service)

	other, err := cloneEvent(&registry.Result{Action: "compacted", Service: in}, nil)
	require.NoError(t, err)
	assert.Equal(t, &registry.Result{Action: "compacted", Service: &registry.Service{Name: "svc", Version: "1"}}, other)
	_, ok := ApplyEvent([]*registry.Service{svc("svc", "1", "n1")}, other)
	assert.False(t, ok, "still invalidates")

	_, err = cloneEvent(&registry.Result{Action: "update", Service: in}, nil)
	requireTooLarge(t, err, "cycle")

	in.Endpoints[0].Request = chain(3)
	up, err := cloneEvent(&registry.Result{Action: "create", Service: in}, nil)
	require.NoError(t, err)
	assert.Equal(t, "create", up.Action)
	assert.Equal(t, render(chain(3)), render(up.Service.Endpoints[0].Request))
	assert.NotSame(t, in.Endpoints[0].Request, up.Service.Endpoints[0].Request)
}

func mapPtr(m map[string]string) uintptr { return reflect.ValueOf(m).Pointer() }

// A refresh that answers what the cache holds, the rule for a TTL refresh,
// copies nothing but the Service struct: nodes, endpoints and metadata are
// shared with the data held, which is immutable.
func TestCloneSharesWhatEqualsTheDataHeld(t *testing.T) {
	held, err := CloneIn([]*registry.Service{copyBenchService(3)})
	require.NoError(t, err)
	h := held[0]

	again, err := CloneInLike([]*registry.Service{copyBenchService(3)}, held)
	require.NoError(t, err)
	a := again[0]
	assert.Same(t, &h.Nodes[0], &a.Nodes[0], "the node slice is shared")
	assert.Same(t, &h.Endpoints[0], &a.Endpoints[0], "the endpoint slice is shared")
	assert.Equal(t, mapPtr(h.Metadata), mapPtr(a.Metadata))
	// The answers are built before the count: a map's allocations vary
	// with its hash seed, so the cost of building one is no constant to
	// subtract.
	answers := make([][]*registry.Service, 51)
	for i := range answers {
		answers[i] = []*registry.Service{copyBenchService(3)}
	}
	next := 0
	allocs := testing.AllocsPerRun(50, func() {
		_, _ = CloneInLike(answers[next], held)
		next++
	})
	assert.LessOrEqual(t, allocs, 2.0)

	// One node moved: the nodes are copied, their metadata still shared.
	moved := copyBenchService(3)
	moved.Nodes[1].Address = "10.9.9.9:8080"
	moved.Endpoints[2].Request.Values[0].Type = "int32"
	moved.Metadata["team"] = "other"
	again, err = CloneInLike([]*registry.Service{moved}, held)
	require.NoError(t, err)
	a = again[0]
	assert.NotSame(t, &h.Nodes[0], &a.Nodes[0])
	assert.Equal(t, "10.9.9.9:8080", a.Nodes[1].Address)
	assert.Equal(t, "10.0.0.2:8080", h.Nodes[1].Address, "the data held is untouched")
	for i := range a.Nodes {
		assert.Equal(t, mapPtr(h.Nodes[0].Metadata), mapPtr(a.Nodes[i].Metadata))
	}
	assert.NotSame(t, &h.Endpoints[0], &a.Endpoints[0], "an endpoint changed")
	assert.Equal(t, "int32", a.Endpoints[2].Request.Values[0].Type)
	assert.Equal(t, "string", h.Endpoints[2].Request.Values[0].Type)
	assert.Equal(t, mapPtr(h.Endpoints[0].Metadata), mapPtr(a.Endpoints[2].Metadata))
	assert.Equal(t, map[string]string{"team": "other"}, a.Metadata)
	assert.Equal(t, map[string]string{"team": "bench"}, h.Metadata)

	// Only the same version is shared, and nil metadata never becomes
	// empty metadata.
	other := copyBenchService(3)
	other.Version = "2.0.0"
	other.Nodes[0].Metadata = map[string]string{}
	again, err = CloneInLike([]*registry.Service{other}, held)
	require.NoError(t, err)
	assert.NotSame(t, &h.Nodes[0], &again[0].Nodes[0])
	assert.NotSame(t, &h.Endpoints[0], &again[0].Endpoints[0])
	assert.NotNil(t, again[0].Nodes[0].Metadata)
	assert.Empty(t, again[0].Nodes[0].Metadata)
}

// An event re-announcing a node shares the metadata and endpoints held.
func TestCloneEventSharesWhatEqualsTheDataHeld(t *testing.T) {
	held, err := CloneIn([]*registry.Service{copyBenchService(3)})
	require.NoError(t, err)
	ev := copyBenchService(4)
	ev.Nodes = ev.Nodes[3:]
	got, err := cloneEvent(&registry.Result{Action: "update", Service: ev}, held)
	require.NoError(t, err)
	assert.Equal(t, "bench-00000003", got.Service.Nodes[0].Id)
	assert.Equal(t, mapPtr(held[0].Nodes[0].Metadata), mapPtr(got.Service.Nodes[0].Metadata))
	assert.Same(t, &held[0].Endpoints[0], &got.Service.Endpoints[0])
}

// Random Value graphs, with sharing and cycles: the copy never panics,
// refuses exactly the cyclic ones (these are small enough for the other
// bounds), and copies the others to Values that read back the same and
// never alias the input.
func TestCloneRandomValueGraphs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		n := 1 + rng.IntN(10)
		vals := make([]*registry.Value, n)
		for j := range vals {
			vals[j] = &registry.Value{Name: fmt.Sprint("v", j), Type: fmt.Sprint("t", rng.IntN(3))}
		}
		for _, v := range vals {
			for k := rng.IntN(3); k > 0; k-- {
				if rng.IntN(8) == 0 {
					v.Values = append(v.Values, nil)
				} else {
					v.Values = append(v.Values, vals[rng.IntN(n)])
				}
			}
		}
		in := withValue(vals[0])
		got, err := cloneService(in)
		if reachesCycle(vals[0], map[*registry.Value]int{}) {
			require.ErrorIs(t, err, ErrAnswerTooLarge, "graph %d", i)
			assert.Contains(t, err.Error(), "Values form a cycle")
			continue
		}
		require.NoError(t, err, "graph %d", i)
		assert.Equal(t, render(vals[0]), render(got.Endpoints[0].Request))
		seen := map[*registry.Value]bool{}
		for _, v := range vals {
			seen[v] = true
		}
		var walk func(v *registry.Value)
		walk = func(v *registry.Value) {
			if v == nil {
				return
			}
			require.False(t, seen[v], "graph %d: the copy aliases an input Value", i)
			for _, sub := range v.Values {
				walk(sub)
			}
		}
		walk(got.Endpoints[0].Request)
	}
}

// reachesCycle reports whether a cycle is reachable from v: state is 1
// while v is on the path, 2 once done.
func reachesCycle(v *registry.Value, state map[*registry.Value]int) bool {
	if v == nil || state[v] == 2 {
		return false
	}
	if state[v] == 1 {
		return true
	}
	state[v] = 1
	for _, sub := range v.Values {
		if reachesCycle(sub, state) {
			return true
		}
	}
	state[v] = 2
	return false
}
