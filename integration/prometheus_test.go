package integration

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
)

// statsCollector exports a cache's Stats to Prometheus. It is meant to be
// copied into a program (regcache does not depend on Prometheus): each
// Collect calls Stats once and reports it as const metrics, so the collector
// keeps no state and scrapes may run concurrently. docs/metrics.md shows it
// in short.
//
//	prometheus.MustRegister(statsCollector{c})
type statsCollector struct{ c cache.Cache }

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descLookups       = newDesc("regcache_lookups_total", "GetService and Lookup calls.")
	descFreshHits     = newDesc("regcache_fresh_hits_total", "Lookups answered with fresh data.")
	descStaleServes   = newDesc("regcache_stale_serves_total", "Lookups answered with stale data, without waiting for the registry.")
	descEventServes   = newDesc("regcache_event_serves_total", "Lookups answered with nodes an event announced, not yet confirmed by the registry.")
	descThrottled     = newDesc("regcache_throttled_total", "Lookups answered with the throttled error.")
	descMisses        = newDesc("regcache_misses_total", "Lookups with nothing usable cached, which waited for a registry call.")
	descInvalid       = newDesc("regcache_invalid_lookups_total", "Lookups of the empty name, answered with ErrEmptyName.")
	descRefreshes     = newDesc("regcache_refreshes_total", "Registry calls made to refresh a service.")
	descRefreshErrors = newDesc("regcache_refresh_errors_total", "Registry calls that failed; a not-found answer is not a failure.")
	descLists         = newDesc("regcache_lists_total", "ListServices calls, one per re-validation of many services at once.")
	descWatchEvents   = newDesc("regcache_watch_events_total", "Watch events: applied to a cached service, ignored (service not cached) or invalidating (could not be applied; the entry turned stale).", "result")
	descReconnects    = newDesc("regcache_watch_reconnects_total", "Watch streams established after the first.")
	descObsDropped    = newDesc("regcache_observer_dropped_total", "Observer events dropped because the observer's queue was full.")

	descEntries     = newDesc("regcache_entries", "Services the cache holds state for, with or without data.")
	descOldestStale = newDesc("regcache_oldest_stale_served_seconds", "Largest age, since the registry last told its nodes, of any stale data served so far.")
	descDown        = newDesc("regcache_registry_down", "1 while the cache holds the registry to be down and sends it only probes.")

	descServiceNodes     = newDesc("regcache_service_nodes", "Nodes cached for a service, over all its versions.", "service")
	descServiceFresh     = newDesc("regcache_service_fresh", "1 while a service's data is fresh, 0 once its TTL has run out.", "service")
	descServiceAge       = newDesc("regcache_service_age_seconds", "Time since a service's last successful refresh.", "service")
	descServiceFailures  = newDesc("regcache_service_refresh_failures", "Consecutive failed refreshes of a service.", "service")
	descServiceLastKnown = newDesc("regcache_service_last_known_nodes", "1 while WithLastKnownNodes keeps a service's nodes after the registry showed none.", "service")

	statsDescs = []*prometheus.Desc{
		descLookups, descFreshHits, descStaleServes, descEventServes, descThrottled, descMisses, descInvalid,
		descRefreshes, descRefreshErrors, descLists, descWatchEvents, descReconnects, descObsDropped,
		descEntries, descOldestStale, descDown,
		descServiceNodes, descServiceFresh, descServiceAge, descServiceFailures, descServiceLastKnown,
	}
)

func (s statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range statsDescs {
		ch <- d
	}
}

func (s statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := s.c.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	counter(descLookups, st.Lookups)
	counter(descFreshHits, st.FreshHits)
	counter(descStaleServes, st.StaleServes)
	counter(descEventServes, st.EventServes)
	counter(descThrottled, st.Throttled)
	counter(descMisses, st.Misses)
	counter(descInvalid, st.Invalid)
	counter(descRefreshes, st.Refreshes)
	counter(descRefreshErrors, st.RefreshErrors)
	counter(descLists, st.Lists)
	counter(descWatchEvents, st.EventsApplied, "applied")
	counter(descWatchEvents, st.EventsIgnored, "ignored")
	counter(descWatchEvents, st.EventsInvalidating, "invalidating")
	counter(descReconnects, st.WatchReconnects)
	counter(descObsDropped, st.ObserverDropped)
	gauge(descEntries, float64(st.Entries))
	gauge(descOldestStale, st.OldestStaleServed.Seconds())
	gauge(descDown, flag(st.RegistryDown))
	for _, svc := range s.c.Services("", "", 0) {
		if svc.Source == "" {
			continue // held without data
		}
		gauge(descServiceNodes, float64(svc.Nodes), svc.Name)
		gauge(descServiceFresh, flag(svc.Fresh), svc.Name)
		gauge(descServiceAge, svc.Age.Seconds(), svc.Name)
		gauge(descServiceFailures, float64(svc.Failures), svc.Name)
		gauge(descServiceLastKnown, flag(svc.LastKnownNodes), svc.Name)
	}
}

// promKeys are the Prometheus series that scrapeChecker relates.
var promKeys = scrapeKeys{
	lookups:       "regcache_lookups_total",
	fresh:         "regcache_fresh_hits_total",
	stale:         "regcache_stale_serves_total",
	event:         "regcache_event_serves_total",
	throttled:     "regcache_throttled_total",
	misses:        "regcache_misses_total",
	invalid:       "regcache_invalid_lookups_total",
	refreshes:     "regcache_refreshes_total",
	refreshErrors: "regcache_refresh_errors_total",
	oldestStale:   "regcache_oldest_stale_served_seconds",
	isCounter:     func(key string) bool { return strings.Contains(key, "_total") },
}

// TestPrometheusCollector registers statsCollector with a real
// prometheus.Registry and gathers it over and over while readers look up
// services with every outcome at once: each scrape must keep the
// invariants of Stats (lookups are the sum of their outcomes, counters
// never go down). Then it checks every series against the known totals of
// the scenario.
func TestPrometheusCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	gather := func() map[string]float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		return flattenFamilies(t, families)
	}
	checker := &scrapeChecker{keys: promKeys}
	bad := 0
	sc := runStatsScenario(t, func(c cache.Cache) {
		reg.MustRegister(statsCollector{c})
	}, func() {
		for _, b := range checker.check(gather()) {
			if bad++; bad <= 10 {
				t.Errorf("scrape while readers run: %s", b)
			}
		}
	})
	t.Logf("%d scrapes while the readers ran, each checked", sc.scrapes)

	got := gather()
	for _, b := range checker.check(got) {
		t.Errorf("last scrape: %s", b)
	}
	elapsed := time.Since(sc.start).Seconds()
	want := map[string]float64{
		"regcache_lookups_total":                                   sc.Lookups(),
		"regcache_fresh_hits_total":                                sc.Fresh(),
		"regcache_stale_serves_total":                              sc.Stale(),
		"regcache_event_serves_total":                              0,
		"regcache_throttled_total":                                 sc.Throttled(),
		"regcache_misses_total":                                    sc.Misses(),
		"regcache_invalid_lookups_total":                           sc.Invalid(),
		"regcache_refreshes_total":                                 sc.Misses(),
		"regcache_refresh_errors_total":                            1,
		"regcache_lists_total":                                     0,
		`regcache_watch_events_total{result="applied"}`:            1,
		`regcache_watch_events_total{result="ignored"}`:            1,
		`regcache_watch_events_total{result="invalidating"}`:       1,
		"regcache_watch_reconnects_total":                          1,
		"regcache_observer_dropped_total":                          0,
		"regcache_entries":                                         sc.Entries(),
		"regcache_registry_down":                                   0,
		`regcache_service_nodes{service="it.greeter"}`:             3,
		`regcache_service_nodes{service="it.payments"}`:            1,
		`regcache_service_fresh{service="it.greeter"}`:             1,
		`regcache_service_fresh{service="it.payments"}`:            0,
		`regcache_service_refresh_failures{service="it.greeter"}`:  0,
		`regcache_service_refresh_failures{service="it.payments"}`: 0,
		`regcache_service_last_known_nodes{service="it.greeter"}`:  0,
		`regcache_service_last_known_nodes{service="it.payments"}`: 0,
	}
	// The ages follow the wall clock, so they are checked by their order:
	// greeter's nodes were last told by the event, payments' by its first
	// lookup; payments is the stale data served, so the oldest stale age
	// is its age, read at the same instant.
	greeterAge := got[`regcache_service_age_seconds{service="it.greeter"}`]
	paymentsAge := got[`regcache_service_age_seconds{service="it.payments"}`]
	oldest := got["regcache_oldest_stale_served_seconds"]
	if !(greeterAge > 0 && greeterAge < paymentsAge && paymentsAge == oldest && paymentsAge <= elapsed) {
		t.Errorf("ages: greeter %vs, payments %vs, oldest stale served %vs, scenario %vs; want 0 < greeter < payments = oldest ≤ scenario",
			greeterAge, paymentsAge, oldest, elapsed)
	}
	delete(got, `regcache_service_age_seconds{service="it.greeter"}`)
	delete(got, `regcache_service_age_seconds{service="it.payments"}`)
	delete(got, "regcache_oldest_stale_served_seconds")
	compareSeries(t, got, want)

	// The same through client_golang's test helpers: the number of series
	// (those above, the two ages and the oldest stale age), the naming
	// conventions, and two families in the text format.
	if n := testutil.CollectAndCount(statsCollector{sc.c}); n != len(want)+3 {
		t.Errorf("CollectAndCount: %d series, want %d", n, len(want)+3)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint: %v %v", problems, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP regcache_lookups_total GetService and Lookup calls.
# TYPE regcache_lookups_total counter
regcache_lookups_total %v
# HELP regcache_watch_events_total Watch events: applied to a cached service, ignored (service not cached) or invalidating (could not be applied; the entry turned stale).
# TYPE regcache_watch_events_total counter
regcache_watch_events_total{result="applied"} 1
regcache_watch_events_total{result="ignored"} 1
regcache_watch_events_total{result="invalidating"} 1
`, sc.Lookups())), "regcache_lookups_total", "regcache_watch_events_total"); err != nil {
		t.Errorf("GatherAndCompare: %v", err)
	}

	// Stats, and so the collector, keep working after Stop.
	sc.c.Stop()
	if got := gather()["regcache_lookups_total"]; got != sc.Lookups() {
		t.Errorf("after Stop: regcache_lookups_total %v, want %v", got, sc.Lookups())
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

// compareSeries fails the test for every series that is missing, extra or
// different.
func compareSeries(t *testing.T, got, want map[string]float64) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			t.Errorf("%s: missing, want %v", k, w)
		case !wok:
			t.Errorf("%s = %v: not expected", k, g)
		case g != w:
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
}
