package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/admin"
)

// A limit over 1000 is 400 Bad Request, as docs/admin.md says ("1 to 1000
// (default 100); anything else is 400 Bad Request"). It holds off a limit
// silently capped: an operator who asked for limit=5000 to see
// "everything" got 1000 rows and a 200, with no sign the answer was cut
// but a next link that a JSON consumer may not follow.
func TestLimitOverMaximumIsRejected(t *testing.T) {
	c := cacheOf(t, &registry.Service{Name: "a", Version: "1", Nodes: []*registry.Node{{Id: "a-1", Address: "1.2.3.4:1"}}})
	h := admin.Handler(c)
	for _, q := range []string{"limit=1001", "limit=5000", "limit=99999999999"} {
		res, _ := serve(t, h, http.MethodGet, "/?format=json&"+q)
		assert.Equal(t, http.StatusBadRequest, res.StatusCode, "%s: docs/admin.md says anything outside 1..1000 is 400", q)
	}
}

// Limits that are not a number from 1 to 1000 are refused, and so is every
// method but GET and HEAD; HEAD has no body, and a prefix of 64 KiB is only
// a filter that matches nothing.
func TestBadQueriesAndMethodsAreRefused(t *testing.T) {
	c := cacheOf(t, &registry.Service{Name: "a", Version: "1", Nodes: []*registry.Node{{Id: "a-1", Address: "1.2.3.4:1"}}})
	h := admin.Handler(c)
	for _, q := range []string{"limit=-1", "limit=0", "limit=abc", "limit=1.5", "limit=%00", "limit=1e3"} {
		res, _ := serve(t, h, http.MethodGet, "/?"+q)
		assert.Equal(t, http.StatusBadRequest, res.StatusCode, q)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, "PROPFIND", "TRACE"} {
		res, _ := serve(t, h, m, "/")
		assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, m)
		assert.Equal(t, "GET, HEAD", res.Header.Get("Allow"), m)
	}
	res, body := serve(t, h, http.MethodHead, "/?format=json")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Empty(t, body)
	long := strings.Repeat("p", 1<<16)
	res, body = serve(t, h, http.MethodGet, "/?format=json&prefix="+long)
	require.Equal(t, http.StatusOK, res.StatusCode)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Empty(t, st.Services)
}
