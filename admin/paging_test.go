package admin_test

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/admin"
)

// Paging by the JSON's next_query visits every service once, also past
// names that are not valid UTF-8 (go-micro registries do not check names).
// It holds off paging by "next" alone: encoding/json replaces the invalid
// byte with U+FFFD, so a client that fed "next" back as ?after= resumed at
// the wrong name and repeated a service it already had. The HTML link
// keeps the bytes.
func TestJSONNextQueryPagesPastInvalidUTF8Names(t *testing.T) {
	names := []string{"a\xff", "a\xffz", "b"}
	var svcs []*registry.Service
	for i, n := range names {
		svcs = append(svcs, &registry.Service{Name: n, Version: "1", Nodes: []*registry.Node{{Id: fmt.Sprint(i), Address: "1.2.3.4:1"}}})
	}
	c := cacheOf(t, svcs...)
	h := admin.Handler(c)
	seen := map[string]int{}
	query := "?" + url.Values{"format": {"json"}, "limit": {"1"}}.Encode()
	for page := 0; page < 10; page++ {
		res, body := serve(t, h, http.MethodGet, "/"+query)
		require.Equal(t, http.StatusOK, res.StatusCode)
		var st statusJSON
		require.NoError(t, json.Unmarshal([]byte(body), &st))
		for _, s := range st.Services {
			seen[s.Name]++
		}
		if st.NextQuery == "" {
			break
		}
		query = st.NextQuery
	}
	for n, k := range seen {
		assert.Equal(t, 1, k, "service %q listed %d times when paging by the JSON's next_query", n, k)
	}
	assert.Len(t, seen, len(names), "paging by JSON next_query: %q", seen)
}

// Paging by the JSON's "next" visits every service once, also with unicode
// names, a NUL, and names that are prefixes of others.
func TestJSONNextVisitsEveryService(t *testing.T) {
	names := []string{"", "a", "a b", "a&b", "a+b", "a/b", "aa", "é", "日本", "z\u0000", "zz"}
	var svcs []*registry.Service
	for i, n := range names {
		if n == "" {
			continue
		}
		svcs = append(svcs, &registry.Service{Name: n, Version: "1", Nodes: []*registry.Node{{Id: fmt.Sprint(i), Address: "1.2.3.4:1"}}})
	}
	c := cacheOf(t, svcs...)
	h := admin.Handler(c)
	seen := map[string]int{}
	target := "/?limit=2&format=json"
	for page := 0; page < 20; page++ {
		_, body := serve(t, h, http.MethodGet, target)
		var st statusJSON
		require.NoError(t, json.Unmarshal([]byte(body), &st))
		for _, s := range st.Services {
			seen[s.Name]++
		}
		if st.Next == "" {
			break
		}
		target = "/?" + url.Values{"format": {"json"}, "limit": {"2"}, "after": {st.Next}}.Encode()
	}
	for _, s := range svcs {
		assert.Equal(t, 1, seen[s.Name], "%q", s.Name)
	}
}

// Paging through the HTML page's own "Next page" link (href unescaped as a
// browser does) visits every service once, with names holding URL and HTML
// specials.
func TestHTMLNextLinksVisitEveryService(t *testing.T) {
	names := []string{"a", "a#b", "a%2Fb", "a&amp;b", "a&b", "a?b=c", "a b", "a+b", "a\"b", "a'b", "a<b", "é", "日本"}
	var svcs []*registry.Service
	for i, n := range names {
		svcs = append(svcs, &registry.Service{Name: n, Version: "1", Nodes: []*registry.Node{{Id: fmt.Sprint(i), Address: "1.2.3.4:1"}}})
	}
	c := cacheOf(t, svcs...)
	h := admin.Handler(c)
	seen := map[string]int{}
	target := "/?limit=1"
	for page := 0; page < 40; page++ {
		res, body := serve(t, h, http.MethodGet, target)
		require.Equal(t, http.StatusOK, res.StatusCode, target)
		// the names on the page, from data-name
		for _, part := range strings.Split(body, `data-name="`)[1:] {
			seen[html.UnescapeString(part[:strings.IndexByte(part, '"')])]++
		}
		i := strings.Index(body, `id="next" href="`)
		if i < 0 {
			break
		}
		rest := body[i+len(`id="next" href="`):]
		target = "/" + html.UnescapeString(rest[:strings.IndexByte(rest, '"')])
	}
	for _, n := range names {
		assert.Equal(t, 1, seen[n], "%q", n)
	}
}

// A page is not cut short by an entry dropped between the pick of its
// names and the reading of its row (a not-found or throttled name, kept
// only for its retry window, swept by any slow lookup). Handler asks for
// limit+1 rows and sets Next only if it got more than limit, so a short
// page from Services would come back without Next although more services
// exist after it: an operator (or a script following "next") would stop
// paging early and never see them. Here three services exist throughout,
// named after the churning not-found names, and every page of limit=2
// must have 2 services or a Next.
//
// Not deterministic (it needs the sweep to land between the pick and the
// row read): a 20 µs retry window makes the not-found entries come and go
// fast enough that, when Services skipped the dropped entries, it happened
// within a fraction of a second (5 of 5 runs, after 6 000 to 30 000
// pages). TestServicesKeepsRowsOfEntriesDroppedAfterThePick, in the root
// package, forces the interleaving. It stops at the first occurrence,
// within a bounded number of pages.
func TestPageNotCutShortByAnEntryDroppedMeanwhile(t *testing.T) {
	reg := registry.NewMemoryRegistry()
	real := []string{"z1", "z2", "z3"}
	for _, n := range real {
		require.NoError(t, reg.Register(&registry.Service{Name: n, Version: "1", Nodes: []*registry.Node{{Id: n, Address: "1.2.3.4:1"}}}))
	}
	c := cache.New(reg, cache.WithLogger(quiet), cache.WithMinimumRetryInterval(20*time.Microsecond))
	t.Cleanup(c.Stop)
	for _, n := range real {
		_, err := c.GetService(n)
		require.NoError(t, err)
	}
	h := admin.Handler(c)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // not-found names sorting before the real ones, dropped soon after
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			_, _ = c.GetService(fmt.Sprintf("a%d", i%64))
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	for page := 0; page < 200000; page++ {
		if rows := c.Services("", "", 3); len(rows) >= 3 {
			continue // the page below would not be cut short
		}
		_, body := serve(t, h, http.MethodGet, "/?format=json&limit=2&prefix=")
		var st statusJSON
		require.NoError(t, json.Unmarshal([]byte(body), &st))
		if len(st.Services) < 2 && st.Next == "" {
			t.Errorf("page %d (after Services returned a short page): %d services and no next page, with z1..z3 cached throughout: %+v", page, len(st.Services), st.Services)
			return
		}
	}
	t.Log("not reproduced in 200000 pages")
}

// Paging through the HTML by its own "Next page" links, as a browser
// follows them, lists every service exactly once and in the order of the
// JSON pages, also when names differ only in bytes that are not UTF-8 or
// in control characters, which the page shows alike (U+FFFD, or a
// control's picture, as a real U+FFFD or picture shows). It holds off a
// cursor or a row that carried the name's rendering instead of the name:
// "inv\xfea" listed as "inv\ufffda", which the page already showed, and
// never found by a reader over 7 pages.
func TestHTMLPagesListEveryServiceByItsBytes(t *testing.T) {
	names := []string{"a", "inv\xfea", "inv\xffa", "inv\ufffda", "inv\xfe", "inv\x01a", "inv\u2401a",
		"inv\u0085a", "inv\ta", "inv a", "inv\u200ba", "invа", "z"}
	var svcs []*registry.Service
	for i, n := range names {
		svcs = append(svcs, &registry.Service{Name: n, Version: "1", Nodes: []*registry.Node{{Id: fmt.Sprint(i), Address: "1.2.3.4:1"}}})
	}
	h := admin.Handler(cacheOf(t, svcs...))
	want := slices.Clone(names)
	slices.Sort(want) // by bytes, as the cache sorts

	var got, shown []string
	page, err := url.Parse("http://status.test/debug/regcache/?limit=2")
	require.NoError(t, err)
	for range len(names) + 1 {
		res, body := serve(t, h, http.MethodGet, page.String())
		require.Equal(t, http.StatusOK, res.StatusCode, page)
		rows := attrs(body, `<tr class="service" data-key="`)
		require.NotEmpty(t, rows, "page %s lists no service", page)
		for _, key := range rows {
			name, err := url.QueryUnescape(key)
			require.NoError(t, err, key)
			got = append(got, name)
		}
		for _, part := range strings.Split(body, `<td class="name mono">`)[1:] {
			shown = append(shown, html.UnescapeString(tags.ReplaceAllString(part[:strings.Index(part, "</td>")], "")))
		}
		next := attrs(body, `<a id="next" href="`)
		if len(next) == 0 {
			break
		}
		ref, err := url.Parse(next[0])
		require.NoError(t, err, next[0])
		page = page.ResolveReference(ref)
	}
	assert.Equal(t, quoteAll(want), quoteAll(got), "the services, paging the HTML by its links")
	// and a reader tells them apart: each that the page cannot show as
	// it is also shows quoted.
	require.Len(t, shown, len(want))
	assert.Contains(t, shown, "inv\ufffda \"inv\\xfea\"")
	assert.Contains(t, shown, "inv\ufffda", "a real U+FFFD is shown as it is")
	seen := map[string]bool{}
	for _, s := range shown {
		assert.False(t, seen[s], "two services shown as %q", s)
		seen[s] = true
	}

	// The JSON pages list the same services in the same order, each name
	// as encoding/json writes it.
	var inJSON []string
	query := "?format=json&limit=3"
	for range len(names) + 1 {
		_, body := serve(t, h, http.MethodGet, "/"+query)
		var p struct {
			Services []struct {
				Name string `json:"name"`
			} `json:"services"`
			NextQuery string `json:"next_query"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &p))
		for _, s := range p.Services {
			inJSON = append(inJSON, s.Name)
		}
		if p.NextQuery == "" {
			break
		}
		query = p.NextQuery
	}
	var asJSON []string
	for _, n := range got {
		b, err := json.Marshal(n)
		require.NoError(t, err)
		var s string
		require.NoError(t, json.Unmarshal(b, &s))
		asJSON = append(asJSON, s)
	}
	assert.Equal(t, quoteAll(asJSON), quoteAll(inJSON), "the JSON pages, in the HTML's order")
}

// attrs returns the values of the attribute that each occurrence of open,
// which ends with the attribute's opening quote, starts, unescaped as a
// browser reads them.
func attrs(body, open string) []string {
	var out []string
	for _, part := range strings.Split(body, open)[1:] {
		out = append(out, html.UnescapeString(part[:strings.IndexByte(part, '"')]))
	}
	return out
}

// tags matches the markup in a cell.
var tags = regexp.MustCompile(`<[^>]*>`)

// quoteAll quotes each name, so that a failure shows the bytes.
func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(n)
	}
	return out
}
