package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	_ "net/http/pprof" // /debug/pprof/ on http.DefaultServeMux

	"go-micro.dev/v4"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/admin"
	"github.com/regcache/cache/gomicro"
)

// The status page goes next to net/http/pprof on http.DefaultServeMux,
// which a program serves on a debug port of its own, on loopback or
// behind the operators' access control:
//
//	go http.ListenAndServe("127.0.0.1:6060", nil)
//
// Then /debug/regcache shows the page, and /debug/regcache?format=json the
// same as JSON. Here one request goes through the mux without a listener.
func Example() {
	reg := registry.NewMemoryRegistry() // or etcd, ...
	c := cache.New(reg)
	defer c.Stop()
	sel := cache.NewSelector(c) // the client's selector: client.Selector(sel)

	http.Handle("/debug/regcache", admin.Handler(c, sel))

	rec := httptest.NewRecorder()
	http.DefaultServeMux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/regcache?format=json", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	// Output: 200 application/json; charset=utf-8
}

// In a go-micro service, make the cache yourself and give it to
// gomicro.Registry, which then uses it as it is: the page shows the cache
// that the service's client selects through, and the client's selector.
// (Compiled, not run: it would start the service.)
func Example_goMicroService() {
	reg := registry.NewMemoryRegistry() // or etcd, ...
	c := cache.New(reg)
	defer c.Stop() // the service stops only the caches it made
	service := micro.NewService(micro.Name("greeter"), gomicro.Registry(c))
	service.Init()

	http.Handle("/debug/regcache", admin.Handler(c, service.Client().Options().Selector))
	go http.ListenAndServe("127.0.0.1:6060", nil) // the debug port, on loopback
	_ = service.Run()
}
