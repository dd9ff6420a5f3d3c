package otel

import (
	"strings"
	"testing"

	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/statstest"
)

// cachePoints is the number of data points of a cache's counters and
// state: 15 counters (watch events in three), entries, the oldest stale
// age and the registry's state.
const cachePoints = 18

// Without WithServiceMetrics, a collection reads the counters only: no
// Services call, and no data point per service.
func TestServicePointsAreOffByDefault(t *testing.T) {
	r := newReader(t)
	cc := &statstest.CountingCache{Cache: statstest.Many(t, 3, 2)}
	if _, err := Register(r.meter(), cc); err != nil {
		t.Fatal(err)
	}
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
	r := newReader(t)
	cc := &statstest.CountingCache{Cache: statstest.Many(t, n, 3)}
	if _, err := Register(r.meter(), cc, WithServiceMetrics()); err != nil {
		t.Fatal(err)
	}
	got := r.collect()
	if len(got) != cachePoints+5*n {
		t.Errorf("%d data points, want %d", len(got), cachePoints+5*n)
	}
	if l := cc.Limits(); len(l) != 3 || l[0] != 1000 || l[1] != 1000 || l[2] != 1000 {
		t.Errorf("Services called with limits %v, want 1000 three times (2 503 names)", l)
	}
	nodes := 0
	for k, v := range got {
		if strings.HasPrefix(k, "regcache.service.nodes{service=svc-") && v == 1 {
			nodes++
		}
	}
	if nodes != n {
		t.Errorf("regcache.service.nodes: %d services with one node, want %d", nodes, n)
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
	if _, err := Register(r.meter(), c, WithSelectors(sel, other, foreign)); err != nil {
		t.Fatal(err)
	}
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

// A nil meter, cache, selector or option is a mistake made at start-up:
// it panics there, not at the first collection.
func TestNilArgumentsPanic(t *testing.T) {
	c := statstest.Many(t, 0, 0)
	r := newReader(t)
	for name, f := range map[string]func(){
		"nil meter":    func() { _, _ = Register(nil, c) },
		"nil cache":    func() { _, _ = Register(r.meter(), nil) },
		"nil selector": func() { WithSelectors(cache.NewSelector(c), nil) },
		"nil option":   func() { _, _ = Register(r.meter(), c, nil) },
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
