package admin_test

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/admin"
)

func attackServe(t *testing.T, h http.Handler, method, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func attackCache(t *testing.T, svcs ...*registry.Service) cache.Cache {
	t.Helper()
	reg := registry.NewMemoryRegistry()
	for _, s := range svcs {
		require.NoError(t, reg.Register(s))
	}
	c := cache.New(reg, cache.WithLogger(quiet))
	t.Cleanup(c.Stop)
	for _, s := range svcs {
		_, err := c.GetService(s.Name)
		require.NoError(t, err)
	}
	return c
}

// docs/admin.md: "limit: services per page, 1 to 1000 (default 100);
// anything else is 400 Bad Request". A limit over 1000 is silently capped
// instead: an operator who asks for limit=5000 to see "everything" gets 1000
// rows and a 200, with no sign the answer was cut except a next link the
// JSON consumer may not follow.
func TestAttackLimitOverMaximumIsRejectedAsDocumented(t *testing.T) {
	c := attackCache(t, &registry.Service{Name: "a", Version: "1", Nodes: []*registry.Node{{Id: "a-1", Address: "1.2.3.4:1"}}})
	h := admin.Handler(c)
	for _, q := range []string{"limit=1001", "limit=5000", "limit=99999999999"} {
		res, _ := attackServe(t, h, http.MethodGet, "/?format=json&"+q)
		assert.Equal(t, http.StatusBadRequest, res.StatusCode, "%s: docs/admin.md says anything outside 1..1000 is 400", q)
	}
}

// Bad limits that must be refused, and methods that must be refused: these
// held when tried.
func TestAttackBadQueriesAndMethods(t *testing.T) {
	c := attackCache(t, &registry.Service{Name: "a", Version: "1", Nodes: []*registry.Node{{Id: "a-1", Address: "1.2.3.4:1"}}})
	h := admin.Handler(c)
	for _, q := range []string{"limit=-1", "limit=0", "limit=abc", "limit=1.5", "limit=%00", "limit=1e3"} {
		res, _ := attackServe(t, h, http.MethodGet, "/?"+q)
		assert.Equal(t, http.StatusBadRequest, res.StatusCode, q)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, "PROPFIND", "TRACE"} {
		res, _ := attackServe(t, h, m, "/")
		assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, m)
		assert.Equal(t, "GET, HEAD", res.Header.Get("Allow"), m)
	}
	res, body := attackServe(t, h, http.MethodHead, "/?format=json")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Empty(t, body)
	long := strings.Repeat("p", 1<<16)
	res, body = attackServe(t, h, http.MethodGet, "/?format=json&prefix="+long)
	require.Equal(t, http.StatusOK, res.StatusCode)
	var st admin.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Empty(t, st.Services)
}

// Handler(c, nil): a selector slot left nil (for example a client whose
// Options().Selector was never set) is accepted by Handler, and every
// request then panics in ServeHTTP (nil interface's String()). net/http
// recovers it, so the operator sees an empty reply during an incident, not
// the page; Handler panics at construction for a nil cache but not for a
// nil selector.
func TestAttackNilSelectorDoesNotBreakThePage(t *testing.T) {
	c := attackCache(t, &registry.Service{Name: "a", Version: "1", Nodes: []*registry.Node{{Id: "a-1", Address: "1.2.3.4:1"}}})
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
		attackServe(t, h, http.MethodGet, "/?format=json")
	}()
	assert.Nil(t, panicked, "Handler(c, nil) accepted, but every page request panics")
}

// go-micro's default selector is not regcache's: it shows as not available,
// and the page still works. Held.
func TestAttackForeignSelector(t *testing.T) {
	reg := registry.NewMemoryRegistry()
	c := attackCache(t)
	h := admin.Handler(c, selector.NewSelector(selector.Registry(reg)))
	res, body := attackServe(t, h, http.MethodGet, "/?format=json")
	require.Equal(t, http.StatusOK, res.StatusCode)
	var st admin.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Len(t, st.Selectors, 1)
	assert.False(t, st.Selectors[0].Available)
	res, _ = attackServe(t, h, http.MethodGet, "/")
	require.Equal(t, http.StatusOK, res.StatusCode)
}

const nasty = "<script>alert('x')</script>\"'</td></tr><td>\x01\x1b[31m\u2028&amp;"

// Every registry-controlled string (name, id, address, version, metadata
// key and value) with markup, quotes and control characters: the HTML page
// must not contain any of them raw, and the JSON must be valid and give
// them back exactly.
func TestAttackEscapingEverywhere(t *testing.T) {
	name := "svc" + nasty
	c := attackCache(t, &registry.Service{Name: name, Version: "v" + nasty, Nodes: []*registry.Node{{
		Id: "id" + nasty, Address: "addr" + nasty, Metadata: map[string]string{"k" + nasty: "v" + nasty},
	}}})
	h := admin.Handler(c)
	res, body := attackServe(t, h, http.MethodGet, "/")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.NotContains(t, body, "<script>")
	assert.NotContains(t, body, "</td></tr><td>")
	assert.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'none'")

	res, body = attackServe(t, h, http.MethodGet, "/?format=json")
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

// A service name that is not valid UTF-8 (go-micro registries do not
// check names). The JSON's "next" is the after of the next page, but
// encoding/json replaces the invalid byte with U+FFFD, so a client that
// pages by feeding "next" back as ?after= resumes at the wrong name: here
// it repeats a service it already had. The HTML link keeps the bytes.
func TestAttackJSONNextWithInvalidUTF8NameRepeatsRows(t *testing.T) {
	names := []string{"a\xff", "a\xffz", "b"}
	var svcs []*registry.Service
	for i, n := range names {
		svcs = append(svcs, &registry.Service{Name: n, Version: "1", Nodes: []*registry.Node{{Id: fmt.Sprint(i), Address: "1.2.3.4:1"}}})
	}
	c := attackCache(t, svcs...)
	h := admin.Handler(c)
	seen := map[string]int{}
	query := "?" + url.Values{"format": {"json"}, "limit": {"1"}}.Encode()
	for page := 0; page < 10; page++ {
		res, body := attackServe(t, h, http.MethodGet, "/"+query)
		require.Equal(t, http.StatusOK, res.StatusCode)
		var st admin.Status
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

// Paging through the HTML's own "next page" links visits every service
// once, also with unicode names and names that are prefixes of others.
// Held.
func TestAttackHTMLNextLinksVisitAll(t *testing.T) {
	names := []string{"", "a", "a b", "a&b", "a+b", "a/b", "aa", "é", "日本", "z\u0000", "zz"}
	var svcs []*registry.Service
	for i, n := range names {
		if n == "" {
			continue
		}
		svcs = append(svcs, &registry.Service{Name: n, Version: "1", Nodes: []*registry.Node{{Id: fmt.Sprint(i), Address: "1.2.3.4:1"}}})
	}
	c := attackCache(t, svcs...)
	h := admin.Handler(c)
	seen := map[string]int{}
	target := "/?limit=2&format=json"
	for page := 0; page < 20; page++ {
		_, body := attackServe(t, h, http.MethodGet, target)
		var st admin.Status
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

// A cache of 100 000 services: a page is built while lookups go on. The
// longest wait of a lookup that takes the cache's lock (a cold name) is
// logged, not asserted.
func TestAttackLargeCachePageLockWait(t *testing.T) {
	if testing.Short() {
		t.Skip("large")
	}
	reg := registry.NewMemoryRegistry()
	const n = 100000
	for i := 0; i < n; i++ {
		require.NoError(t, reg.Register(&registry.Service{Name: fmt.Sprintf("svc-%06d", i), Version: "1", Nodes: []*registry.Node{{Id: "n", Address: "1.2.3.4:1"}}}))
	}
	c := cache.New(reg, cache.WithLogger(quiet))
	t.Cleanup(c.Stop)
	for i := 0; i < n; i++ {
		_, err := c.GetService(fmt.Sprintf("svc-%06d", i))
		require.NoError(t, err)
	}
	h := admin.Handler(c)
	// measure runs cold lookups (each takes the cache's lock) while work
	// runs, and returns the longest and the number of lookups.
	measure := func(work func()) (time.Duration, int) {
		var stop atomic.Bool
		var longest atomic.Int64
		var count atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				start := time.Now()
				_, _ = c.GetService(fmt.Sprintf("cold-%d-%d", count.Load(), i)) // not found: takes the lock
				if d := time.Since(start); int64(d) > longest.Load() {
					longest.Store(int64(d))
				}
				count.Add(1)
			}
		}()
		work()
		stop.Store(true)
		wg.Wait()
		return time.Duration(longest.Load()), int(count.Load())
	}
	var pages time.Duration
	withPages, n1 := measure(func() {
		start := time.Now()
		for _, q := range []string{"/?format=json", "/", "/?limit=1000&after=svc-050000", "/?prefix=svc-09"} {
			res, _ := attackServe(t, h, http.MethodGet, q)
			require.Equal(t, http.StatusOK, res.StatusCode)
		}
		pages = time.Since(start)
	})
	idle, n2 := measure(func() { time.Sleep(pages) })
	t.Logf("4 pages of 100 000 services took %v; longest concurrent cold lookup %v (%d lookups); with no page, over as long: %v (%d lookups)",
		pages, withPages, n1, idle, n2)
}

// Control characters from the registry reach the HTML page raw: ESC and
// other C0 characters are not allowed in HTML text (a parse error), and an
// operator who curls the page into a terminal gets the registry's escape
// sequences interpreted by the terminal (here ESC[31m turns it red; OSC
// sequences can set the title or write to the clipboard on some
// terminals). The JSON escapes them; the page does not.
func TestAttackControlCharactersReachTheHTMLRaw(t *testing.T) {
	c := attackCache(t, &registry.Service{Name: "svc\x1b]0;pwned\x07\x1b[31m", Version: "1", Nodes: []*registry.Node{{Id: "n", Address: "1.2.3.4:1"}}})
	_, body := attackServe(t, admin.Handler(c), http.MethodGet, "/")
	assert.NotContains(t, body, "\x1b", "raw ESC in the HTML page")
	assert.NotContains(t, body, "\x07", "raw BEL in the HTML page")
}

// Paging through the HTML page's own "Next page" link (href unescaped as a
// browser does) visits every service once, with names holding URL and HTML
// specials.
func TestAttackHTMLNextHrefVisitsAll(t *testing.T) {
	names := []string{"a", "a#b", "a%2Fb", "a&amp;b", "a&b", "a?b=c", "a b", "a+b", "a\"b", "a'b", "a<b", "é", "日本"}
	var svcs []*registry.Service
	for i, n := range names {
		svcs = append(svcs, &registry.Service{Name: n, Version: "1", Nodes: []*registry.Node{{Id: fmt.Sprint(i), Address: "1.2.3.4:1"}}})
	}
	c := attackCache(t, svcs...)
	h := admin.Handler(c)
	seen := map[string]int{}
	target := "/?limit=1"
	for page := 0; page < 40; page++ {
		res, body := attackServe(t, h, http.MethodGet, target)
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

// Services picks a page's names without the lock, then reads their rows
// and skips the entries dropped meanwhile; Handler asks for limit+1 rows
// and sets Next only if it got more than limit. So when an entry picked for
// the page is dropped before its row is read (a not-found or throttled
// name, kept only for its retry window, swept by any slow lookup), the
// page comes back short and without Next, although more services exist
// after it: an operator (or a script following "next") stops paging
// early and never sees the services after that point. Here three services
// exist throughout, named after the churning not-found names, and a page
// of limit=2 comes back with fewer than 2 of them and no Next.
//
// Not deterministic (it needs the sweep to land between the pick and the
// row read): a 20 µs retry window makes the not-found entries come and go
// fast enough to hit it within a fraction of a second (5 of 5 runs, after
// 6 000 to 30 000 pages). With real windows the same happens, more rarely,
// whenever entries expire or are evicted (WithIdleEviction, the sweep of
// not-found and throttled names) while a page is read. It stops at the
// first occurrence, within a bounded number of pages.
func TestAttackPageCutShortByAnEntryDroppedMeanwhile(t *testing.T) {
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
		_, body := attackServe(t, h, http.MethodGet, "/?format=json&limit=2&prefix=")
		var st admin.Status
		require.NoError(t, json.Unmarshal([]byte(body), &st))
		if len(st.Services) < 2 && st.Next == "" {
			t.Errorf("page %d (after Services returned a short page): %d services and no next page, with z1..z3 cached throughout: %+v", page, len(st.Services), st.Services)
			return
		}
	}
	t.Log("not reproduced in 200000 pages")
}

// The JSON's counters: "lookups" and "their outcomes fresh_hits,
// event_serves, stale_serves, throttled, misses" (docs/admin.md). Lookups
// of the empty name are counted in lookups (cache.Stats.Invalid) but the
// page has no field for them, so the outcomes no longer add up to lookups:
// an operator or a dashboard checking the sum sees lookups that went
// nowhere. The HTML's "N: a fresh, b …, e waited" has the same gap.
func TestAttackJSONCountersAddUp(t *testing.T) {
	c := attackCache(t, &registry.Service{Name: "a", Version: "1", Nodes: []*registry.Node{{Id: "a-1", Address: "1.2.3.4:1"}}})
	for i := 0; i < 3; i++ {
		_, _ = c.GetService("")
		_, _ = c.GetService("a")
	}
	_, body := attackServe(t, admin.Handler(c), http.MethodGet, "/?format=json")
	var st admin.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	k := st.Counters
	assert.Equal(t, k.Lookups, k.FreshHits+k.EventServes+k.StaleServes+k.Throttled+k.Misses+k.Invalid,
		"lookups vs the sum of the outcomes the page shows: %+v", k)
}
