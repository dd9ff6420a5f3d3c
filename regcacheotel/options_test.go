package regcacheotel

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/statstest"
)

// cachePoints is the number of data points of a cache's counters and
// state: lookups (six results), refreshes, refresh errors, lists, the
// registry's state, outages and down time, the stream's state (four),
// watch events (three), reconnects, dropped observer events, entries and
// the stale age served.
const cachePoints = 23

// Without WithServiceMetrics, a collection reads the counters only: no
// Services call, and no data point per service.
func TestServicePointsAreOffByDefault(t *testing.T) {
	r := newReader(t)
	cc := &statstest.CountingCache{Cache: statstest.Many(t, 3, 2)}
	r.register(cc)
	if got := r.collect(); len(got) != cachePoints {
		t.Errorf("%d data points, want %d: %v", len(got), cachePoints, got)
	}
	if l := cc.Limits(); len(l) > 0 {
		t.Errorf("Services called with limits %v, want no call", l)
	}
}

// With WithServiceMetrics, a collection pages through Services a thousand
// rows a call, and has five data points for each service with data, none
// for the names held without data.
func TestServicePointsPageThroughServices(t *testing.T) {
	const n = 2500
	// No limit on the points of an instrument: the SDK's default (2 000
	// from v1.44.0 on) is TestServicePointsPastTheSDKLimit's.
	t.Setenv("OTEL_GO_X_CARDINALITY_LIMIT", "0")
	r := newReader(t)
	cc := &statstest.CountingCache{Cache: statstest.Many(t, n, 3)}
	r.register(cc, WithServiceMetrics())
	got := r.collect()
	if len(got) != cachePoints+5*n {
		t.Errorf("%d data points, want %d", len(got), cachePoints+5*n)
	}
	if l := cc.Limits(); len(l) != 3 || l[0] != 1000 || l[1] != 1000 || l[2] != 1000 {
		t.Errorf("Services called with limits %v, want 1000 three times (2 503 names)", l)
	}
	nodes := 0
	for k, v := range got {
		if strings.HasPrefix(k, "regcache.service.nodes{regcache.service=svc-") && v == 1 {
			nodes++
		}
	}
	if nodes != n {
		t.Errorf("regcache.service.nodes: %d services with one node, want %d", nodes, n)
	}
}

// With the SDK's default cardinality limit (from v1.44.0 on: 2 000 points
// an instrument a collection), the services past it fold into one
// overflow point, as docs/metrics.md tells. Older SDKs keep every point.
func TestServicePointsPastTheSDKLimit(t *testing.T) {
	const n, limit = 2500, 2000
	var major, minor int
	if _, err := fmt.Sscanf(sdk.Version(), "%d.%d.", &major, &minor); err != nil {
		t.Fatalf("the SDK's version %q: %v", sdk.Version(), err)
	}
	if major == 1 && minor < 44 {
		t.Skipf("OpenTelemetry's SDK v%s has no default cardinality limit", sdk.Version())
	}
	t.Setenv("OTEL_GO_X_CARDINALITY_LIMIT", "")
	r := newReader(t)
	r.register(statstest.Many(t, n, 0), WithServiceMetrics())
	got := r.collect()
	nodes := 0
	for k := range got {
		if strings.HasPrefix(k, "regcache.service.nodes{regcache.service=svc-") {
			nodes++
		}
	}
	if nodes != limit-1 {
		t.Errorf("regcache.service.nodes: %d services, want %d, the limit less the overflow point", nodes, limit-1)
	}
	// (A gauge's overflow point holds one folded service's value, not a
	// sum.)
	if _, ok := got["regcache.service.nodes{otel.metric.overflow=true}"]; !ok {
		t.Errorf("no overflow point for the %d other services", n-limit+1)
	}
}

// WithSelectors adds the selectors' passive health, added up over them;
// go-micro's own selector, which does not report it, is left out.
func TestSelectorPoints(t *testing.T) {
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
	r := newReader(t)
	r.register(c, WithSelectors(sel, other, foreign))
	got := map[string]float64{}
	for k, v := range r.collect() {
		if strings.HasPrefix(k, "regcache.selector.") {
			got[k] = v
		}
	}
	statstest.CompareSeries(t, got, map[string]float64{
		"regcache.selector.failures":      4,
		"regcache.selector.ejections":     1,
		"regcache.selector.refused":       0,
		"regcache.selector.readmitted":    0,
		"regcache.selector.ignored":       0,
		"regcache.selector.ejected_nodes": 1,
	})
}

// While the registry is held down, the instruments say so, count the
// outage, and its down time grows with the clock, to the length of the
// outage at most.
func TestOutagePoints(t *testing.T) {
	start := time.Now()
	r := newReader(t)
	r.register(statstest.Down(t))
	got := r.collect()
	downTime := got["regcache.registry.down_time"]
	if elapsed := time.Since(start).Seconds(); !(downTime > 0 && downTime <= elapsed) {
		t.Errorf("regcache.registry.down_time %v, want in (0, %v]", downTime, elapsed)
	}
	if got["regcache.registry.down"] != 1 || got["regcache.registry.outages"] != 1 {
		t.Errorf("regcache.registry.down %v, regcache.registry.outages %v; want 1, 1", got["regcache.registry.down"], got["regcache.registry.outages"])
	}
	time.Sleep(time.Millisecond)
	if later := r.collect()["regcache.registry.down_time"]; later <= downTime {
		t.Errorf("regcache.registry.down_time %v, then %v: want it to grow while the registry is down", downTime, later)
	}
}

// Without WithMeterProvider, the instruments are on the global meter
// provider's meter named by the package's import path.
func TestTheGlobalMeterProviderByDefault(t *testing.T) {
	r := newReader(t)
	// (The global provider cannot be set back to the one it starts with,
	// which delegates to the first provider set; nothing else here uses
	// it but the Example, which sets its own.)
	otel.SetMeterProvider(r.provider)
	if _, err := Register(statstest.Many(t, 1, 0)); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if ScopeName != "github.com/regcache/cache/regcacheotel" {
		t.Errorf("ScopeName %q, want the package's import path", ScopeName)
	}
	if len(rm.ScopeMetrics) != 1 || rm.ScopeMetrics[0].Scope.Name != ScopeName {
		t.Fatalf("scopes %+v, want one, named %s", rm.ScopeMetrics, ScopeName)
	}
	if n := len(flattenOtel(t, rm)); n != cachePoints {
		t.Errorf("%d data points through the global meter provider, want %d", n, cachePoints)
	}
}

// A nil cache, provider, selector or option is a mistake made at
// start-up: it panics there, not at the first collection.
func TestNilArgumentsPanic(t *testing.T) {
	c := statstest.Many(t, 0, 0)
	for name, f := range map[string]func(){
		"nil cache":    func() { _, _ = Register(nil) },
		"nil provider": func() { WithMeterProvider(nil) },
		"nil selector": func() { WithSelectors(cache.NewSelector(c), nil) },
		"nil option":   func() { _, _ = Register(c, nil) },
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
