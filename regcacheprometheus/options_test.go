package regcacheprometheus

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/statstest"
)

// cacheSeries is the number of series of a cache's counters and state:
// lookups (six results), refreshes, refresh errors, lists, the registry's
// state, outages and down time, the stream's state (four), watch events
// (three), reconnects, dropped observer events, entries and the stale age
// served.
const cacheSeries = 23

// describe returns the descriptions col gives.
func describe(col prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() { col.Describe(ch); close(ch) }()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

// Without WithServiceMetrics, a scrape reads the counters only: no
// Services call, and no series per service.
func TestServiceSeriesAreOffByDefault(t *testing.T) {
	cc := &statstest.CountingCache{Cache: statstest.Many(t, 3, 2)}
	col := NewCollector(cc)
	if n := testutil.CollectAndCount(col); n != cacheSeries {
		t.Errorf("CollectAndCount: %d series, want %d", n, cacheSeries)
	}
	if l := cc.Limits(); len(l) > 0 {
		t.Errorf("Services called with limits %v, want no call", l)
	}
	if n := len(describe(col)); n != len(cacheDescs) {
		t.Errorf("Describe: %d descriptions, want %d", n, len(cacheDescs))
	}
}

// With WithServiceMetrics, a scrape pages through Services a thousand rows
// a call, and has five series for each service with data, none for the
// names held without data.
func TestServiceSeriesPageThroughServices(t *testing.T) {
	const n = 2500
	cc := &statstest.CountingCache{Cache: statstest.Many(t, n, 3)}
	col := NewCollector(cc, WithServiceMetrics())
	if got := testutil.CollectAndCount(col); got != cacheSeries+5*n {
		t.Errorf("CollectAndCount: %d series, want %d", got, cacheSeries+5*n)
	}
	if l := cc.Limits(); len(l) != 3 || l[0] != 1000 || l[1] != 1000 || l[2] != 1000 {
		t.Errorf("Services called with limits %v, want 1000 three times (2 503 names)", l)
	}
	if got := testutil.CollectAndCount(col, "regcache_service_nodes"); got != n {
		t.Errorf("regcache_service_nodes: %d series, want %d", got, n)
	}
	if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
		t.Errorf("CollectAndLint: %v %v", problems, err)
	}
	if got := len(describe(col)); got != len(cacheDescs)+len(serviceDescs) {
		t.Errorf("Describe: %d descriptions, want %d", got, len(cacheDescs)+len(serviceDescs))
	}
}

// WithSelectors adds the selectors' passive health, added up over them;
// go-micro's own selector, which does not report it, is left out.
func TestSelectorSeries(t *testing.T) {
	c, sel := statstest.EjectOne(t)
	other := cache.NewSelector(c)
	svcs, err := c.GetService("it.greeter")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range svcs[0].Nodes {
		if n.Id == "g3" {
			other.Mark("it.greeter", n, statstest.Unreachable)
		}
	}
	foreign := selector.NewSelector(selector.Registry(registry.NewMemoryRegistry()))
	col := NewCollector(c, WithSelectors(sel, other, foreign))
	if err := testutil.CollectAndCompare(col, strings.NewReader(`
# HELP regcache_selector_ejected_nodes Nodes the selectors hold ejected now.
# TYPE regcache_selector_ejected_nodes gauge
regcache_selector_ejected_nodes 1
# HELP regcache_selector_ejections_total Nodes of cached service lists ejected by the selectors' passive health.
# TYPE regcache_selector_ejections_total counter
regcache_selector_ejections_total 1
# HELP regcache_selector_failures_total Attempts reported to the selectors that could not reach their node: connection errors, broken connections, timeouts.
# TYPE regcache_selector_failures_total counter
regcache_selector_failures_total 4
# HELP regcache_selector_ignored_total Picks that handed out an ejected node because every node the caller could pick was ejected.
# TYPE regcache_selector_ignored_total counter
regcache_selector_ignored_total 0
# HELP regcache_selector_readmitted_total Ejected nodes reached again after their ejection ended.
# TYPE regcache_selector_readmitted_total counter
regcache_selector_readmitted_total 0
# HELP regcache_selector_refused_total Failing nodes kept in rotation because their service had its maximum share of nodes ejected.
# TYPE regcache_selector_refused_total counter
regcache_selector_refused_total 0
`), "regcache_selector_ejected_nodes", "regcache_selector_ejections_total", "regcache_selector_failures_total",
		"regcache_selector_ignored_total", "regcache_selector_readmitted_total", "regcache_selector_refused_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(col); n != cacheSeries+len(selectorDescs) {
		t.Errorf("CollectAndCount: %d series, want %d", n, cacheSeries+len(selectorDescs))
	}
	if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
		t.Errorf("CollectAndLint: %v %v", problems, err)
	}
}

// While the registry is held down, the collector says so, counts the
// outage, and its down time grows with the clock, to the length of the
// outage at most.
func TestOutageSeries(t *testing.T) {
	start := time.Now()
	c := statstest.Down(t)
	col := NewCollector(c)
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	read := func() map[string]float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return flattenFamilies(t, families)
	}
	got := read()
	downTime := got["regcache_registry_down_time_seconds_total"]
	if elapsed := time.Since(start).Seconds(); !(downTime > 0 && downTime <= elapsed) {
		t.Errorf("regcache_registry_down_time_seconds_total %v, want in (0, %v]", downTime, elapsed)
	}
	if got["regcache_registry_down"] != 1 || got["regcache_registry_outages_total"] != 1 {
		t.Errorf("regcache_registry_down %v, regcache_registry_outages_total %v; want 1, 1", got["regcache_registry_down"], got["regcache_registry_outages_total"])
	}
	time.Sleep(time.Millisecond)
	if later := read()["regcache_registry_down_time_seconds_total"]; later <= downTime {
		t.Errorf("regcache_registry_down_time_seconds_total %v, then %v: want it to grow while the registry is down", downTime, later)
	}
}

// A nil cache, selector or option is a mistake made at start-up: it
// panics there, not at the first scrape.
func TestNilArgumentsPanic(t *testing.T) {
	c := statstest.Many(t, 0, 0)
	for name, f := range map[string]func(){
		"nil cache":    func() { NewCollector(nil) },
		"nil selector": func() { WithSelectors(cache.NewSelector(c), nil) },
		"nil option":   func() { NewCollector(c, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
