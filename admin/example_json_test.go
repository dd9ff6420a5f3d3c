package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/admin"
)

// A program reads the page's JSON into the cache's own types: durations
// come back from their seconds, times from RFC 3339.
func Example_readJSON() {
	reg := registry.NewMemoryRegistry()
	_ = reg.Register(&registry.Service{Name: "greeter", Version: "1", Nodes: []*registry.Node{{Id: "greeter-1", Address: "10.0.0.7:8080"}}})
	c := cache.New(reg, cache.WithTTL(30*time.Second))
	defer c.Stop()
	_, _ = c.GetService("greeter")

	rec := httptest.NewRecorder()
	admin.Handler(c).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?format=json", nil))

	var page struct {
		Time     time.Time            `json:"time"`
		Cache    cache.Stats          `json:"cache"`
		Services []cache.ServiceStats `json:"services"`
		Next     string               `json:"next"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		fmt.Println(err)
		return
	}
	s := page.Services[0]
	fmt.Println(page.Cache.Options.TTL, page.Cache.Lookups, page.Cache.RegistryDown)
	fmt.Println(s.Name, s.Fresh, s.Source, s.NodeList[0].Address)
	// Output:
	// 30s 1 false
	// greeter true refresh 10.0.0.7:8080
}
