package regcacheprometheus_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/regcacheprometheus"
)

// One line registers the collector of a cache and of the selectors that
// read it; /metrics then serves the metrics of docs/metrics.md. Here one
// scrape goes through the mux without a listener.
func Example() {
	reg := registry.NewMemoryRegistry() // or etcd, ...
	_ = reg.Register(&registry.Service{Name: "greeter", Version: "1", Nodes: []*registry.Node{{Id: "g-1", Address: "127.0.0.1:8080"}}})
	c := cache.New(reg)
	defer c.Stop()
	sel := cache.NewSelector(c) // the client's selector: client.Selector(sel)

	prometheus.MustRegister(regcacheprometheus.NewCollector(c, regcacheprometheus.WithSelectors(sel)))
	http.Handle("/metrics", promhttp.Handler())

	_, _ = sel.Select("greeter")
	rec := httptest.NewRecorder()
	http.DefaultServeMux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for sc := bufio.NewScanner(rec.Body); sc.Scan(); {
		if line := sc.Text(); strings.HasPrefix(line, "regcache_lookups_total") || strings.HasPrefix(line, "regcache_selector_ejected_nodes") {
			fmt.Println(line)
		}
	}
	// Output:
	// regcache_lookups_total{result="event"} 0
	// regcache_lookups_total{result="fresh"} 0
	// regcache_lookups_total{result="invalid"} 0
	// regcache_lookups_total{result="miss"} 1
	// regcache_lookups_total{result="stale"} 0
	// regcache_lookups_total{result="throttled"} 0
	// regcache_selector_ejected_nodes 0
}
