package admin_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	"github.com/regcache/cache/admin"
)

// Handler(c, nil), a selector slot left nil (a client whose
// Options().Selector was never set), either panics at once, as a nil cache
// does, or serves the page. It holds off a Handler that took the nil
// selector and then panicked in every request (the nil interface's
// String()): net/http recovered it, so the operator saw an empty reply
// during an incident, not the page.
func TestNilSelectorDoesNotBreakThePage(t *testing.T) {
	c := cacheOf(t, &registry.Service{Name: "a", Version: "1", Nodes: []*registry.Node{{Id: "a-1", Address: "1.2.3.4:1"}}})
	var h http.Handler
	func() {
		defer func() {
			if r := recover(); r != nil {
				h = nil // a panic at construction is an acceptable, loud answer
			}
		}()
		h = admin.Handler(c, nil)
	}()
	if h == nil {
		return
	}
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		serve(t, h, http.MethodGet, "/?format=json")
	}()
	assert.Nil(t, panicked, "Handler(c, nil) accepted, but every page request panics")
}

// go-micro's default selector is not regcache's: it shows as not
// available, and the page still works.
func TestForeignSelectorShowsAsNotReporting(t *testing.T) {
	reg := registry.NewMemoryRegistry()
	c := cacheOf(t)
	h := admin.Handler(c, selector.NewSelector(selector.Registry(reg)))
	res, body := serve(t, h, http.MethodGet, "/?format=json")
	require.Equal(t, http.StatusOK, res.StatusCode)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Len(t, st.Selectors, 1)
	assert.False(t, st.Selectors[0].Available)
	res, _ = serve(t, h, http.MethodGet, "/")
	require.Equal(t, http.StatusOK, res.StatusCode)
}
