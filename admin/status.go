// Package admin serves a read-only status page of a regcache Cache and of
// the selectors that read it: what the cache believes during an incident,
// without a metrics pipeline.
//
// The page shows the registry's state and since when, the watch stream's
// state, a row per service (its nodes, freshness, age, where its data came
// from, its last error and when its retry window closes), and the nodes
// each selector holds ejected, why, and when they return. The same data
// is served as JSON with ?format=json, made of the cache's own types in
// their JSON (see cache.Stats): "time", when the page was read; "cache",
// the cache's Stats; "services", the page's rows, each a
// cache.ServiceStats with its nodes by version and Id; "selectors", each
// selector's "name", whether it is "available" (a cache.Selector), and its
// cache.SelectorStats but for the cache's; and the paging, "prefix",
// "after", "limit", "next" and "next_query".
//
// It only reads: GET and HEAD are served, any other method gets 405. Names
// and metadata come from the registry, and are escaped on the page. No
// control character and no byte that is not UTF-8 reaches either format
// raw: the HTML shows them as pictures or U+FFFD, and such a name also
// quoted, so that it is not taken for another; the JSON escapes them.
// Services are sorted by name and paged: ?prefix= keeps the services whose
// names start with it, ?limit= sets the page size (100 by default, at most
// 1000), and ?after= starts the page after that name (the JSON's "next", and
// the page's "next page" link). Building a page reads the cache a chunk of
// entries at a time, as Cache.Stats does, so a large cache is never held
// up for long.
//
// The page carries the cache's view of the registry: anyone who can reach
// it learns the services and their addresses. Mount it where debug
// endpoints such as net/http/pprof go, not on a public port.
package admin

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	cache "github.com/regcache/cache"
	"go-micro.dev/v4/selector"
)

// status is what the page shows, and what ?format=json returns: the
// cache's own Stats, ServiceStats and SelectorStats, in their JSON, with
// the page's time and paging.
type status struct {
	// Time is when the status was read.
	Time time.Time `json:"time"`
	// Cache is the cache's Stats.
	Cache cache.Stats `json:"cache"`

	// Prefix, After and Limit are the page asked for.
	Prefix string `json:"prefix"`
	After  string `json:"after,omitempty"`
	Limit  int    `json:"limit"`
	// Services are this page's services, by name, each with its nodes
	// by version and Id.
	Services []cache.ServiceStats `json:"services"`
	// Next is the after of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
	// NextQuery is the query of the next page as JSON
	// ("?after=...&format=json"), percent-encoded: it keeps a name that is
	// not valid UTF-8, which Next, a JSON string, cannot. JSON only.
	NextQuery string `json:"next_query,omitempty"`

	// Selectors has one entry per selector given to Handler, in order.
	Selectors []selectorStatus `json:"selectors"`
}

// selectorStatus is one selector's passive health: its Stats, with the
// ejected nodes of the services on the page's prefix, and without the
// cache's Stats, which the page shows once.
type selectorStatus struct {
	// Name is the selector's String().
	Name string `json:"name"`
	// Available is false for a selector that is not a cache.Selector
	// (not one of cache.NewSelector's): nothing more is known of it.
	Available bool `json:"available"`
	cache.SelectorStats
}

// Page sizes.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

// Handler returns the status page of c and of the selectors, which should
// be ones that read c (made by cache.NewSelector, or the client's selector
// after gomicro.Registry). It answers GET and HEAD only. It panics if c
// or a selector is nil.
func Handler(c cache.Cache, selectors ...selector.Selector) http.Handler {
	if c == nil {
		panic("regcache/admin: Handler: cache must not be nil")
	}
	for i, s := range selectors {
		if s == nil {
			panic(fmt.Sprintf("regcache/admin: Handler: selector %d must not be nil", i+1))
		}
	}
	return &handler{c: c, selectors: selectors, now: time.Now}
}

type handler struct {
	c         cache.Cache
	selectors []selector.Selector
	now       func() time.Time
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "regcache/admin: read-only: GET or HEAD only", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	limit := defaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > maxLimit {
			http.Error(w, "regcache/admin: limit must be a number from 1 to "+strconv.Itoa(maxLimit), http.StatusBadRequest)
			return
		}
		limit = n
	}
	st := h.status(q.Get("prefix"), q.Get("after"), limit)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if q.Get("format") == "json" {
		if st.Next != "" {
			st.NextQuery = view{st}.NextURL() + "&format=json"
		}
		writeJSON(w, r, st)
		return
	}
	writeHTML(w, r, st)
}

// status reads the cache and the selectors.
func (h *handler) status(prefix, after string, limit int) *status {
	now := h.now()
	st := &status{
		Time:      now,
		Cache:     h.c.Stats(),
		Prefix:    prefix,
		After:     after,
		Limit:     limit,
		Selectors: []selectorStatus{},
	}
	st.Services = h.c.Services(prefix, after, limit+1)
	if st.Services == nil {
		st.Services = []cache.ServiceStats{} // "services": [], not null
	}
	if len(st.Services) > limit {
		st.Services = st.Services[:limit]
		st.Next = st.Services[limit-1].Name
	}
	for i := range st.Services {
		// In a stable order, whatever order the registry gave.
		slices.SortFunc(st.Services[i].NodeList, func(a, b cache.NodeStats) int {
			return cmp.Or(cmp.Compare(a.Version, b.Version), cmp.Compare(a.Id, b.Id))
		})
	}
	for _, sel := range h.selectors {
		st.Selectors = append(st.Selectors, selectorOf(sel, prefix))
	}
	return st
}

// selectorOf is the status of sel, with the ejected nodes of the services
// whose names start with prefix.
func selectorOf(sel selector.Selector, prefix string) selectorStatus {
	out := selectorStatus{Name: sel.String()}
	s, ok := sel.(cache.Selector)
	if !ok {
		return out
	}
	out.Available, out.SelectorStats = true, s.Stats()
	out.Cache = cache.Stats{}
	out.Ejected = slices.DeleteFunc(out.Ejected, func(e cache.EjectedNode) bool {
		return !strings.HasPrefix(e.Service, prefix)
	})
	return out
}
