package integration

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go-micro.dev/v4/registry"

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
	descThrottled     = newDesc("regcache_throttled_total", "Lookups answered with the throttled error.")
	descMisses        = newDesc("regcache_misses_total", "Lookups with nothing usable cached, which waited for a registry call.")
	descRefreshes     = newDesc("regcache_refreshes_total", "Registry calls made to refresh a service.")
	descRefreshErrors = newDesc("regcache_refresh_errors_total", "Registry calls that failed; a not-found answer is not a failure.")
	descWatchEvents   = newDesc("regcache_watch_events_total", "Watch events: applied to a cached service, ignored (service not cached) or invalidating (could not be applied; the entry turned stale).", "result")
	descReconnects    = newDesc("regcache_watch_reconnects_total", "Watch streams established after the first.")
	descObsDropped    = newDesc("regcache_observer_dropped_total", "Observer events dropped because the observer's queue was full.")

	descEntries     = newDesc("regcache_entries", "Services the cache holds state for, with or without data.")
	descOldestStale = newDesc("regcache_oldest_stale_served_seconds", "Largest age, since its last successful refresh, of any stale data served so far.")

	descServiceNodes     = newDesc("regcache_service_nodes", "Nodes cached for a service, over all its versions.", "service")
	descServiceFresh     = newDesc("regcache_service_fresh", "1 while a service's data is fresh, 0 once its TTL has run out.", "service")
	descServiceAge       = newDesc("regcache_service_age_seconds", "Time since a service's last successful refresh.", "service")
	descServiceFailures  = newDesc("regcache_service_refresh_failures", "Consecutive failed refreshes of a service.", "service")
	descServiceLastKnown = newDesc("regcache_service_last_known_nodes", "1 while WithLastKnownNodes keeps a service's nodes after the registry showed none.", "service")

	statsDescs = []*prometheus.Desc{
		descLookups, descFreshHits, descStaleServes, descThrottled, descMisses,
		descRefreshes, descRefreshErrors, descWatchEvents, descReconnects, descObsDropped,
		descEntries, descOldestStale,
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
	counter(descThrottled, st.Throttled)
	counter(descMisses, st.Misses)
	counter(descRefreshes, st.Refreshes)
	counter(descRefreshErrors, st.RefreshErrors)
	counter(descWatchEvents, st.EventsApplied, "applied")
	counter(descWatchEvents, st.EventsIgnored, "ignored")
	counter(descWatchEvents, st.EventsInvalidating, "invalidating")
	counter(descReconnects, st.WatchReconnects)
	counter(descObsDropped, st.ObserverDropped)
	gauge(descEntries, float64(st.Entries))
	gauge(descOldestStale, st.OldestStaleServed.Seconds())
	for _, svc := range st.Services {
		gauge(descServiceNodes, float64(svc.Nodes), svc.Name)
		gauge(descServiceFresh, flag(svc.Fresh), svc.Name)
		gauge(descServiceAge, svc.Age.Seconds(), svc.Name)
		gauge(descServiceFailures, float64(svc.Failures), svc.Name)
		gauge(descServiceLastKnown, flag(svc.LastKnownNodes), svc.Name)
	}
}

// TestPrometheusCollector registers statsCollector with a real
// prometheus.Registry, gathers it while the cache serves lookups, and checks
// every series against the known totals of the scenario.
func TestPrometheusCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	lastLookups := -1.0
	gather := func() map[string]float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		return flattenFamilies(t, families)
	}
	sc := runStatsScenario(t, func(c cache.Cache) {
		reg.MustRegister(statsCollector{c})
	}, func() {
		// Called over and over while readers are looking up.
		got := gather()["regcache_lookups_total"]
		if got < lastLookups {
			t.Errorf("regcache_lookups_total went down from %v to %v", lastLookups, got)
		}
		lastLookups = got
	})

	got := gather()
	elapsed := time.Since(sc.start).Seconds()
	want := map[string]float64{
		"regcache_lookups_total":                                   sc.Lookups(),
		"regcache_fresh_hits_total":                                sc.FreshHits(),
		"regcache_stale_serves_total":                              1,
		"regcache_throttled_total":                                 1,
		"regcache_misses_total":                                    4,
		"regcache_refreshes_total":                                 4,
		"regcache_refresh_errors_total":                            1,
		`regcache_watch_events_total{result="applied"}`:            1,
		`regcache_watch_events_total{result="ignored"}`:            1,
		`regcache_watch_events_total{result="invalidating"}`:       1,
		"regcache_watch_reconnects_total":                          1,
		"regcache_observer_dropped_total":                          0,
		"regcache_entries":                                         4,
		"regcache_oldest_stale_served_seconds":                     sc.oldestStale.Seconds(),
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
	// greeter was fetched before payments, and payments had been cached
	// for oldestStale when it was served stale.
	greeterAge := got[`regcache_service_age_seconds{service="it.greeter"}`]
	paymentsAge := got[`regcache_service_age_seconds{service="it.payments"}`]
	if !(sc.oldestStale.Seconds() > 0 && paymentsAge >= sc.oldestStale.Seconds() &&
		greeterAge >= paymentsAge && greeterAge <= elapsed) {
		t.Errorf("ages: oldest stale served %vs, payments %vs, greeter %vs, scenario %vs; want 0 < oldest ≤ payments ≤ greeter ≤ scenario",
			sc.oldestStale.Seconds(), paymentsAge, greeterAge, elapsed)
	}
	delete(got, `regcache_service_age_seconds{service="it.greeter"}`)
	delete(got, `regcache_service_age_seconds{service="it.payments"}`)
	compareSeries(t, got, want)

	// The same through client_golang's test helpers: the number of series
	// (those above and the two ages), the naming conventions, and two
	// families in the text format.
	if n := testutil.CollectAndCount(statsCollector{sc.c}); n != len(want)+2 {
		t.Errorf("CollectAndCount: %d series, want %d", n, len(want)+2)
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

// statsScenario drives a cache through a known sequence of lookups, registry
// answers and watch events, so that every counter of Stats has a known
// value; the Prometheus and OpenTelemetry tests check their exports of it.
//
// The cache runs over go-micro's memory registry, wrapped so that the test
// drives the watch stream (the memory registry's own watcher drops an event
// that its reader does not take within 10 ms) and one service fails. TTL and
// retry interval are an hour: nothing expires, and no refresh starts, unless
// the test makes it.
type statsScenario struct {
	c     cache.Cache
	start time.Time
	// oldestStale is Stats().OldestStaleServed after the one stale serve.
	oldestStale time.Duration
}

const (
	scenarioReaders = 4
	scenarioRounds  = 250 // per reader: one Lookup and one GetService each
	scenarioHits    = scenarioReaders * scenarioRounds * 2
)

// Lookups is the scenario's total: 2 cold misses, the readers' hits, a
// not-found, a throttled and a failed lookup, a stale serve and a last hit.
func (s *statsScenario) Lookups() float64 { return 2 + scenarioHits + 3 + 2 }

// FreshHits: the readers' hits and the last hit.
func (s *statsScenario) FreshHits() float64 { return scenarioHits + 1 }

// runStatsScenario builds the cache, hands it to register, and runs the
// scenario; collect is called repeatedly while readers look services up
// concurrently, at least once. The cache is stopped when the test ends.
//
// Totals: lookups 2007 (fresh hits 2001, stale serves 1, throttled 1,
// misses 4); refreshes 4, refresh errors 1; watch events applied 1, ignored
// 1, invalidating 1; reconnects 1; entries 4 (it.greeter with 3 nodes,
// fresh; it.payments with 1 node, stale; it.missing and it.flaky without
// data, kept while their retry windows are open).
func runStatsScenario(t *testing.T, register func(cache.Cache), collect func()) *statsScenario {
	t.Helper()
	mem := registry.NewMemoryRegistry()
	mustRegister(t, mem, service("it.greeter", "g1", "g2"), 0)
	mustRegister(t, mem, service("it.payments", "p1"), 0)
	reg := &scriptedRegistry{Registry: mem, failing: "it.flaky", streams: make(chan *scriptedStream, 8)}
	sc := &statsScenario{start: time.Now()}
	sc.c = newCache(t, reg, cache.WithTTL(time.Hour), cache.WithMinimumRetryInterval(time.Hour))
	c := sc.c
	register(c)

	// Two cold lookups: misses, one registry call each. The first cached
	// entry starts the watcher, which opens a stream.
	for _, name := range []string{"it.greeter", "it.payments"} {
		if _, err := c.GetService(name); err != nil {
			t.Fatalf("cold lookup of %s: %v", name, err)
		}
	}
	stream := reg.nextStream(t)

	// Fresh hits from several goroutines while the caller collects.
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i := 0; i < scenarioReaders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < scenarioRounds; j++ {
				if svcs, err := c.Lookup("it.greeter"); err != nil || len(nodeIDs(svcs)) != 2 {
					t.Errorf("Lookup it.greeter: %v %v", nodeIDs(svcs), err)
					return
				}
				if _, err := c.GetService("it.payments"); err != nil {
					t.Errorf("GetService it.payments: %v", err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		collect()
		select {
		case <-done:
			finished = true
		default:
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// A service the registry does not know: a miss answered with
	// ErrNotFound, then a throttled lookup. A service whose registry call
	// fails: a miss and a refresh error.
	if _, err := c.GetService("it.missing"); !errors.Is(err, registry.ErrNotFound) || errors.Is(err, cache.ErrThrottled) {
		t.Fatalf("first lookup of it.missing: %v, want registry.ErrNotFound", err)
	}
	if _, err := c.GetService("it.missing"); !errors.Is(err, cache.ErrThrottled) {
		t.Fatalf("second lookup of it.missing: %v, want cache.ErrThrottled", err)
	}
	if _, err := c.GetService("it.flaky"); err == nil || errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("lookup of it.flaky: %v, want the registry's error", err)
	}

	// Three watch events: one applied, one for a service that is not
	// cached, one that names no node. Then the stream fails; the send
	// returns once the watcher is back in Next, after applying the three.
	stream.send(t, &registry.Result{Action: "update", Service: service("it.greeter", "g3")})
	stream.send(t, &registry.Result{Action: "update", Service: service("it.not-cached", "x1")})
	stream.send(t, &registry.Result{Action: "update", Service: service("it.payments")})
	stream.fail(t, errors.New("scripted stream broken"))
	reg.nextStream(t)
	waitFor(t, 10*time.Second, "WatchReconnects = 1", func() bool { return c.Stats().WatchReconnects == 1 })

	// it.payments was invalidated: served stale, without a registry call
	// (the retry window is open). it.greeter has the event's node.
	if _, err := c.GetService("it.payments"); err != nil {
		t.Fatalf("stale lookup of it.payments: %v", err)
	}
	sc.oldestStale = c.Stats().OldestStaleServed
	if svcs, err := c.Lookup("it.greeter"); err != nil || joinIDs(svcs) != "g1,g2,g3" {
		t.Fatalf("Lookup it.greeter after the event: %v %v, want g1,g2,g3", nodeIDs(svcs), err)
	}
	return sc
}

// scriptedRegistry is a registry whose watch streams the test drives, and
// whose GetService fails for one name. Everything else goes to the wrapped
// registry.
type scriptedRegistry struct {
	registry.Registry
	failing string
	streams chan *scriptedStream
}

func (r *scriptedRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	if name == r.failing {
		return nil, errors.New("scripted registry failure")
	}
	return r.Registry.GetService(name, opts...)
}

func (r *scriptedRegistry) Watch(...registry.WatchOption) (registry.Watcher, error) {
	s := &scriptedStream{
		events:  make(chan *registry.Result),
		errs:    make(chan error),
		stopped: make(chan struct{}),
	}
	select {
	case r.streams <- s:
	default:
		return nil, errors.New("scripted registry: too many watch streams")
	}
	return s, nil
}

// nextStream returns the next stream the cache opens.
func (r *scriptedRegistry) nextStream(t *testing.T) *scriptedStream {
	t.Helper()
	select {
	case s := <-r.streams:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the cache opened no watch stream within 10 s")
		return nil
	}
}

// scriptedStream is a registry.Watcher fed by the test over unbuffered
// channels: a send returns when the cache's watcher has taken the event.
type scriptedStream struct {
	events  chan *registry.Result
	errs    chan error
	stopped chan struct{}
	once    sync.Once
}

func (s *scriptedStream) Next() (*registry.Result, error) {
	select {
	case r := <-s.events:
		return r, nil
	case err := <-s.errs:
		return nil, err
	case <-s.stopped:
		return nil, registry.ErrWatcherStopped
	}
}

func (s *scriptedStream) Stop() { s.once.Do(func() { close(s.stopped) }) }

func (s *scriptedStream) send(t *testing.T, r *registry.Result) {
	t.Helper()
	select {
	case s.events <- r:
	case <-time.After(10 * time.Second):
		t.Fatalf("the cache's watcher took no event within 10 s")
	}
}

func (s *scriptedStream) fail(t *testing.T, err error) {
	t.Helper()
	select {
	case s.errs <- err:
	case <-time.After(10 * time.Second):
		t.Fatalf("the cache's watcher did not call Next within 10 s")
	}
}
