package regcacheprometheus

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/statstest"
)

// promKeys are the Prometheus series that statstest.Checker relates.
var promKeys = statstest.Keys{
	Fresh:         `regcache_lookups_total{result="fresh"}`,
	Stale:         `regcache_lookups_total{result="stale"}`,
	Event:         `regcache_lookups_total{result="event"}`,
	Throttled:     `regcache_lookups_total{result="throttled"}`,
	Misses:        `regcache_lookups_total{result="miss"}`,
	Invalid:       `regcache_lookups_total{result="invalid"}`,
	Refreshes:     "regcache_refreshes_total",
	RefreshErrors: "regcache_refresh_errors_total",
	StreamStates: []string{
		`regcache_watch_stream_state{state="not_started"}`, `regcache_watch_stream_state{state="connected"}`,
		`regcache_watch_stream_state{state="reconnecting"}`, `regcache_watch_stream_state{state="stopped"}`,
	},
	IsCounter: func(key string) bool { return strings.Contains(key, "_total") },
}

// TestCollectorExportsStats registers the collector, with the series of
// each service, with a real prometheus.Registry and gathers it over and
// over while readers look up services with every outcome at once: each
// scrape must keep the invariants of Stats (errors never exceed refreshes,
// the stream is in one state, counters never go down). Then it checks
// every series against the known totals of the scenario.
func TestCollectorExportsStats(t *testing.T) {
	reg := prometheus.NewRegistry()
	gather := func() map[string]float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		return flattenFamilies(t, families)
	}
	checker := &statstest.Checker{Keys: promKeys}
	bad := 0
	var col *Collector
	sc := statstest.Run(t, func(c cache.Cache) {
		col = NewCollector(c, WithServiceMetrics())
		reg.MustRegister(col)
	}, func() {
		for _, b := range checker.Check(gather()) {
			if bad++; bad <= 10 {
				t.Errorf("scrape while readers run: %s", b)
			}
		}
	})
	t.Logf("%d scrapes while the readers ran, each checked", sc.Scrapes)

	scrapeStart := time.Now()
	got := gather()
	scrape := time.Since(scrapeStart).Seconds()
	for _, b := range checker.Check(got) {
		t.Errorf("last scrape: %s", b)
	}
	elapsed := time.Since(sc.Start).Seconds()
	want := map[string]float64{
		`regcache_lookups_total{result="fresh"}`:                            sc.Fresh(),
		`regcache_lookups_total{result="event"}`:                            0,
		`regcache_lookups_total{result="stale"}`:                            sc.Stale(),
		`regcache_lookups_total{result="throttled"}`:                        sc.Throttled(),
		`regcache_lookups_total{result="miss"}`:                             sc.Misses(),
		`regcache_lookups_total{result="invalid"}`:                          sc.Invalid(),
		"regcache_refreshes_total":                                          sc.Refreshes(),
		"regcache_refresh_errors_total":                                     1,
		"regcache_lists_total":                                              0,
		"regcache_registry_down":                                            0,
		"regcache_registry_outages_total":                                   0,
		"regcache_registry_down_time_seconds_total":                         0,
		`regcache_watch_stream_state{state="not_started"}`:                  0,
		`regcache_watch_stream_state{state="connected"}`:                    1,
		`regcache_watch_stream_state{state="reconnecting"}`:                 0,
		`regcache_watch_stream_state{state="stopped"}`:                      0,
		`regcache_watch_events_total{result="applied"}`:                     1,
		`regcache_watch_events_total{result="ignored"}`:                     1,
		`regcache_watch_events_total{result="invalidating"}`:                1,
		"regcache_watch_reconnects_total":                                   1,
		"regcache_observer_dropped_total":                                   0,
		"regcache_entries":                                                  sc.Entries(),
		`regcache_service_nodes{regcache_service="it.greeter"}`:             3,
		`regcache_service_nodes{regcache_service="it.payments"}`:            1,
		`regcache_service_fresh{regcache_service="it.greeter"}`:             1,
		`regcache_service_fresh{regcache_service="it.payments"}`:            0,
		`regcache_service_refresh_failures{regcache_service="it.greeter"}`:  0,
		`regcache_service_refresh_failures{regcache_service="it.payments"}`: 0,
		`regcache_service_last_known_nodes{regcache_service="it.greeter"}`:  0,
		`regcache_service_last_known_nodes{regcache_service="it.payments"}`: 0,
	}
	// The ages follow the wall clock, so they are checked by their order:
	// greeter's nodes were last told by the event, payments' by its
	// re-validation after the reconnect; payments is the stale data
	// served, so the stale age served is its age, read in the same scrape
	// (the counters first, then the rows).
	greeterAge := got[`regcache_service_age_seconds{regcache_service="it.greeter"}`]
	paymentsAge := got[`regcache_service_age_seconds{regcache_service="it.payments"}`]
	staleAge := got["regcache_stale_served_age_seconds"]
	if !(greeterAge > 0 && greeterAge < paymentsAge && staleAge > 0 && staleAge <= paymentsAge && paymentsAge <= staleAge+scrape && paymentsAge <= elapsed) {
		t.Errorf("ages: greeter %vs, payments %vs, stale served %vs, scrape %vs, scenario %vs; want 0 < greeter < payments = stale served (to the scrape's length) ≤ scenario",
			greeterAge, paymentsAge, staleAge, scrape, elapsed)
	}
	delete(got, `regcache_service_age_seconds{regcache_service="it.greeter"}`)
	delete(got, `regcache_service_age_seconds{regcache_service="it.payments"}`)
	delete(got, "regcache_stale_served_age_seconds")
	statstest.CompareSeries(t, got, want)

	// The same through client_golang's test helpers: the number of series
	// (those above, the two ages and the stale age), the naming
	// conventions, and two families in the text format.
	if n := testutil.CollectAndCount(col); n != len(want)+3 {
		t.Errorf("CollectAndCount: %d series, want %d", n, len(want)+3)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint: %v %v", problems, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP regcache_lookups_total %s
# TYPE regcache_lookups_total counter
regcache_lookups_total{result="event"} 0
regcache_lookups_total{result="fresh"} %v
regcache_lookups_total{result="invalid"} %v
regcache_lookups_total{result="miss"} %v
regcache_lookups_total{result="stale"} %v
regcache_lookups_total{result="throttled"} %v
# HELP regcache_watch_stream_state State of the watch stream: 1 for the current state, 0 for the others.
# TYPE regcache_watch_stream_state gauge
regcache_watch_stream_state{state="connected"} 1
regcache_watch_stream_state{state="not_started"} 0
regcache_watch_stream_state{state="reconnecting"} 0
regcache_watch_stream_state{state="stopped"} 0
`, lookupsHelp, sc.Fresh(), sc.Invalid(), sc.Misses(), sc.Stale(), sc.Throttled())), "regcache_lookups_total", "regcache_watch_stream_state"); err != nil {
		t.Errorf("GatherAndCompare: %v", err)
	}

	// Stats, and so the collector, keep working after Stop, which the
	// stream's state tells.
	sc.C.Stop()
	got = gather()
	if got := got[promKeys.Fresh]; got != sc.Fresh() {
		t.Errorf("after Stop: %s %v, want %v", promKeys.Fresh, got, sc.Fresh())
	}
	if got[`regcache_watch_stream_state{state="stopped"}`] != 1 || got[`regcache_watch_stream_state{state="connected"}`] != 0 {
		t.Errorf("after Stop: the stream's state is not stopped: %v", got)
	}
}

// flattenFamilies turns gathered metric families into one value per series,
// keyed by name{label="value",...}. Counters and gauges only.
func flattenFamilies(t *testing.T, families []*dto.MetricFamily) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			var pairs []string
			for _, l := range m.GetLabel() {
				pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := seriesKey(mf.GetName(), pairs)
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				if !strings.HasSuffix(mf.GetName(), "_total") {
					t.Errorf("counter %s does not end in _total", mf.GetName())
				}
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			default:
				t.Errorf("%s: unexpected type %v", key, mf.GetType())
			}
		}
	}
	return out
}

func seriesKey(name string, labelPairs []string) string {
	if len(labelPairs) == 0 {
		return name
	}
	sort.Strings(labelPairs)
	return name + "{" + strings.Join(labelPairs, ",") + "}"
}

// lookupsHelp is the help text of regcache_lookups_total.
const lookupsHelp = "GetService and Lookup calls, by result: fresh, event (nodes an event announced, not yet confirmed), stale, throttled (an error without a registry call: throttled, too stale, or a not-found answer held for its retry window), miss (waited for a registry call) or invalid (the empty name)."
