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
// relates. Every regcache.* sum is a counter (flattenOtel checks that they
// are monotonic); the gauges are named here.
var otelKeys = statstest.Keys{
	Fresh:         "regcache.lookups{result=fresh}",
	Stale:         "regcache.lookups{result=stale}",
	Event:         "regcache.lookups{result=event}",
	Throttled:     "regcache.lookups{result=throttled}",
	Misses:        "regcache.lookups{result=miss}",
	Invalid:       "regcache.lookups{result=invalid}",
	Refreshes:     "regcache.refreshes",
	RefreshErrors: "regcache.refresh_errors",
	StreamStates: []string{
		"regcache.watch.stream.state{state=not_started}", "regcache.watch.stream.state{state=connected}",
		"regcache.watch.stream.state{state=reconnecting}", "regcache.watch.stream.state{state=stopped}",
	},
	IsCounter: func(key string) bool {
		name, _, _ := strings.Cut(key, "{")
		return !gauges[name]
	},
}

// gauges are the instruments that are not counters.
var gauges = map[string]bool{
	"regcache.registry.down": true, "regcache.watch.stream.state": true, "regcache.entries": true,
	"regcache.stale_served.age": true, "regcache.selector.ejected_nodes": true,
	"regcache.service.nodes": true, "regcache.service.fresh": true, "regcache.service.age": true,
	"regcache.service.refresh_failures": true, "regcache.service.last_known_nodes": true,
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

// register registers c's instruments on the reader's provider.
func (r *reader) register(c cache.Cache, opts ...Option) metric.Registration {
	r.t.Helper()
	reg, err := Register(c, append([]Option{WithMeterProvider(r.provider)}, opts...)...)
	if err != nil {
		r.t.Fatalf("register instruments: %v", err)
	}
	return reg
}

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
// result at once: each collection must keep the invariants of Stats. Then
// it checks every data point against the known totals of the scenario.
func TestRegisterExportsStats(t *testing.T) {
	r := newReader(t)
	var registration metric.Registration
	checker := &statstest.Checker{Keys: otelKeys}
	bad := 0
	sc := statstest.Run(t, func(c cache.Cache) {
		registration = r.register(c, WithServiceMetrics())
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
		"regcache.lookups{result=fresh}":                                  sc.Fresh(),
		"regcache.lookups{result=event}":                                  0,
		"regcache.lookups{result=stale}":                                  sc.Stale(),
		"regcache.lookups{result=throttled}":                              sc.Throttled(),
		"regcache.lookups{result=miss}":                                   sc.Misses(),
		"regcache.lookups{result=invalid}":                                sc.Invalid(),
		"regcache.refreshes":                                              sc.Refreshes(),
		"regcache.refresh_errors":                                         1,
		"regcache.lists":                                                  0,
		"regcache.registry.down":                                          0,
		"regcache.registry.outages":                                       0,
		"regcache.registry.down_time":                                     0,
		"regcache.watch.stream.state{state=not_started}":                  0,
		"regcache.watch.stream.state{state=connected}":                    1,
		"regcache.watch.stream.state{state=reconnecting}":                 0,
		"regcache.watch.stream.state{state=stopped}":                      0,
		"regcache.watch.events{result=applied}":                           1,
		"regcache.watch.events{result=ignored}":                           1,
		"regcache.watch.events{result=invalidating}":                      1,
		"regcache.watch.reconnects":                                       1,
		"regcache.observer.dropped":                                       0,
		"regcache.entries":                                                sc.Entries(),
		"regcache.service.nodes{regcache.service=it.greeter}":             3,
		"regcache.service.nodes{regcache.service=it.payments}":            1,
		"regcache.service.fresh{regcache.service=it.greeter}":             1,
		"regcache.service.fresh{regcache.service=it.payments}":            0,
		"regcache.service.refresh_failures{regcache.service=it.greeter}":  0,
		"regcache.service.refresh_failures{regcache.service=it.payments}": 0,
		"regcache.service.last_known_nodes{regcache.service=it.greeter}":  0,
		"regcache.service.last_known_nodes{regcache.service=it.payments}": 0,
	}
	// The ages follow the wall clock, so they are checked by their order,
	// as in the Prometheus collector's test.
	greeterAge := got["regcache.service.age{regcache.service=it.greeter}"]
	paymentsAge := got["regcache.service.age{regcache.service=it.payments}"]
	staleAge := got["regcache.stale_served.age"]
	if !(greeterAge > 0 && greeterAge < paymentsAge && staleAge > 0 && staleAge <= paymentsAge && paymentsAge <= staleAge+collection && paymentsAge <= elapsed) {
		t.Errorf("ages: greeter %vs, payments %vs, stale served %vs, collection %vs, scenario %vs; want 0 < greeter < payments = stale served (to the collection's length) ≤ scenario",
			greeterAge, paymentsAge, staleAge, collection, elapsed)
	}
	delete(got, "regcache.service.age{regcache.service=it.greeter}")
	delete(got, "regcache.service.age{regcache.service=it.payments}")
	delete(got, "regcache.stale_served.age")
	statstest.CompareSeries(t, got, want)

	// Stats keep working after Stop, which the stream's state tells.
	sc.C.Stop()
	got = r.collect()
	if got["regcache.watch.stream.state{state=stopped}"] != 1 || got["regcache.watch.stream.state{state=connected}"] != 0 {
		t.Errorf("after Stop: the stream's state is not stopped: %v", got)
	}

	// Once unregistered, the callback is not called again.
	if err := registration.Unregister(); err != nil {
		t.Fatalf("unregister: %v", err)
	}
	for k := range r.collect() {
		t.Errorf("after Unregister: %s still reported", k)
	}
}

// flattenOtel turns collected metrics into one value per data point, keyed
// by name{key=value,...}. Counters must be monotonic cumulative sums, and
// the seconds must say so in their unit.
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
			case metricdata.Sum[float64]:
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality || m.Unit != "s" {
					t.Errorf("%s: monotonic %v, temporality %v, unit %q; want a monotonic cumulative sum of seconds", m.Name, d.IsMonotonic, d.Temporality, m.Unit)
				}
				for _, dp := range d.DataPoints {
					out[key(m.Name, dp.Attributes)] = dp.Value
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
