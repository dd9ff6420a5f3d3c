// Package admin serves a read-only status page of a regcache Cache and of
// the selectors that read it: what the cache believes during an incident,
// without a metrics pipeline.
//
// The page shows the registry's state and since when, the watch stream's
// state, a row per service (its nodes, freshness, age, where its data came
// from, its last error and when its retry window closes), and the nodes
// each selector holds ejected, why, and when they return. The same data
// is served as JSON with ?format=json: see Status for its fields.
//
// It only reads: GET and HEAD are served, any other method gets 405. Names
// and metadata come from the registry, and are escaped on the page. No
// control character and no byte that is not UTF-8 reaches either format
// raw: the HTML shows them as pictures or U+FFFD, and such a name also
// quoted, so that it is not taken for another; the JSON escapes them.
// Services are sorted by name and paged: ?prefix= keeps the services whose
// names start with it, ?limit= sets the page size (100 by default, at most
// 1000), and ?after= starts the page after that name (the Next field, and
// the page's "next page" link). Building a page reads the cache a chunk of
// entries at a time, as Cache.Stats does, so a large cache is never held
// up for long.
//
// The page carries the cache's view of the registry: anyone who can reach
// it learns the services and their addresses. Mount it where debug
// endpoints such as net/http/pprof go, not on a public port.
package admin

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	cache "github.com/regcache/cache"
	"go-micro.dev/v4/selector"
)

// Status is what the page shows, and what ?format=json returns. Times are
// RFC 3339, durations are in seconds, and a time that does not apply is
// left out.
type Status struct {
	// Time is when the status was read.
	Time time.Time `json:"time"`
	// Registry is the cache's view of the registry as a whole.
	Registry Registry `json:"registry"`
	// Stream is the watch stream's state.
	Stream Stream `json:"stream"`
	// Counters are the cache's cumulative counters (see cache.Stats).
	Counters Counters `json:"counters"`
	// SnapshotError is why the WithSnapshot file cannot be written, if
	// it cannot.
	SnapshotError string `json:"snapshot_error,omitempty"`

	// Prefix, After and Limit are the page asked for.
	Prefix string `json:"prefix"`
	After  string `json:"after,omitempty"`
	Limit  int    `json:"limit"`
	// Services are this page's services, by name.
	Services []Service `json:"services"`
	// Next is the after of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
	// NextQuery is the query of the next page as JSON
	// ("?after=...&format=json"), percent-encoded: it keeps a name that is
	// not valid UTF-8, which Next, a JSON string, cannot. JSON only.
	NextQuery string `json:"next_query,omitempty"`

	// Selectors has one entry per selector given to Handler, in order.
	Selectors []Selector `json:"selectors"`
}

// Registry is the registry's state as the cache holds it.
type Registry struct {
	// Down is set while the cache holds the registry to be down: it
	// serves cached data and sends one probe per probe interval.
	Down bool `json:"down"`
	// Since is when the failures began, while Down.
	Since *time.Time `json:"since,omitempty"`
	// Error is the failure that took it down, while Down.
	Error string `json:"error,omitempty"`
	// Outages counts the outages so far, the current one included, and
	// DownSeconds adds up their length.
	Outages     uint64  `json:"outages"`
	DownSeconds float64 `json:"down_seconds"`
}

// Stream is the state of the cache's watch stream.
type Stream struct {
	// State is "not started" (no lookup yet), "connected",
	// "reconnecting" or "stopped".
	State string `json:"state"`
	// Since is when the stream was last established or lost.
	Since *time.Time `json:"since,omitempty"`
}

// Counters are the cache's cumulative counters, as in cache.Stats.
type Counters struct {
	Entries     int    `json:"entries"`      // services held, with or without data
	Lookups     uint64 `json:"lookups"`      // GetService and Lookup calls
	FreshHits   uint64 `json:"fresh_hits"`   // answered with fresh data
	EventServes uint64 `json:"event_serves"` // answered with an event's data, not yet confirmed
	StaleServes uint64 `json:"stale_serves"` // answered with stale data
	Throttled   uint64 `json:"throttled"`    // refused: nothing cached and the retry window closed
	Misses      uint64 `json:"misses"`       // waited for a registry call
	Invalid     uint64 `json:"invalid"`      // refused: the empty name
	Refreshes   uint64 `json:"refreshes"`    // GetService calls to the registry
	// RefreshErrors counts the registry calls that failed.
	RefreshErrors uint64 `json:"refresh_errors"`
	// OldestStaleServedSeconds is the largest age stale data served so
	// far reached.
	OldestStaleServedSeconds float64 `json:"oldest_stale_served_seconds"`
}

// Service is one service as the cache holds it.
type Service struct {
	Name string `json:"name"`
	// Freshness is "fresh", "unconfirmed" (nodes an event announced, not
	// yet confirmed by a refresh, served without counting as stale),
	// "stale", or "no data" (a lookup failed, was throttled or found
	// nothing).
	Freshness string `json:"freshness"`
	// Source is where the nodes came from: "refresh", "event",
	// "snapshot" (the WithSnapshot file) or "last known nodes"; empty
	// with no data.
	Source string `json:"source,omitempty"`
	// AgeSeconds is the time since the registry last told the cache the
	// nodes, by a refresh or an event.
	AgeSeconds float64 `json:"age_seconds"`
	// Refreshing is set while a refresh is out.
	Refreshing bool `json:"refreshing,omitempty"`
	// Failures counts the refreshes that failed in a row; LastError is
	// the last one's error, and LastErrorAt when it failed.
	Failures    int        `json:"failures,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	// RetryAt is when the retry window closes, so that a refresh may
	// start; absent when one may start now.
	RetryAt *time.Time `json:"retry_at,omitempty"`
	// Nodes are the cached nodes, by version and Id.
	Nodes []Node `json:"nodes"`
}

// Node is one cached node.
type Node struct {
	Id       string            `json:"id"`
	Address  string            `json:"address"`
	Version  string            `json:"version"` // of the service the node runs
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Selector is one selector's passive health.
type Selector struct {
	// Name is the selector's String().
	Name string `json:"name"`
	// Available is false for a selector that has no Stats method (not
	// one of cache.NewSelector's): nothing more is known of it.
	Available bool `json:"available"`
	// Failures counts the attempts that could not reach their node, and
	// Ejections the ejections made.
	Failures  uint64 `json:"failures"`
	Ejections uint64 `json:"ejections"`
	// Ejected are the nodes ejected now, of the services on the page's
	// prefix, by service and node.
	Ejected []Ejected `json:"ejected"`
}

// Ejected is one node that a selector keeps away from.
type Ejected struct {
	Service string `json:"service"`
	Id      string `json:"id"`
	Address string `json:"address"`
	// Ejections is the number of ejections in a row, this one included.
	Ejections int `json:"ejections"`
	// Reason is the error of the failure that ejected it.
	Reason string `json:"reason"`
	// ReturnsAt is when it is readmitted on trial, ReturnsInSeconds how
	// long from Time that is.
	ReturnsAt        time.Time `json:"returns_at"`
	ReturnsInSeconds float64   `json:"returns_in_seconds"`
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
func (h *handler) status(prefix, after string, limit int) *Status {
	cs := h.c.Stats()
	now := h.now()
	st := &Status{
		Time:          now,
		Prefix:        prefix,
		After:         after,
		Limit:         limit,
		SnapshotError: cs.SnapshotError,
		Registry: Registry{
			Down:        cs.RegistryDown,
			Error:       cs.RegistryError,
			Outages:     cs.Outages,
			DownSeconds: cs.DownTime.Seconds(),
		},
		Stream: Stream{State: string(cs.Stream), Since: timePtr(cs.StreamSince)},
		Counters: Counters{
			Entries:                  cs.Entries,
			Lookups:                  cs.Lookups,
			FreshHits:                cs.FreshHits,
			EventServes:              cs.EventServes,
			StaleServes:              cs.StaleServes,
			Throttled:                cs.Throttled,
			Misses:                   cs.Misses,
			Invalid:                  cs.Invalid,
			Refreshes:                cs.Refreshes,
			RefreshErrors:            cs.RefreshErrors,
			OldestStaleServedSeconds: cs.OldestStaleServed.Seconds(),
		},
		Services:  []Service{},
		Selectors: []Selector{},
	}
	if cs.RegistryDown {
		st.Registry.Since = timePtr(cs.RegistryDownSince)
	}
	rows := h.c.Services(prefix, after, limit+1)
	if len(rows) > limit {
		rows = rows[:limit]
		st.Next = rows[limit-1].Name
	}
	for _, r := range rows {
		st.Services = append(st.Services, service(r))
	}
	for _, sel := range h.selectors {
		st.Selectors = append(st.Selectors, selectorStatus(sel, prefix, now))
	}
	return st
}

func service(r cache.ServiceStats) Service {
	s := Service{
		Name:        r.Name,
		Source:      string(r.Source),
		AgeSeconds:  r.Age.Seconds(),
		Refreshing:  r.Refreshing,
		Failures:    r.Failures,
		LastError:   r.LastError,
		LastErrorAt: timePtr(r.LastErrorAt),
		RetryAt:     timePtr(r.RetryAt),
		Nodes:       []Node{},
	}
	switch {
	case r.Source == "":
		s.Freshness, s.AgeSeconds = "no data", 0
	case r.Fresh:
		s.Freshness = "fresh"
	case r.Unconfirmed:
		s.Freshness = "unconfirmed"
	default:
		s.Freshness = "stale"
	}
	for _, n := range r.NodeList {
		s.Nodes = append(s.Nodes, Node{Id: n.Id, Address: n.Address, Version: n.Version, Metadata: n.Metadata})
	}
	// In a stable order, whatever order the registry gave.
	sort.Slice(s.Nodes, func(i, j int) bool {
		a, b := s.Nodes[i], s.Nodes[j]
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Id < b.Id
	})
	return s
}

func selectorStatus(sel selector.Selector, prefix string, now time.Time) Selector {
	out := Selector{Name: sel.String(), Ejected: []Ejected{}}
	s, ok := sel.(cache.Selector)
	if !ok {
		return out
	}
	ss := s.Stats()
	out.Available, out.Failures, out.Ejections = true, ss.Failures, ss.Ejections
	for _, e := range ss.Ejected {
		if !strings.HasPrefix(e.Service, prefix) {
			continue
		}
		out.Ejected = append(out.Ejected, Ejected{
			Service: e.Service, Id: e.Id, Address: e.Address, Ejections: e.Ejections, Reason: e.Reason,
			ReturnsAt: now.Add(e.Remaining), ReturnsInSeconds: e.Remaining.Seconds(),
		})
	}
	return out
}

// timePtr is t, or nil for the zero time, which JSON then leaves out.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
