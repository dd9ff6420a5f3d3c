package statstest

import (
	"fmt"
	"strings"
	"testing"
)

// TestChecker shows that the checker the exporter tests rely on
// catches what it claims to: a counter going down, more errors than
// refreshes, a stream in no state or in two, and a series missing.
func TestChecker(t *testing.T) {
	good := map[string]float64{
		`regcache_lookups_total{result="fresh"}`: 4, `regcache_lookups_total{result="stale"}`: 3, `regcache_lookups_total{result="event"}`: 0,
		`regcache_lookups_total{result="throttled"}`: 1, `regcache_lookups_total{result="miss"}`: 1, `regcache_lookups_total{result="invalid"}`: 1,
		"regcache_refreshes_total": 2, "regcache_refresh_errors_total": 1,
		`regcache_watch_stream_state{state="connected"}`: 1, `regcache_watch_stream_state{state="reconnecting"}`: 0,
		"regcache_stale_served_age_seconds": 5, "regcache_entries": 7,
	}
	with := func(changes map[string]float64) map[string]float64 {
		m := map[string]float64{}
		for k, v := range good {
			m[k] = v
		}
		for k, v := range changes {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name string
		next map[string]float64
		want string
	}{
		{"consistent, gauges down", with(map[string]float64{`regcache_lookups_total{result="fresh"}`: 5, "regcache_entries": 3, "regcache_stale_served_age_seconds": 0}), ""},
		{"a counter went down", with(map[string]float64{`regcache_lookups_total{result="fresh"}`: 3}), `regcache_lookups_total{result="fresh"} went down`},
		{"more errors than refreshes", with(map[string]float64{"regcache_refresh_errors_total": 3}), "exceeds"},
		{"no stream state", with(map[string]float64{`regcache_watch_stream_state{state="connected"}`: 0}), "in 0 states"},
		{"two stream states", with(map[string]float64{`regcache_watch_stream_state{state="reconnecting"}`: 1}), "in 2 states"},
		{"a stream state neither 0 nor 1", with(map[string]float64{`regcache_watch_stream_state{state="reconnecting"}`: 2}), "want 0 or 1"},
		{"a series missing", func() map[string]float64 {
			m := with(nil)
			delete(m, `regcache_lookups_total{result="invalid"}`)
			return m
		}(), `regcache_lookups_total{result="invalid"} missing`},
	} {
		c := &Checker{Keys: promKeys}
		if bad := c.Check(good); len(bad) > 0 {
			t.Fatalf("%s: the first scrape is consistent, but: %v", tc.name, bad)
		}
		bad := fmt.Sprint(c.Check(tc.next))
		switch {
		case tc.want == "" && bad != "[]":
			t.Errorf("%s: reported %s", tc.name, bad)
		case tc.want != "" && !strings.Contains(bad, tc.want):
			t.Errorf("%s: reported %s, want %q", tc.name, bad, tc.want)
		}
	}
}

// promKeys are the Prometheus series that Checker relates.
var promKeys = Keys{
	Fresh:         `regcache_lookups_total{result="fresh"}`,
	Stale:         `regcache_lookups_total{result="stale"}`,
	Event:         `regcache_lookups_total{result="event"}`,
	Throttled:     `regcache_lookups_total{result="throttled"}`,
	Misses:        `regcache_lookups_total{result="miss"}`,
	Invalid:       `regcache_lookups_total{result="invalid"}`,
	Refreshes:     "regcache_refreshes_total",
	RefreshErrors: "regcache_refresh_errors_total",
	StreamStates:  []string{`regcache_watch_stream_state{state="connected"}`, `regcache_watch_stream_state{state="reconnecting"}`},
	IsCounter:     func(key string) bool { return strings.Contains(key, "_total") },
}
