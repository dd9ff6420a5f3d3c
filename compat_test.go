package cache_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// A Cache can go wherever go-micro's cache.Cache goes. (A nil one: a
// cache.New here would start go-micro's memory registry, and its goroutine
// that never exits, in every test binary.)
var _ gmcache.Cache = cache.Cache(nil)

func TestGoMicroDefaultSelectorSelectsThroughTheCache(t *testing.T) {
	r := registry.NewMemoryRegistry()
	require.NoError(t, r.Register(&registry.Service{
		Name:    "greeter",
		Version: "1",
		Nodes:   []*registry.Node{{Id: "g1", Address: "127.0.0.1:9001"}},
	}))
	checkNoLeak(t)
	c := cache.New(r)
	defer c.Stop()

	sel := selector.NewSelector(selector.Registry(c))
	defer sel.Close()
	next, err := sel.Select("greeter")
	require.NoError(t, err)
	node, err := next()
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9001", node.Address)

	_, err = sel.Select("missing")
	assert.ErrorIs(t, err, selector.ErrNotFound)
}
