package cache

import (
	"fmt"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
)

// BenchmarkEventApply is the cache's own cost of one watch event, without
// the stream that brings it: c.apply, over 10 000 cached services of 3
// nodes, taken in turn. kind=repeat announces a node again as held (an
// instance registering again); kind=changed announces a node with new
// metadata; kind=uncached names a service not cached.
func BenchmarkEventApply(b *testing.B) {
	const services = 10000
	f := newFakeRegistry()
	names := make([]string, services)
	for i := range names {
		names[i] = fmt.Sprintf("svc%06d", i)
		f.SetNodes(names[i], "a", "b", "c")
	}
	l := &testLogger{}
	c := New(f, WithLogger(l), WithTTL(time.Hour)).(*cache)
	defer c.Stop()
	for _, n := range names {
		if _, err := c.GetService(n); err != nil {
			b.Fatal(err)
		}
	}
	event := func(name, rev string) *registry.Result {
		s := svc(name, "1", "b")
		if rev != "" {
			s.Nodes[0].Metadata["rev"] = rev
		}
		return &registry.Result{Action: "update", Service: s}
	}
	for _, kind := range []string{"repeat", "changed", "uncached"} {
		b.Run("kind="+kind, func(b *testing.B) {
			evs := make([][2]*registry.Result, services)
			for i, n := range names {
				switch kind {
				case "repeat":
					evs[i] = [2]*registry.Result{event(n, ""), event(n, "")}
				case "changed":
					evs[i] = [2]*registry.Result{event(n, "1"), event(n, "2")}
				case "uncached":
					evs[i] = [2]*registry.Result{event("x"+n, ""), event("x"+n, "")}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.apply(evs[i%services][i/services%2], nil)
			}
		})
	}
}
