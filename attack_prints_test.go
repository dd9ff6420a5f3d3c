//go:build go1.25

package cache

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// attackService is one version of name with one node, built fresh each
// time, as a registry decodes it.
func attackService(name, version, id, addr string, nodeMD map[string]string) *registry.Service {
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

// attackWarm fills name from the registry's answer and lets the first
// stream's re-validation run, then returns the stream.
func attackWarm(t *testing.T, f *fakeRegistry, c *cache, name string) *fakeStream {
	t.Helper()
	warm(t, c, name)
	s := f.stream()
	require.NotNil(t, s)
	return s
}

// Found by an attack, and fixed: strPrint (prints.go) used to fold the
// string's length into the same word as its bytes for strings up to 16
// bytes, and for 1..3 bytes the second word was always 0. So strings of
// different lengths shared a print whatever the key: "v1" and "v10" ((a,b,b)^2 ==
// (a,b,b^1)^3), "1" and "113", "10" and "101", "0000" and "10000",
// "1.0.0" and "3.0.0.0". A node re-registering under version "v10" while
// the cache held it under "v1" was taken for a repeat, and the cache kept
// serving the old version until the next refresh (an hour here).
func TestAttackPrintsTakeANewVersionForARepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.services["greeter"] = []*registry.Service{attackService("greeter", "v1", "n-1", "10.0.0.1:8080", map[string]string{"protocol": "grpc"})}
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		s := attackWarm(t, f, c, "greeter")
		calls := f.totalCalls()

		// The same instance, re-registered under version v10.
		deliver(s, "update", attackService("greeter", "v10", "n-1", "10.0.0.1:8080", map[string]string{"protocol": "grpc"}))

		got, err := c.GetService("greeter")
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, "v10", got[0].Version, "the node moved to version v10; the event was taken for a repeat of v1")
		assert.Equal(t, calls, f.totalCalls())
	})
}

// Found by an attack, and fixed: the same collision as above, in a node's
// metadata: a weight that went from "10" to "101" was taken for a repeat,
// and the old weight served until the next refresh.
func TestAttackPrintsTakeANodeMetadataChangeForARepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.services["greeter"] = []*registry.Service{attackService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", map[string]string{"weight": "10"})}
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		s := attackWarm(t, f, c, "greeter")

		deliver(s, "update", attackService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", map[string]string{"weight": "101"}))

		got, err := c.GetService("greeter")
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Len(t, got[0].Nodes, 1)
		assert.Equal(t, "101", got[0].Nodes[0].Metadata["weight"], "the new weight was taken for a repeat of the old")
	})
}

// Found by an attack, and fixed: the same collision in a Value's type,
// deep in an endpoint: "1" and "113" shared a print, so an endpoint whose
// request type changed from one to the other was taken for a repeat.
func TestAttackPrintsTakeAnEndpointChangeForARepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		held := attackService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", nil)
		held.Endpoints[0].Request.Type = "1"
		f.services["greeter"] = []*registry.Service{held}
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		s := attackWarm(t, f, c, "greeter")

		ev := attackService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", nil)
		ev.Endpoints[0].Request.Type = "113"
		deliver(s, "update", ev)

		got, err := c.GetService("greeter")
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Len(t, got[0].Endpoints, 1)
		assert.Equal(t, "113", got[0].Endpoints[0].Request.Type)
	})
}

// Found by an attack, and fixed: strPrint's loop for strings over 16
// bytes started its chain with h = len(s) and folded the second word of
// each block as le64(b[i+8:])^h into a multiply: a string whose bytes
// 8..15 spelt its own length zeroed the product, so its first 8 bytes
// never reached the print, whatever the key, and a change to them was
// taken for a repeat.
func TestAttackPrintsIgnoreTheHeadOfALongString(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tail = "\x18\x00\x00\x00\x00\x00\x00\x00-rotated"
		f := newFakeRegistry()
		f.services["greeter"] = []*registry.Service{attackService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", map[string]string{"token": "AAAAAAAA" + tail})}
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		s := attackWarm(t, f, c, "greeter")

		deliver(s, "update", attackService("greeter", "1.0.0", "n-1", "10.0.0.1:8080", map[string]string{"token": "BBBBBBBB" + tail}))

		got, err := c.GetService("greeter")
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Len(t, got[0].Nodes, 1)
		assert.Equal(t, "BBBBBBBB"+tail, got[0].Nodes[0].Metadata["token"])
	})
}
