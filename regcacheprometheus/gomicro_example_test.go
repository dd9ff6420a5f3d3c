package regcacheprometheus_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go-micro.dev/v4"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/server"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/admin"
	"github.com/regcache/cache/gomicro"
	"github.com/regcache/cache/regcacheprometheus"
)

// A service wired in one line with gomicro.Registry serves the metrics and
// the status page of the cache its client reads, one line each.
func Example_gomicro() {
	reg := registry.NewMemoryRegistry() // or etcd, consul, ...
	_ = reg.Register(&registry.Service{Name: "greeter", Version: "1", Nodes: []*registry.Node{{Id: "g-1", Address: "127.0.0.1:8080"}}})
	quiet := logger.NewLogger(logger.WithLevel(logger.FatalLevel))
	service := micro.NewService(
		// A service usually leaves out the next four lines: they keep
		// this example off go-micro's defaults and quiet.
		micro.Client(client.NewClient()),
		micro.Server(server.NewServer(server.Address("127.0.0.1:0"))),
		micro.Broker(broker.NewMemoryBroker()),
		micro.Logger(quiet),
		micro.Name("greeter"),
		gomicro.Registry(reg, cache.WithLogger(quiet)), // in place of micro.Registry(reg)
	)
	// service.Init() goes here in a real service.

	sel := service.Client().Options().Selector.(cache.Selector)
	prometheus.MustRegister(regcacheprometheus.NewCollector(sel.Cache(), regcacheprometheus.WithSelectors(sel)))
	http.Handle("/debug/regcache/", admin.Handler(sel.Cache(), sel))
	defer sel.Close() // the service does it when it stops

	_, _ = sel.Select("greeter") // as the client does for each call

	metrics := httptest.NewRecorder()
	promhttp.Handler().ServeHTTP(metrics, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(metrics.Body.String(), "\n") {
		if strings.HasPrefix(line, `regcache_lookups_total{result="miss"}`) {
			fmt.Println(line)
		}
	}
	page := httptest.NewRecorder()
	http.DefaultServeMux.ServeHTTP(page, httptest.NewRequest(http.MethodGet, "/debug/regcache/?format=json", nil))
	fmt.Println(page.Code, strings.Contains(page.Body.String(), `"name": "greeter"`))
	// Output:
	// regcache_lookups_total{result="miss"} 1
	// 200 true
}
