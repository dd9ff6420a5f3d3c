package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/admin"
)

// anyService is a registry that has every service, with one node.
type anyService struct{ registry.Registry }

func (anyService) GetService(name string, _ ...registry.GetOption) ([]*registry.Service, error) {
	return []*registry.Service{{Name: name, Version: "1", Nodes: []*registry.Node{{Id: name + "-1", Address: "10.0.0.1:8080"}}}}, nil
}

// BenchmarkPage serves the first page, and a page filtered by prefix, of a
// cache of 100 000 services, as HTML and as JSON: what an operator waits
// for. Each includes a Stats call (the counters) and the walk of every
// name that picks the page.
func BenchmarkPage(b *testing.B) {
	const n = 100_000
	if testing.Short() {
		b.Skip("100 000 services: not with -short")
	}
	c := cache.New(anyService{registry.NewMemoryRegistry()}, cache.WithTTL(time.Hour), cache.WithLogger(quiet))
	defer c.Stop()
	for i := 0; i < n; i++ {
		if _, err := c.Lookup(fmt.Sprintf("svc-%06d", i)); err != nil {
			b.Fatal(err)
		}
	}
	h := admin.Handler(c)
	for _, target := range []string{"/", "/?format=json", "/?prefix=svc-0500&format=json"} {
		b.Run(target, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Code)
				}
			}
		})
	}
}
