package admin_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// serve sends one request to h and returns the response and its body.
func serve(t *testing.T, h http.Handler, method, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// cacheOf is a cache over go-micro's memory registry holding svcs, each
// looked up once.
func cacheOf(t *testing.T, svcs ...*registry.Service) cache.Cache {
	t.Helper()
	reg := registry.NewMemoryRegistry()
	for _, s := range svcs {
		require.NoError(t, reg.Register(s))
	}
	c := cache.New(reg, cache.WithLogger(quiet))
	t.Cleanup(c.Stop)
	for _, s := range svcs {
		_, err := c.GetService(s.Name)
		require.NoError(t, err)
	}
	return c
}

// statusJSON is the page's JSON as a Go program reads it: the cache's own
// types, with the page's time and paging.
type statusJSON struct {
	Time      time.Time            `json:"time"`
	Cache     cache.Stats          `json:"cache"`
	Prefix    string               `json:"prefix"`
	After     string               `json:"after"`
	Limit     int                  `json:"limit"`
	Services  []cache.ServiceStats `json:"services"`
	Next      string               `json:"next"`
	NextQuery string               `json:"next_query"`
	Selectors []struct {
		Name      string `json:"name"`
		Available bool   `json:"available"`
		cache.SelectorStats
	} `json:"selectors"`
}
