package cache

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go-micro.dev/v4/registry"
)

// announcesNew is the news that mergeEvent reports for a create or update.
func announcesNew(cur []*registry.Service, ev *registry.Result) bool {
	_, news, _ := mergeEvent(cur, ev)
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
