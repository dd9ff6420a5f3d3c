package cache

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// Helpers that make service data and events for the cache's tests, as the
// tests of internal/svcdata make them for its own.

// The bounds of internal/svcdata that tests draw their shapes around: the
// nodes up to which a node's print is searched one by one, the most nodes
// a version with prints may hold, the most entries of a metadata map that
// copies share, and the maps a watcher's memo holds and the bytes of each.
const (
	linearPrints    = 32
	maxPrintNodes   = 1024
	maxSharedMapLen = 8
	mapMemoSlots    = 8
	mapMemoBytes    = 256
)

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

// repeatEvent is an update of the first version of held naming nodes of
// it, each a fresh copy, with the version's metadata and endpoints, as a
// registry decodes them.
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

// nodeByID returns the first of nodes with Id id, or nil.
func nodeByID(nodes []*registry.Node, id string) *registry.Node {
	for _, n := range nodes {
		if n.Id == id {
			return n
		}
	}
	return nil
}

// versionOf returns the version of svcs named version, or nil.
func versionOf(svcs []*registry.Service, version string) *registry.Service {
	for _, s := range svcs {
		if s.Version == version {
			return s
		}
	}
	return nil
}

// copyEvent is the cache's own copy of res, sharing what equals held, as a
// refresh in flight keeps it to replay: what preparing it without prints
// (as with WithLastKnownNodes) gives.
func copyEvent(res *registry.Result, held []*registry.Service) *registry.Result {
	p := svcdata.Prepare(res, &svcdata.Snapshot{Services: held}, true, nil)
	return p.Event()
}

// repeats reports whether res tells nothing that held does not hold, as
// the cache tells it of an event for data held without prints: by the
// prints it makes of held, or by comparing with held where they cannot
// tell.
func repeats(held []*registry.Service, res *registry.Result) bool {
	return svcdata.Prepare(res, &svcdata.Snapshot{Services: held}, false, nil).Repeat
}

// merged is what the full path makes of ev: a copy, merged.
func merged(t *testing.T, cur []*registry.Service, ev *registry.Result) ([]*registry.Service, bool) {
	t.Helper()
	return svcdata.ApplyEvent(cur, copyEvent(ev, cur))
}
