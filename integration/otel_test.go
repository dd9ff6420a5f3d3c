package integration

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	cache "github.com/regcache/cache"
)

// registerStatsInstruments exports a cache's Stats to OpenTelemetry. It is
// meant to be copied into a program (regcache does not depend on
// OpenTelemetry): it creates observable instruments on meter and one
// callback that calls Stats once per collection. Unregister the returned
// registration before stopping the cache, or keep it for the life of the
// process. docs/metrics.md shows it in short.
func registerStatsInstruments(meter metric.Meter, c cache.Cache) (metric.Registration, error) {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		inst, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return inst
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		inst, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return inst
	}
	seconds := func(name, desc string) metric.Float64ObservableGauge {
		inst, err := meter.Float64ObservableGauge(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return inst
	}
	lookups := counter("regcache.lookups", "{lookup}", "GetService and Lookup calls.")
	freshHits := counter("regcache.fresh_hits", "{lookup}", "Lookups answered with fresh data.")
	staleServes := counter("regcache.stale_serves", "{lookup}", "Lookups answered with stale data, without waiting for the registry.")
	eventServes := counter("regcache.event_serves", "{lookup}", "Lookups answered with nodes an event announced, not yet confirmed by the registry.")
	throttled := counter("regcache.throttled", "{lookup}", "Lookups answered with the throttled error.")
	misses := counter("regcache.misses", "{lookup}", "Lookups with nothing usable cached, which waited for a registry call.")
	invalid := counter("regcache.invalid_lookups", "{lookup}", "Lookups of the empty name, answered with ErrEmptyName.")
	refreshes := counter("regcache.refreshes", "{call}", "Registry calls made to refresh a service.")
	refreshErrors := counter("regcache.refresh_errors", "{call}", "Registry calls that failed; a not-found answer is not a failure.")
	lists := counter("regcache.lists", "{call}", "ListServices calls, one per re-validation of many services at once.")
	watchEvents := counter("regcache.watch.events", "{event}", "Watch events, by result: applied, ignored or invalidating.")
	reconnects := counter("regcache.watch.reconnects", "{reconnect}", "Watch streams established after the first.")
	dropped := counter("regcache.observer.dropped", "{event}", "Observer events dropped because the observer's queue was full.")
	entries := gauge("regcache.entries", "{service}", "Services the cache holds state for, with or without data.")
	oldestStale := seconds("regcache.oldest_stale_served", "Largest age, since the registry last told its nodes, of any stale data served so far.")
	down := gauge("regcache.registry.down", "", "1 while the cache holds the registry to be down and sends it only probes.")
	nodes := gauge("regcache.service.nodes", "{node}", "Nodes cached for a service, over all its versions.")
	fresh := gauge("regcache.service.fresh", "", "1 while a service's data is fresh, 0 once its TTL has run out.")
	age := seconds("regcache.service.age", "Time since a service's last successful refresh.")
	failures := gauge("regcache.service.refresh_failures", "{failure}", "Consecutive failed refreshes of a service.")
	lastKnown := gauge("regcache.service.last_known_nodes", "", "1 while WithLastKnownNodes keeps a service's nodes after the registry showed none.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	flag := func(b bool) int64 {
		if b {
			return 1
		}
		return 0
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := c.Stats()
		o.ObserveInt64(lookups, int64(st.Lookups))
		o.ObserveInt64(freshHits, int64(st.FreshHits))
		o.ObserveInt64(staleServes, int64(st.StaleServes))
		o.ObserveInt64(eventServes, int64(st.EventServes))
		o.ObserveInt64(throttled, int64(st.Throttled))
		o.ObserveInt64(misses, int64(st.Misses))
		o.ObserveInt64(invalid, int64(st.Invalid))
		o.ObserveInt64(refreshes, int64(st.Refreshes))
		o.ObserveInt64(refreshErrors, int64(st.RefreshErrors))
		o.ObserveInt64(lists, int64(st.Lists))
		result := func(r string) metric.ObserveOption {
			return metric.WithAttributes(attribute.String("result", r))
		}
		o.ObserveInt64(watchEvents, int64(st.EventsApplied), result("applied"))
		o.ObserveInt64(watchEvents, int64(st.EventsIgnored), result("ignored"))
		o.ObserveInt64(watchEvents, int64(st.EventsInvalidating), result("invalidating"))
		o.ObserveInt64(reconnects, int64(st.WatchReconnects))
		o.ObserveInt64(dropped, int64(st.ObserverDropped))
		o.ObserveInt64(entries, int64(st.Entries))
		o.ObserveFloat64(oldestStale, st.OldestStaleServed.Seconds())
		o.ObserveInt64(down, flag(st.RegistryDown))
		for _, s := range c.Services("", "", 0) {
			if s.Source == "" {
				continue // held without data
			}
			svc := metric.WithAttributes(attribute.String("service", s.Name))
			o.ObserveInt64(nodes, int64(s.Nodes), svc)
			o.ObserveInt64(fresh, flag(s.Fresh), svc)
			o.ObserveFloat64(age, s.Age.Seconds(), svc)
			o.ObserveInt64(failures, int64(s.Failures), svc)
			o.ObserveInt64(lastKnown, flag(s.LastKnownNodes), svc)
		}
		return nil
	}, lookups, freshHits, staleServes, eventServes, throttled, misses, invalid, refreshes, refreshErrors, lists,
		watchEvents, reconnects, dropped, entries, oldestStale, down, nodes, fresh, age, failures, lastKnown)
}

// otelKeys are the OpenTelemetry data points that scrapeChecker relates.
// Every regcache.* Int64 sum is a counter (flattenOtel checks that they are
// monotonic); the gauges are named here.
var otelKeys = scrapeKeys{
	lookups:       "regcache.lookups",
	fresh:         "regcache.fresh_hits",
	stale:         "regcache.stale_serves",
	event:         "regcache.event_serves",
	throttled:     "regcache.throttled",
	misses:        "regcache.misses",
	invalid:       "regcache.invalid_lookups",
	refreshes:     "regcache.refreshes",
	refreshErrors: "regcache.refresh_errors",
	oldestStale:   "regcache.oldest_stale_served",
	isCounter: func(key string) bool {
		return !strings.HasPrefix(key, "regcache.service.") && !strings.HasPrefix(key, "regcache.entries") &&
			!strings.HasPrefix(key, "regcache.registry.down") && !strings.HasPrefix(key, "regcache.oldest_stale_served")
	},
}

// TestOtelInstruments registers the instruments of registerStatsInstruments
// with an SDK meter provider and a manual reader, and collects over and
// over while readers look up services with every outcome at once: each
// collection must keep the invariants of Stats. Then it checks every data
// point against the known totals of the scenario.
func TestOtelInstruments(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		if err := provider.Shutdown(ctx); err != nil {
			t.Errorf("meter provider shutdown: %v", err)
		}
	})
	collect := func() map[string]float64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatalf("collect: %v", err)
		}
		return flattenOtel(t, rm)
	}

	var registration metric.Registration
	checker := &scrapeChecker{keys: otelKeys}
	bad := 0
	sc := runStatsScenario(t, func(c cache.Cache) {
		var err error
		registration, err = registerStatsInstruments(provider.Meter("github.com/regcache/cache"), c)
		if err != nil {
			t.Fatalf("register instruments: %v", err)
		}
	}, func() {
		for _, b := range checker.check(collect()) {
			if bad++; bad <= 10 {
				t.Errorf("collection while readers run: %s", b)
			}
		}
	})
	t.Logf("%d collections while the readers ran, each checked", sc.scrapes)

	got := collect()
	for _, b := range checker.check(got) {
		t.Errorf("last collection: %s", b)
	}
	elapsed := time.Since(sc.start).Seconds()
	want := map[string]float64{
		"regcache.lookups":                                       sc.Lookups(),
		"regcache.fresh_hits":                                    sc.Fresh(),
		"regcache.stale_serves":                                  sc.Stale(),
		"regcache.event_serves":                                  0,
		"regcache.throttled":                                     sc.Throttled(),
		"regcache.misses":                                        sc.Misses(),
		"regcache.invalid_lookups":                               sc.Invalid(),
		"regcache.refreshes":                                     sc.Misses(),
		"regcache.refresh_errors":                                1,
		"regcache.lists":                                         0,
		"regcache.watch.events{result=applied}":                  1,
		"regcache.watch.events{result=ignored}":                  1,
		"regcache.watch.events{result=invalidating}":             1,
		"regcache.watch.reconnects":                              1,
		"regcache.observer.dropped":                              0,
		"regcache.entries":                                       sc.Entries(),
		"regcache.registry.down":                                 0,
		"regcache.service.nodes{service=it.greeter}":             3,
		"regcache.service.nodes{service=it.payments}":            1,
		"regcache.service.fresh{service=it.greeter}":             1,
		"regcache.service.fresh{service=it.payments}":            0,
		"regcache.service.refresh_failures{service=it.greeter}":  0,
		"regcache.service.refresh_failures{service=it.payments}": 0,
		"regcache.service.last_known_nodes{service=it.greeter}":  0,
		"regcache.service.last_known_nodes{service=it.payments}": 0,
	}
	greeterAge := got["regcache.service.age{service=it.greeter}"]
	paymentsAge := got["regcache.service.age{service=it.payments}"]
	oldest := got["regcache.oldest_stale_served"]
	if !(greeterAge > 0 && greeterAge < paymentsAge && paymentsAge == oldest && paymentsAge <= elapsed) {
		t.Errorf("ages: greeter %vs, payments %vs, oldest stale served %vs, scenario %vs; want 0 < greeter < payments = oldest ≤ scenario",
			greeterAge, paymentsAge, oldest, elapsed)
	}
	delete(got, "regcache.service.age{service=it.greeter}")
	delete(got, "regcache.service.age{service=it.payments}")
	delete(got, "regcache.oldest_stale_served")
	compareSeries(t, got, want)

	// Once unregistered, the callback is not called again.
	if err := registration.Unregister(); err != nil {
		t.Fatalf("unregister: %v", err)
	}
	sc.c.Stop()
	for k := range collect() {
		t.Errorf("after Unregister: %s still reported", k)
	}
}

// flattenOtel turns collected metrics into one value per data point, keyed
// by name{key=value,...}. Counters must be monotonic cumulative sums, and
// the seconds gauges must say so in their unit.
func flattenOtel(t *testing.T, rm metricdata.ResourceMetrics) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	key := func(name string, attrs attribute.Set) string {
		var pairs []string
		for _, kv := range attrs.ToSlice() {
			pairs = append(pairs, string(kv.Key)+"="+kv.Value.Emit())
		}
		sort.Strings(pairs)
		if len(pairs) == 0 {
			return name
		}
		return name + "{" + strings.Join(pairs, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: monotonic %v, temporality %v; want a monotonic cumulative sum", m.Name, d.IsMonotonic, d.Temporality)
				}
				for _, dp := range d.DataPoints {
					out[key(m.Name, dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					out[key(m.Name, dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Gauge[float64]:
				if m.Unit != "s" {
					t.Errorf("%s: unit %q, want s", m.Name, m.Unit)
				}
				for _, dp := range d.DataPoints {
					out[key(m.Name, dp.Attributes)] = dp.Value
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}
