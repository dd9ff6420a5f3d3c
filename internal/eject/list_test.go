package eject

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
)

// TestObserveNeverGoesBackToAnOlderList: a Select that looked the service
// up just before the list changed observes the older list after a Mark
// matched the state to the newer one. The state stays matched to the list
// the cache holds: n3, which left, is not counted again.
func TestObserveNeverGoesBackToAnOlderList(t *testing.T) {
	p, _, _ := testPassive()
	refused := merrors.InternalServerError("go.micro.client", "connection error: refused")
	list := func(ids ...string) []*registry.Service {
		s := &registry.Service{Name: "svc", Version: "1"}
		for _, id := range ids {
			s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: id + ":8080"})
		}
		return []*registry.Service{s}
	}
	old, current := list("n1", "n2", "n3", "n4"), list("n1", "n2", "n4")
	held := old
	p.held = func(string) []*registry.Service { return held }
	n3 := old[0].Nodes[2]
	for i := 0; i < 3; i++ {
		p.Mark("svc", n3, refused)
	}
	h := p.lookup("svc")
	require.NotNil(t, h)
	require.True(t, h.node(n3).listed)

	held = current                          // n3 leaves the list
	p.Mark("svc", old[0].Nodes[0], refused) // a failure Mark matches the new list
	require.False(t, h.node(n3).listed)
	h.observe(old) // the late Select
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.False(t, h.node(n3).listed, "n3 is listed again after a Select observed the list before it left")
	assert.Equal(t, 3, h.listed())
}
