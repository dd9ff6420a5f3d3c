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

const nasty = "<script>alert('x')</script>\"'</td></tr><td>\x01\x1b[31m\u2028&amp;"

// Every registry-controlled string (name, id, address, version, metadata
// key and value) with markup, quotes and control characters: the HTML page
// must not contain any of them raw, and the JSON must be valid and give
// them back exactly.
func TestEveryRegistryStringIsEscaped(t *testing.T) {
	name := "svc" + nasty
	c := cacheOf(t, &registry.Service{Name: name, Version: "v" + nasty, Nodes: []*registry.Node{{
		Id: "id" + nasty, Address: "addr" + nasty, Metadata: map[string]string{"k" + nasty: "v" + nasty},
	}}})
	h := admin.Handler(c)
	res, body := serve(t, h, http.MethodGet, "/")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.NotContains(t, body, "<script>")
	assert.NotContains(t, body, "</td></tr><td>")
	assert.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'none'")

	res, body = serve(t, h, http.MethodGet, "/?format=json")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.True(t, json.Valid([]byte(body)))
	var st admin.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Len(t, st.Services, 1)
	s := st.Services[0]
	assert.Equal(t, name, s.Name)
	require.Len(t, s.Nodes, 1)
	assert.Equal(t, "id"+nasty, s.Nodes[0].Id)
	assert.Equal(t, "addr"+nasty, s.Nodes[0].Address)
	assert.Equal(t, "v"+nasty, s.Nodes[0].Metadata["k"+nasty])
}

// Control characters from the registry do not reach the HTML page raw. It
// holds off ESC and the other C0 characters passing through the template:
// they are not allowed in HTML text (a parse error), and an operator who
// curled the page into a terminal got the registry's escape sequences
// interpreted by it (ESC[31m turns it red; OSC sequences can set the title
// or write to the clipboard on some terminals).
func TestControlCharactersShowAsPictures(t *testing.T) {
	c := cacheOf(t, &registry.Service{Name: "svc\x1b]0;pwned\x07\x1b[31m", Version: "1", Nodes: []*registry.Node{{Id: "n", Address: "1.2.3.4:1"}}})
	_, body := serve(t, admin.Handler(c), http.MethodGet, "/")
	assert.NotContains(t, body, "\x1b", "raw ESC in the HTML page")
	assert.NotContains(t, body, "\x07", "raw BEL in the HTML page")
}
