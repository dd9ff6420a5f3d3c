package admin_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

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
