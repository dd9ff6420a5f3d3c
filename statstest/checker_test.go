package statstest

import (
	"fmt"
	"strings"
	"testing"
)

// TestChecker shows that the checker the exporter tests rely on
// catches what it claims to: a torn snapshot, a counter going down, the
// oldest stale age going down, and more errors than refreshes.
func TestChecker(t *testing.T) {
	good := map[string]float64{
		"regcache_lookups_total": 10, "regcache_fresh_hits_total": 4, "regcache_stale_serves_total": 3, "regcache_event_serves_total": 0,
		"regcache_throttled_total": 1, "regcache_misses_total": 1, "regcache_invalid_lookups_total": 1,
		"regcache_refreshes_total": 2, "regcache_refresh_errors_total": 1,
		"regcache_oldest_stale_served_seconds": 5, "regcache_entries": 7,
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
		{"consistent, entries down", with(map[string]float64{"regcache_lookups_total": 11, "regcache_fresh_hits_total": 5, "regcache_entries": 3}), ""},
		{"lookups loaded before an outcome", with(map[string]float64{"regcache_fresh_hits_total": 5}), "outcomes add up to 11"},
		{"a counter went down", with(map[string]float64{"regcache_lookups_total": 9, "regcache_fresh_hits_total": 3}), "regcache_fresh_hits_total went down"},
		{"oldest stale age went down", with(map[string]float64{"regcache_oldest_stale_served_seconds": 4}), "regcache_oldest_stale_served_seconds went down"},
		{"more errors than refreshes", with(map[string]float64{"regcache_refresh_errors_total": 3}), "exceeds"},
		{"a series missing", func() map[string]float64 { m := with(nil); delete(m, "regcache_invalid_lookups_total"); return m }(), "regcache_invalid_lookups_total missing"},
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
	Lookups:       "regcache_lookups_total",
	Fresh:         "regcache_fresh_hits_total",
	Stale:         "regcache_stale_serves_total",
	Event:         "regcache_event_serves_total",
	Throttled:     "regcache_throttled_total",
	Misses:        "regcache_misses_total",
	Invalid:       "regcache_invalid_lookups_total",
	Refreshes:     "regcache_refreshes_total",
	RefreshErrors: "regcache_refresh_errors_total",
	OldestStale:   "regcache_oldest_stale_served_seconds",
	IsCounter:     func(key string) bool { return strings.Contains(key, "_total") },
}
