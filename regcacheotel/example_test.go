package regcacheotel_test

import (
	"context"
	"fmt"

	"go-micro.dev/v4/registry"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/regcacheotel"
)

// One call registers the instruments of a cache and of the selectors that
// read it on the global meter provider, which a program sets up once
// (here with a manual reader that collects once); WithMeterProvider names
// another.
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	otel.SetMeterProvider(provider)

	reg := registry.NewMemoryRegistry() // or etcd, ...
	_ = reg.Register(&registry.Service{Name: "greeter", Version: "1", Nodes: []*registry.Node{{Id: "g-1", Address: "127.0.0.1:8080"}}})
	c := cache.New(reg)
	defer c.Stop()
	sel := cache.NewSelector(c) // the client's selector: client.Selector(sel)

	registration, err := regcacheotel.Register(c, regcacheotel.WithSelectors(sel))
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
				for _, dp := range d.DataPoints {
					if result, _ := dp.Attributes.Value("result"); dp.Value > 0 {
						fmt.Println(m.Name, result.Emit(), dp.Value)
					}
				}
			}
		case metricdata.Gauge[int64]:
			if m.Name == "regcache.selector.ejected_nodes" {
				fmt.Println(m.Name, d.DataPoints[0].Value)
			}
		}
	}
	// Output:
	// regcache.lookups miss 1
	// regcache.selector.ejected_nodes 0
}
