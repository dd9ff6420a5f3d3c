package cache

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// collisionService is one version of name with one node, built fresh each
// time, as a registry decodes it.
func collisionService(name, version, id, addr string, nodeMD map[string]string) *registry.Service {
	return &registry.Service{
		Name:     name,
		Version:  version,
		Metadata: map[string]string{"team": "core"},
		Nodes:    []*registry.Node{{Id: id, Address: addr, Metadata: nodeMD}},
		Endpoints: []*registry.Endpoint{{
			Name:     "Greeter.Hello",
			Request:  &registry.Value{Name: "Request", Type: "Request"},
			Response: &registry.Value{Name: "Response", Type: "Response"},
		}},
	}
}

// collisionWarm fills name from the registry's answer and lets the first
// stream's re-validation run, then returns the stream.
func collisionWarm(t *testing.T, f *fakereg.Registry, c *cache, name string) *fakereg.Stream {
	t.Helper()
	warm(t, c, name)
	s := f.Stream()
	require.NotNil(t, s)
	return s
}

// The tests here hold off collisions of prints (internal/svcdata/prints.go)
// that took a change for a repeat: the cache then kept serving what it
// held until the next refresh, an hour here.

// TestPrintsTellANewVersionFromARepeat holds off a bug: strPrint used to
// fold the string's length into the same word as its bytes for strings up
// to 16 bytes, and for 1..3 bytes the second word was always 0. So strings
// of different lengths shared a print whatever the key: "v1" and "v10"
// ((a,b,b)^2 == (a,b,b^1)^3), "1" and "113", "10" and "101", "0000" and
// "10000", "1.0.0" and "3.0.0.0". A node re-registering under version
// "v10" while the cache held it under "v1" was taken for a repeat, and the
// cache kept serving the old version.
func TestPrintsTellANewVersionFromARepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.Set("greeter", collisionService("greeter", "v1", "n-1", "10.0.0.1:8080", map[string]string{"protocol": "grpc"}))
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		s := collisionWarm(t, f, c, "greeter")
		calls := f.TotalCalls()

		// The same instance, re-registered under version v10.
		deliver(s, "update", collisionService("greeter", "v10", "n-1", "10.0.0.1:8080", map[string]string{"protocol": "grpc"}))

		got, err := c.GetService("greeter")
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, "v10", got[0].Version, "the node moved to version v10; the event was taken for a repeat of v1")
		assert.Equal(t, calls, f.TotalCalls())
	})
}

// TestPrintsTellANodeMetadataChangeFromARepeat holds off the same
// collision as above, in a node's metadata: a weight that went from "10" to "101" was taken for a repeat,
// and the old weight served until the next refresh.
func TestPrintsTellANodeMetadataChangeFromARepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.Set("greeter", collisionService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", map[string]string{"weight": "10"}))
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		s := collisionWarm(t, f, c, "greeter")

		deliver(s, "update", collisionService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", map[string]string{"weight": "101"}))

		got, err := c.GetService("greeter")
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Len(t, got[0].Nodes, 1)
		assert.Equal(t, "101", got[0].Nodes[0].Metadata["weight"], "the new weight was taken for a repeat of the old")
	})
}

// TestPrintsTellAnEndpointChangeFromARepeat holds off the same collision
// in a Value's type, deep in an endpoint: "1" and "113" shared a print, so an endpoint whose
// request type changed from one to the other was taken for a repeat.
func TestPrintsTellAnEndpointChangeFromARepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		held := collisionService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", nil)
		held.Endpoints[0].Request.Type = "1"
		f.Set("greeter", held)
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		s := collisionWarm(t, f, c, "greeter")

		ev := collisionService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", nil)
		ev.Endpoints[0].Request.Type = "113"
		deliver(s, "update", ev)

		got, err := c.GetService("greeter")
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Len(t, got[0].Endpoints, 1)
		assert.Equal(t, "113", got[0].Endpoints[0].Request.Type)
	})
}

// TestPrintsReadTheHeadOfALongString holds off a bug: strPrint's loop
// for strings over 16 bytes started its chain with h = len(s) and folded the second word of
// each block as le64(b[i+8:])^h into a multiply: a string whose bytes
// 8..15 spelt its own length zeroed the product, so its first 8 bytes
// never reached the print, whatever the key, and a change to them was
// taken for a repeat.
func TestPrintsReadTheHeadOfALongString(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tail = "\x18\x00\x00\x00\x00\x00\x00\x00-rotated"
		f := newFakeRegistry()
		f.Set("greeter", collisionService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", map[string]string{"token": "AAAAAAAA" + tail}))
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		s := collisionWarm(t, f, c, "greeter")

		deliver(s, "update", collisionService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", map[string]string{"token": "BBBBBBBB" + tail}))

		got, err := c.GetService("greeter")
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Len(t, got[0].Nodes, 1)
		assert.Equal(t, "BBBBBBBB"+tail, got[0].Nodes[0].Metadata["token"])
	})
}

// TestPrintsReadAMetadataValueUnderKeyK0 holds off a bug: the chain's
// keys were once hashes of "k0" to "k3" under the strings' own seed, so that
// strPrint("k0")^printK0 was 0, and mix(0, y) is 0 whatever y: a value
// under the key "k0", the key of a value "k1", the address of a node "k0"
// and the Id of a node at "k1" were left out of the prints, and a change
// to them was taken for a repeat and lost until the next refresh.
//
// Sequence: service s held with node n0 at 10.0.0.1 with metadata
// {"k0": "a"}; the stream sends update s (same version) with n0 at
// 10.0.0.1 and metadata {"k0": "b"}; GetService("s") must answer
// {"k0": "b"}. (TestPrintsReadStringsThatWereChainKeys, in
// internal/svcdata, checks the prints themselves.)
func TestPrintsReadAMetadataValueUnderKeyK0(t *testing.T) {
	cases := []struct {
		name      string
		held, ev  registry.Node
		wantField func(n *registry.Node) string
	}{
		{"metadata under k0", registry.Node{Id: "n0", Address: "10.0.0.1:1", Metadata: map[string]string{"k0": "a"}},
			registry.Node{Id: "n0", Address: "10.0.0.1:1", Metadata: map[string]string{"k0": "b"}},
			func(n *registry.Node) string { return n.Metadata["k0"] }},
		{"address of node k0", registry.Node{Id: "k0", Address: "10.0.0.1:1"},
			registry.Node{Id: "k0", Address: "10.0.0.2:1"},
			func(n *registry.Node) string { return n.Address }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeRegistry()
				s := acBase("s", 0)
				h := tc.held
				s.Nodes = []*registry.Node{&h}
				acSetRegistry(f, "s", s)
				c, _ := newTestCache(t, f, WithTTL(time.Hour))
				defer c.Stop()
				warm(t, c, "s")
				ev := decoded(t, s)
				e := tc.ev
				ev.Nodes = []*registry.Node{&e}
				f.Stream().Send("update", ev)
				synctest.Wait()
				got, err := c.GetService("s")
				require.NoError(t, err)
				require.Len(t, got[0].Nodes, 1)
				assert.Equal(t, tc.wantField(&tc.ev), tc.wantField(got[0].Nodes[0]), "the event's change was taken for a repeat and lost")
			})
		})
	}
}
