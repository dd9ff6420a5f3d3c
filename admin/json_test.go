package admin_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cache "github.com/regcache/cache"
)

// The page's JSON spells every idea as the cache's own JSON does, so that
// one name means one thing wherever a program reads it: its "cache" is the
// JSON of the cache's Stats, each of its services that of a ServiceStats
// from Services, each selector that of its SelectorStats (but for the
// cache's Stats, shown once) with its name; and nothing else but the
// page's time and paging. Keys are compared all the way down
// ("cache.options.ttl_seconds", "services[].node_list[].id").
func TestPageJSONIsTheCachesJSON(t *testing.T) {
	f := newFixture(t)
	_, body := serve(t, f.h, http.MethodGet, "/?format=json&limit=1")
	var page map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	assert.ElementsMatch(t, []string{"time", "cache", "prefix", "limit", "services", "next", "next_query", "selectors"},
		slices.Collect(maps.Keys(page)), "the page's own keys: its time and paging")

	assert.Equal(t, keyPaths(t, f.c.Stats()), keyPaths(t, page["cache"]), "cache: the Stats")

	var services []json.RawMessage
	require.NoError(t, json.Unmarshal(page["services"], &services))
	rows := f.c.Services("", "", 1)
	require.Len(t, services, 1)
	assert.Equal(t, keyPaths(t, rows[0]), keyPaths(t, services[0]), "services[0]: a ServiceStats")
	assert.Contains(t, keyPaths(t, services[0]), "node_list[].metadata", "all the way down")

	var selectors []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(page["selectors"], &selectors))
	require.Len(t, selectors, 1)
	ss := f.sel.(cache.Selector).Stats()
	require.NotEmpty(t, ss.Ejected)
	want := keyPaths(t, ss)
	want = slices.DeleteFunc(want, func(k string) bool { return k == "cache" || len(k) > 6 && k[:6] == "cache." })
	want = append(want, "available", "name")
	slices.Sort(want)
	assert.Equal(t, want, keyPaths(t, selectors[0]), "selectors[0]: the name, and the SelectorStats without the cache's")
}

// keyPaths lists the keys of v's JSON, and of the objects within it, by
// their path from v, sorted: an array's elements are one "[]".
func keyPaths(t *testing.T, v any) []string {
	t.Helper()
	data, ok := v.(json.RawMessage)
	if !ok {
		var err error
		data, err = json.Marshal(v)
		require.NoError(t, err)
	}
	var tree any
	require.NoError(t, json.Unmarshal(data, &tree))
	set := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				set[prefix+k] = true
				walk(prefix+k+".", e)
			}
		case []any:
			for _, e := range v {
				walk(prefix[:len(prefix)-1]+"[].", e)
			}
		}
	}
	walk("", tree)
	return slices.Sorted(maps.Keys(set))
}
