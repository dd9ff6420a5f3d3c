package admin_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
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
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Len(t, st.Services, 1)
	s := st.Services[0]
	assert.Equal(t, name, s.Name)
	require.Len(t, s.NodeList, 1)
	assert.Equal(t, "id"+nasty, s.NodeList[0].Id)
	assert.Equal(t, "addr"+nasty, s.NodeList[0].Address)
	assert.Equal(t, "v"+nasty, s.NodeList[0].Metadata["k"+nasty])
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

// hostile holds every kind of control character, C0 (ESC, BEL, CR), DEL
// and C1 (NEL, CSI, ST, OSC), as terminals read them, then bytes that are
// not UTF-8: a lone continuation byte, a cut sequence, an overlong slash.
const hostile = "\x1b[31m\x07\r\x7f\u0085\u009b31m\u009c\u009d0;pwned\u009c|\xff|\xe2\x80|\xc0\xaf|\xc2"

// badRegistry answers for every name from the memory registry it wraps,
// except a name starting with "fail", whose error is hostile.
type badRegistry struct{ registry.Registry }

func (r badRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	if strings.HasPrefix(name, "fail") {
		return nil, errors.New("dial " + hostile)
	}
	return r.Registry.GetService(name, opts...)
}

// rawControls lists what text holds that a terminal could run or that is
// not UTF-8: every control character but a newline and a tab, and every
// byte that is not UTF-8, with its offset.
func rawControls(text string) []string {
	var bad []string
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			bad = append(bad, fmt.Sprintf("byte %#x at %d is not UTF-8", text[i], i))
		case unicode.IsControl(r) && r != '\n' && r != '\t':
			bad = append(bad, fmt.Sprintf("control %U at %d", r, i))
		}
		i += size
	}
	return bad
}

// Every control character (C0, DEL and C1) and every byte that is not
// UTF-8, in every string from the registry (names, versions, ids,
// addresses, metadata, errors, an ejection's reason) and in the query
// echoed back, shows as a visible replacement in the HTML and the JSON,
// and the JSON still decodes to the exact strings where they are UTF-8. It
// holds off C1 controls (CSI, OSC) reaching the HTML and the JSON raw,
// although docs/admin.md promised that a page fetched into a terminal runs
// no escape sequence, and bytes that are not UTF-8 passing into a page
// served as UTF-8.
func TestControlCharactersAndInvalidBytesAreVisible(t *testing.T) {
	mem := registry.NewMemoryRegistry()
	name := "svc" + hostile
	node := &registry.Node{Id: "id" + hostile, Address: "127.0.0.1:1", Metadata: map[string]string{"k" + hostile: "v" + hostile}}
	require.NoError(t, mem.Register(&registry.Service{Name: name, Version: "v" + hostile, Nodes: []*registry.Node{node}}))
	c := cache.New(badRegistry{mem}, cache.WithLogger(quiet))
	t.Cleanup(c.Stop)
	svcs, err := c.GetService(name)
	require.NoError(t, err)
	_, err = c.GetService("fail" + hostile)
	require.Error(t, err)
	sel := cache.NewSelector(c)
	down := merrors.InternalServerError("go.micro.client", "connection error: "+hostile)
	for i := 0; i < 3; i++ {
		sel.Mark(name, svcs[0].Nodes[0], down)
	}
	require.Len(t, sel.(cache.Selector).Stats().Ejected, 1, "the node is ejected")
	h := admin.Handler(c, sel)
	query := "?" + url.Values{"prefix": {""}, "after": {"\x01\u009b\xff"}}.Encode()

	res, body := serve(t, h, http.MethodGet, "/"+query)
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Empty(t, rawControls(body), "the HTML page")
	assert.Contains(t, body, "␛[31m␇␍␡\ufffd\ufffd31m", "C0 and DEL as their pictures, C1 as U+FFFD")

	res, body = serve(t, h, http.MethodGet, "/"+query+"&format=json")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Empty(t, rawControls(body), "the JSON")
	assert.Contains(t, body, `\u001b[31m\u0007\r\u007f\u0085\u009b31m\u009c\u009d0;pwned\u009c|\ufffd|`, "escaped as JSON escapes C0")
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	// encoding/json turns each byte that is not UTF-8 into U+FFFD.
	var valid string
	for i := 0; i < len(hostile); {
		r, size := utf8.DecodeRuneInString(hostile[i:])
		valid += string(r)
		i += size
	}
	require.Len(t, st.Services, 2)
	s, failed := st.Services[1], st.Services[0]
	assert.Equal(t, "svc"+valid, s.Name, "exact where UTF-8")
	require.Len(t, s.NodeList, 1)
	assert.Equal(t, "id"+valid, s.NodeList[0].Id)
	assert.Equal(t, "v"+valid, s.NodeList[0].Version)
	assert.Equal(t, map[string]string{"k" + valid: "v" + valid}, s.NodeList[0].Metadata)
	assert.Equal(t, "fail"+valid, failed.Name)
	assert.Contains(t, failed.LastError, "dial "+valid)
	require.Len(t, st.Selectors, 1)
	require.Len(t, st.Selectors[0].Ejected, 1)
	// The reason is the error's text, go-micro's JSON, which escapes C0.
	assert.Contains(t, st.Selectors[0].Ejected[0].Reason, "\u009d0;pwned\u009c|")
}
