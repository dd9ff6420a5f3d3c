package svcdata

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// mapID is the identity of m, for telling a shared map from an equal one.
func mapID(m map[string]string) uintptr { return uintptr(reflect.ValueOf(m).UnsafePointer()) }

// TestEqualMapsAreHeldOnce: the metadata maps of different services that
// are equal are one map the cache holds, never the registry's; nil stays
// nil, empty stays empty, and a large map is the service's own.
func TestEqualMapsAreHeldOnce(t *testing.T) {
	md := func() map[string]string {
		return map[string]string{"broker": "http", "protocol": "mucp", "registry": "etcd", "server": "mucp", "transport": "http"}
	}
	a := svc("a", "1", "a1")
	b := svc("b", "1", "b1")
	a.Nodes[0].Metadata, b.Nodes[0].Metadata = md(), md()
	a.Metadata, b.Metadata = map[string]string{}, map[string]string{}
	ca, err := CloneIn([]*registry.Service{a})
	require.NoError(t, err)
	cb, err := CloneIn([]*registry.Service{b})
	require.NoError(t, err)
	na, nb := ca[0].Nodes[0].Metadata, cb[0].Nodes[0].Metadata
	assert.Equal(t, md(), na)
	assert.Equal(t, mapID(na), mapID(nb), "equal maps of two services are one")
	assert.NotEqual(t, mapID(a.Nodes[0].Metadata), mapID(na), "never the registry's map")
	assert.NotNil(t, ca[0].Metadata, "empty stays empty")
	assert.Equal(t, mapID(ca[0].Metadata), mapID(cb[0].Metadata))

	// Changing the registry's maps changes nothing held.
	a.Nodes[0].Metadata["broker"] = "nats"
	assert.Equal(t, "http", na["broker"])

	c := svc("c", "1", "c1")
	c.Nodes[0].Metadata = nil
	cc, err := CloneIn([]*registry.Service{c})
	require.NoError(t, err)
	assert.Nil(t, cc[0].Nodes[0].Metadata, "nil stays nil")

	big := map[string]string{}
	for i := 0; i <= maxSharedMapLen; i++ {
		big[fmt.Sprint("k", i)] = "v"
	}
	x, y := svc("x", "1", "x1"), svc("y", "1", "y1")
	x.Metadata, y.Metadata = big, big
	cx, err := CloneIn([]*registry.Service{x})
	require.NoError(t, err)
	cy, err := CloneIn([]*registry.Service{y})
	require.NoError(t, err)
	assert.Equal(t, big, cx[0].Metadata)
	assert.NotEqual(t, mapID(cx[0].Metadata), mapID(cy[0].Metadata), "a large map is each service's own")
}

// TestSharedMapsStayBounded: maps that no one holds any more are not
// pinned past the table's bound, and sharing goes on after it starts
// afresh.
func TestSharedMapsStayBounded(t *testing.T) {
	for i := 0; i < 3*maxSharedMaps; i++ {
		copyMap(map[string]string{"revision": fmt.Sprint(i)})
		sharedMaps.mu.Lock()
		n := len(sharedMaps.m)
		sharedMaps.mu.Unlock()
		require.LessOrEqual(t, n, maxSharedMaps)
	}
	first := copyMap(map[string]string{"zone": "eu"})
	assert.Equal(t, mapID(first), mapID(copyMap(map[string]string{"zone": "eu"})))
}

// TestSharedMapsAreComparedBeforeSharing: a map the table holds under a
// print is shared only with a map equal to it, whatever print the copy
// was given: one more entry, or another value, gets its own copy.
func TestSharedMapsAreComparedBeforeSharing(t *testing.T) {
	held := copyMap(map[string]string{"compared": "1"})
	p := metaPrint(held)
	for name, m := range map[string]map[string]string{
		"one entry more": {"compared": "1", "more": "2"},
		"another value":  {"compared": "2"},
		"another key":    {"other": "1"},
	} {
		got := copyPrintedMap(m, p)
		assert.Equal(t, m, got, name)
		assert.NotEqual(t, mapID(held), mapID(got), name)
	}
	again := copyPrintedMap(map[string]string{"compared": "1"}, p)
	assert.Equal(t, mapID(held), mapID(again), "an equal map is shared")
}
