package svcdata

import (
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// TestApplyEvent: create and update upsert nodes into their version, and
// take them out of any other; delete removes them and drops a version
// left empty; anything else, or an event that names no node, cannot be
// applied. The data applied to is never changed.
func TestApplyEvent(t *testing.T) {
	base := []*registry.Service{svc("s", "1", "a", "b"), svc("s", "2", "c")}
	ev := func(action, version string, ids ...string) *registry.Result {
		return &registry.Result{Action: action, Service: svc("s", version, ids...)}
	}
	type view map[string][]string // version -> node ids
	tests := []struct {
		name string
		ev   *registry.Result
		want view
		ok   bool
	}{
		{"create adds a node", ev("create", "1", "d"), view{"1": {"a", "b", "d"}, "2": {"c"}}, true},
		{"update replaces a node in place", ev("update", "1", "b"), view{"1": {"a", "b"}, "2": {"c"}}, true},
		{"create adds a version", ev("create", "3", "e"), view{"1": {"a", "b"}, "2": {"c"}, "3": {"e"}}, true},
		{"delete removes a node", ev("delete", "1", "a"), view{"1": {"b"}, "2": {"c"}}, true},
		{"delete drops an empty version", ev("delete", "2", "c"), view{"1": {"a", "b"}}, true},
		{"delete of an unknown version is a no-op", ev("delete", "9", "a"), view{"1": {"a", "b"}, "2": {"c"}}, true},
		{"delete of an unknown node is a no-op", ev("delete", "1", "zz"), view{"1": {"a", "b"}, "2": {"c"}}, true},
		{"a node re-registered in a new version leaves the old one", ev("create", "3", "a"), view{"1": {"b"}, "2": {"c"}, "3": {"a"}}, true},
		{"a node updated into another version leaves its own", ev("update", "1", "c"), view{"1": {"a", "b", "c"}}, true},
		{"delete removes the node from every version", ev("delete", "2", "c", "a"), view{"1": {"b"}}, true},
		{"unknown action cannot be applied", ev("expire", "1", "a"), nil, false},
		{"an event with no nodes cannot be applied", ev("delete", "1"), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := fmt.Sprint(viewOf(base))
			got, ok := ApplyEvent(base, tt.ev)
			require.Equal(t, tt.ok, ok)
			assert.Equal(t, before, fmt.Sprint(viewOf(base)), "the current snapshot is never changed")
			if ok {
				assert.Equal(t, fmt.Sprint(tt.want), fmt.Sprint(viewOf(got)))
			}
		})
	}
	t.Run("update takes the event's metadata", func(t *testing.T) {
		e := ev("update", "1", "a")
		e.Service.Metadata = map[string]string{"new": "yes"}
		e.Service.Nodes[0].Address = "moved:1"
		got, ok := ApplyEvent(base, e)
		require.True(t, ok)
		assert.Equal(t, "yes", got[0].Metadata["new"])
		assert.Equal(t, "moved:1", got[0].Nodes[0].Address)
		assert.Equal(t, "a:8080", base[0].Nodes[0].Address)
	})
}

// viewOf is the node Ids of each version of svcs.
func viewOf(svcs []*registry.Service) map[string][]string {
	v := map[string][]string{}
	for _, s := range svcs {
		for _, n := range s.Nodes {
			v[s.Version] = append(v[s.Version], n.Id)
		}
	}
	return v
}

// announcesNew is the news that MergeEvent reports for a create or update.
func announcesNew(cur []*registry.Service, ev *registry.Result) bool {
	_, news, _ := MergeEvent(cur, ev)
	return news
}

func TestAnnouncesNew(t *testing.T) {
	held := []*registry.Service{svc("s", "1", "a", "b", "c")}
	held[0].Nodes[1].Metadata = map[string]string{"zone": "eu"}
	held[0].Nodes[2].Metadata = map[string]string{} // as go-micro's memory registry returns nil metadata
	ev := func(version string, nodes ...*registry.Node) *registry.Result {
		return &registry.Result{Action: "update", Service: &registry.Service{Name: "s", Version: version, Nodes: nodes}}
	}
	node := func(id, addr string, md map[string]string) *registry.Node {
		return &registry.Node{Id: id, Address: addr, Metadata: md}
	}
	for _, tc := range []struct {
		name string
		ev   *registry.Result
		want bool
	}{
		{"the same node again", ev("1", node("a", "a:8080", map[string]string{"id": "a"})), false},
		{"the same nodes again", ev("1", node("b", "b:8080", map[string]string{"zone": "eu"}), node("a", "a:8080", map[string]string{"id": "a"})), false},
		{"a new node", ev("1", node("d", "d:8080", nil)), true},
		{"a node moved", ev("1", node("a", "a:9090", map[string]string{"id": "a"})), true},
		{"new metadata", ev("1", node("b", "b:8080", map[string]string{"zone": "us"})), true},
		{"a new version", ev("2", node("a", "a:8080", map[string]string{"id": "a"})), true},
		{"nothing held", ev("1", node("a", "a:8080", map[string]string{"id": "a"})), true},
		{"nil metadata for empty", ev("1", node("c", "c:8080", nil)), false},
	} {
		cur := held
		if tc.name == "nothing held" {
			cur = nil
		}
		assert.Equal(t, tc.want, announcesNew(cur, tc.ev), tc.name)
	}

	// Large versions take the map; the answer is the same.
	var ids []string
	for i := 0; i < 100; i++ {
		ids = append(ids, fmt.Sprint("n", i))
	}
	big := []*registry.Service{svc("s", "1", ids...)}
	assert.False(t, announcesNew(big, ev("1", big[0].Nodes...)))
	assert.True(t, announcesNew(big, ev("1", append(big[0].Nodes[:50:50], node("new", "x:1", nil))...)))
}

// FuzzApplyEvent checks event application against a plain model: a set of
// node ids per version. Each byte of the input is one event.
func FuzzApplyEvent(f *testing.F) {
	f.Add([]byte{0x00, 0x11, 0x22, 0x33})
	f.Add([]byte{0x05, 0x45, 0x85, 0xc5})       // create then delete the same node
	f.Add([]byte{0x0f, 0x8f, 0x8f, 0x0f, 0xcf}) // all nodes, duplicates, an unknown action
	f.Add([]byte{0x80, 0x90, 0x00, 0x10, 0x20}) // deletes before creates
	f.Add([]byte{0x30, 0x31, 0x32, 0x33, 0x34}) // versions and empty events
	f.Fuzz(func(t *testing.T, data []byte) {
		var cur []*registry.Service
		model := map[string]map[string]bool{}
		for i, b := range data {
			ev := decodeEvent(b)
			before := fmt.Sprint(viewOf(cur))
			next, ok := ApplyEvent(cur, ev)
			if fmt.Sprint(viewOf(cur)) != before {
				t.Fatalf("event %d changed the snapshot it was applied to", i)
			}
			wantOK := applyModel(model, ev)
			if ok != wantOK {
				t.Fatalf("event %d (%s %v): applied=%v, model says %v", i, ev.Action, ev.Service.Nodes, ok, wantOK)
			}
			if !ok {
				continue
			}
			cur = next
			if got, want := fmt.Sprint(sortedView(cur)), fmt.Sprint(sortedModel(model)); got != want {
				t.Fatalf("event %d (%s): got %s, model %s", i, ev.Action, got, want)
			}
			for _, s := range cur {
				if len(s.Nodes) == 0 {
					t.Fatalf("event %d left version %q with no nodes", i, s.Version)
				}
			}
		}
	})
}

// decodeEvent reads one event from a byte: the top two bits pick the
// action, the next two the version, the low four a set of nodes.
func decodeEvent(b byte) *registry.Result {
	actions := []string{"create", "update", "delete", "expire"}
	s := &registry.Service{Name: "s", Version: fmt.Sprint(b >> 4 & 3)}
	for i, id := range []string{"a", "b", "c", "d"} {
		if b&(1<<i) != 0 {
			s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: id})
		}
	}
	return &registry.Result{Action: actions[b>>6], Service: s}
}

// applyModel applies ev to the model and reports whether it applies.
func applyModel(m map[string]map[string]bool, ev *registry.Result) bool {
	if len(ev.Service.Nodes) == 0 {
		return false
	}
	// A node Id is one instance, in one version at a time: an event for
	// it takes it out of every other version.
	v := ev.Service.Version
	drop := func(except string) {
		for version, ids := range m {
			if version == except {
				continue
			}
			for _, n := range ev.Service.Nodes {
				delete(ids, n.Id)
			}
			if len(ids) == 0 {
				delete(m, version)
			}
		}
	}
	switch ev.Action {
	case "create", "update":
		drop(v)
		if m[v] == nil {
			m[v] = map[string]bool{}
		}
		for _, n := range ev.Service.Nodes {
			m[v][n.Id] = true
		}
	case "delete":
		if m[v] == nil {
			return true // a delete for an unknown version changes nothing
		}
		drop("")
	default:
		return false
	}
	return true
}

func sortedView(svcs []*registry.Service) map[string][]string {
	v := viewOf(svcs)
	for k := range v {
		sort.Strings(v[k])
	}
	return v
}

func sortedModel(m map[string]map[string]bool) map[string][]string {
	v := map[string][]string{}
	for version, ids := range m {
		for id := range ids {
			v[version] = append(v[version], id)
		}
		sort.Strings(v[version])
	}
	return v
}
