package regcacheotel_test

import (
	"context"
	"fmt"

	"go-micro.dev/v4/registry"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/regcacheotel"
)

// One call registers the instruments of a cache and of the selectors that
// read it on a meter; a program would take it from its meter provider,
// otel.Meter("github.com/regcache/cache"). Here a manual reader collects
// once.
func Example() {
	reg := registry.NewMemoryRegistry() // or etcd, ...
	_ = reg.Register(&registry.Service{Name: "greeter", Version: "1", Nodes: []*registry.Node{{Id: "g-1", Address: "127.0.0.1:8080"}}})
	c := cache.New(reg)
	defer c.Stop()
	sel := cache.NewSelector(c) // the client's selector: client.Selector(sel)

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	registration, err := regcacheotel.Register(provider.Meter("github.com/regcache/cache"), c, regcacheotel.WithSelectors(sel))
	if err != nil {
		panic(err)
	}
	defer registration.Unregister() // when the cache goes away

	_, _ = sel.Select("greeter")
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			if m.Name == "regcache.lookups" {
				fmt.Println(m.Name, d.DataPoints[0].Value)
			}
		case metricdata.Gauge[int64]:
			if m.Name == "regcache.selector.ejected_nodes" {
				fmt.Println(m.Name, d.DataPoints[0].Value)
			}
		}
	}
	// Output:
	// regcache.lookups 1
	// regcache.selector.ejected_nodes 0
}
