package admin_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/admin"
)

// The JSON's counters add up: "lookups" is the sum of "their outcomes"
// (docs/admin.md), lookups of the empty name (invalid) included. It holds
// off a page with no field for those, whose outcomes did not add up to
// lookups: an operator or a dashboard checking the sum saw lookups that
// went nowhere.
func TestJSONCountersAddUp(t *testing.T) {
	c := cacheOf(t, &registry.Service{Name: "a", Version: "1", Nodes: []*registry.Node{{Id: "a-1", Address: "1.2.3.4:1"}}})
	for i := 0; i < 3; i++ {
		_, _ = c.GetService("")
		_, _ = c.GetService("a")
	}
	_, body := serve(t, admin.Handler(c), http.MethodGet, "/?format=json")
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	k := st.Cache
	assert.Equal(t, k.Lookups, k.FreshHits+k.EventServes+k.StaleServes+k.Throttled+k.Misses+k.Invalid,
		"lookups vs the sum of the outcomes the page shows: %+v", k)
}
