package regcacheotel

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/statstest"
)

// otelKeys are the OpenTelemetry data points that statstest.Checker
// relates. Every regcache.* Int64 sum is a counter (flattenOtel checks
// that they are monotonic); the gauges are named here.
var otelKeys = statstest.Keys{
	Lookups:       "regcache.lookups",
	Fresh:         "regcache.fresh_hits",
	Stale:         "regcache.stale_serves",
	Event:         "regcache.event_serves",
	Throttled:     "regcache.throttled",
	Misses:        "regcache.misses",
	Invalid:       "regcache.invalid_lookups",
	Refreshes:     "regcache.refreshes",
	RefreshErrors: "regcache.refresh_errors",
	OldestStale:   "regcache.oldest_stale_served",
	IsCounter: func(key string) bool {
		return !strings.HasPrefix(key, "regcache.service.") && !strings.HasPrefix(key, "regcache.entries") &&
			!strings.HasPrefix(key, "regcache.registry.down") && !strings.HasPrefix(key, "regcache.oldest_stale_served")
	},
}

// reader is an SDK meter provider with a manual reader, shut down when the
// test ends.
type reader struct {
	t        *testing.T
	reader   *sdkmetric.ManualReader
	provider *sdkmetric.MeterProvider
}

func newReader(t *testing.T) *reader {
	r := sdkmetric.NewManualReader()
	p := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() {
		if err := p.Shutdown(context.Background()); err != nil {
			t.Errorf("meter provider shutdown: %v", err)
		}
	})
	return &reader{t: t, reader: r, provider: p}
}

func (r *reader) meter() metric.Meter { return r.provider.Meter("github.com/regcache/cache") }

// collect collects once and flattens the data points.
func (r *reader) collect() map[string]float64 {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatalf("collect: %v", err)
	}
	return flattenOtel(r.t, rm)
}

// TestRegisterExportsStats registers the instruments, with the data points
// of each service, with an SDK meter provider and a manual reader, and
// collects over and over while readers look up services with every
// outcome at once: each collection must keep the invariants of Stats. Then
// it checks every data point against the known totals of the scenario.
func TestRegisterExportsStats(t *testing.T) {
	r := newReader(t)
	var registration metric.Registration
	checker := &statstest.Checker{Keys: otelKeys}
	bad := 0
	sc := statstest.Run(t, func(c cache.Cache) {
		var err error
		registration, err = Register(r.meter(), c, WithServiceMetrics())
		if err != nil {
			t.Fatalf("register instruments: %v", err)
		}
	}, func() {
		for _, b := range checker.Check(r.collect()) {
			if bad++; bad <= 10 {
				t.Errorf("collection while readers run: %s", b)
			}
		}
	})
	t.Logf("%d collections while the readers ran, each checked", sc.Scrapes)

	collectStart := time.Now()
	got := r.collect()
	collection := time.Since(collectStart).Seconds()
	for _, b := range checker.Check(got) {
		t.Errorf("last collection: %s", b)
	}
	elapsed := time.Since(sc.Start).Seconds()
	want := map[string]float64{
		"regcache.lookups":                                       sc.Lookups(),
		"regcache.fresh_hits":                                    sc.Fresh(),
		"regcache.stale_serves":                                  sc.Stale(),
		"regcache.event_serves":                                  0,
		"regcache.throttled":                                     sc.Throttled(),
		"regcache.misses":                                        sc.Misses(),
		"regcache.invalid_lookups":                               sc.Invalid(),
		"regcache.refreshes":                                     sc.Refreshes(),
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
	// The ages follow the wall clock, so they are checked by their order,
	// as in the Prometheus collector's test.
	greeterAge := got["regcache.service.age{service=it.greeter}"]
	paymentsAge := got["regcache.service.age{service=it.payments}"]
	oldest := got["regcache.oldest_stale_served"]
	if !(greeterAge > 0 && greeterAge < paymentsAge && oldest <= paymentsAge && paymentsAge <= oldest+collection && paymentsAge <= elapsed) {
		t.Errorf("ages: greeter %vs, payments %vs, oldest stale served %vs, collection %vs, scenario %vs; want 0 < greeter < payments = oldest (to the collection's length) ≤ scenario",
			greeterAge, paymentsAge, oldest, collection, elapsed)
	}
	delete(got, "regcache.service.age{service=it.greeter}")
	delete(got, "regcache.service.age{service=it.payments}")
	delete(got, "regcache.oldest_stale_served")
	statstest.CompareSeries(t, got, want)

	// Once unregistered, the callback is not called again.
	if err := registration.Unregister(); err != nil {
		t.Fatalf("unregister: %v", err)
	}
	sc.C.Stop()
	for k := range r.collect() {
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
