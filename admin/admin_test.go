package admin_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/admin"
)

const evil = "<script>alert(1)</script>"

// fixture is a cache over go-micro's memory registry with a service whose
// name and metadata are markup, and a node of "greeter" ejected by the
// selector.
type fixture struct {
	c   cache.Cache
	sel selector.Selector
	h   http.Handler
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	reg := registry.NewMemoryRegistry()
	require.NoError(t, reg.Register(&registry.Service{Name: evil, Version: "1", Nodes: []*registry.Node{
		{Id: "x-1", Address: "127.0.0.1:9001", Metadata: map[string]string{"note": `<img src=x onerror="alert(2)">`}},
	}}))
	require.NoError(t, reg.Register(&registry.Service{Name: "greeter", Version: "2", Nodes: []*registry.Node{
		{Id: "g-1", Address: "127.0.0.1:9101"}, {Id: "g-2", Address: "127.0.0.1:9102"},
	}}))
	c := cache.New(reg, cache.WithLogger(quiet))
	t.Cleanup(c.Stop)
	for _, name := range []string{evil, "greeter"} {
		_, err := c.GetService(name)
		require.NoError(t, err)
	}
	for c.Stats().Stream != cache.StreamConnected {
		time.Sleep(time.Millisecond)
	}
	sel := cache.NewSelector(c)
	svcs, err := c.GetService("greeter")
	require.NoError(t, err)
	down := merrors.InternalServerError("go.micro.client", "connection error: dial tcp 127.0.0.1:9101: connect: connection refused")
	var g1 *registry.Node
	for _, n := range svcs[0].Nodes {
		if n.Id == "g-1" {
			g1 = n
		}
	}
	for i := 0; i < 3; i++ {
		sel.Mark("greeter", g1, down)
	}
	return &fixture{c: c, sel: sel, h: admin.Handler(c, sel)}
}

func (f *fixture) get(t *testing.T, method, target string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec.Result()
}

func (f *fixture) status(t *testing.T, query string) statusJSON {
	t.Helper()
	res := f.get(t, http.MethodGet, "/?format=json"+query)
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "application/json; charset=utf-8", res.Header.Get("Content-Type"))
	var st statusJSON
	require.NoError(t, json.NewDecoder(res.Body).Decode(&st))
	return st
}

func TestJSONShowsWhatTheCacheBelieves(t *testing.T) {
	f := newFixture(t)
	st := f.status(t, "")
	assert.False(t, st.Cache.RegistryDown)
	assert.Zero(t, st.Cache.RegistryDownSince)
	assert.Equal(t, cache.StreamConnected, st.Cache.Stream)
	assert.False(t, st.Cache.StreamSince.IsZero())
	assert.Equal(t, 2, st.Cache.Entries)
	assert.Equal(t, uint64(2), st.Cache.Misses)
	assert.Equal(t, cache.DefaultTTL, st.Cache.Options.TTL, "the options, in seconds and back")
	assert.Equal(t, 100, st.Limit)
	assert.Empty(t, st.Next)

	require.Len(t, st.Services, 2)
	assert.Equal(t, evil, st.Services[0].Name, "sorted by name: '<' sorts before 'g'")
	g := st.Services[1]
	assert.Equal(t, "greeter", g.Name)
	assert.True(t, g.Fresh)
	assert.Equal(t, cache.SourceRefresh, g.Source)
	require.False(t, g.RetryAt.IsZero(), "refreshed just now: the next refresh waits for the retry interval")
	assert.True(t, g.RetryAt.After(st.Time))
	assert.False(t, g.RetryAt.After(st.Time.Add(cache.DefaultMinimumRetryInterval)))
	assert.Equal(t, 2, g.Nodes)
	require.Len(t, g.NodeList, 2)
	assert.Equal(t, cache.NodeStats{Id: "g-1", Address: "127.0.0.1:9101", Version: "2"}, g.NodeList[0])
	assert.Equal(t, `<img src=x onerror="alert(2)">`, st.Services[0].NodeList[0].Metadata["note"], "JSON keeps the data as it is")

	require.Len(t, st.Selectors, 1)
	s := st.Selectors[0]
	assert.Equal(t, "regcache", s.Name)
	assert.True(t, s.Available)
	assert.Equal(t, uint64(3), s.Failures)
	require.Len(t, s.Ejected, 1)
	e := s.Ejected[0]
	assert.Equal(t, "greeter", e.Service)
	assert.Equal(t, "g-1", e.Id)
	assert.Equal(t, 1, e.Ejections)
	assert.Contains(t, e.Reason, "connection refused")
	assert.Positive(t, e.Remaining)
	assert.LessOrEqual(t, e.Remaining, time.Minute)
	assert.Zero(t, s.Cache, "the cache's Stats are shown once, not per selector")
}

func TestHTMLEscapesRegistryData(t *testing.T) {
	f := newFixture(t)
	res := f.get(t, http.MethodGet, "/")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	assert.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'none'")
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	page := string(body)
	assert.NotContains(t, page, "<script")
	assert.NotContains(t, page, "<img")
	assert.Contains(t, page, "&lt;script&gt;alert(1)&lt;/script&gt;")
	assert.Contains(t, page, "connection refused")
	assert.Contains(t, page, `data-name="greeter"`)
}

func TestReadOnly(t *testing.T) {
	f := newFixture(t)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		res := f.get(t, m, "/")
		assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, m)
		assert.Equal(t, "GET, HEAD", res.Header.Get("Allow"))
	}
	res := f.get(t, http.MethodHead, "/")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	body, _ := io.ReadAll(res.Body)
	assert.Empty(t, body)
	assert.NotEmpty(t, res.Header.Get("Content-Length"))
	assert.Equal(t, http.StatusBadRequest, f.get(t, http.MethodGet, "/?limit=-1").StatusCode)
}

func TestPagesAndPrefix(t *testing.T) {
	reg := registry.NewMemoryRegistry()
	c := cache.New(reg, cache.WithLogger(quiet))
	defer c.Stop()
	for i := 0; i < 250; i++ {
		name := fmt.Sprintf("svc-%03d", i)
		require.NoError(t, reg.Register(&registry.Service{Name: name, Nodes: []*registry.Node{{Id: "n", Address: "127.0.0.1:1"}}}))
		_, err := c.GetService(name)
		require.NoError(t, err)
	}
	f := &fixture{c: c, h: admin.Handler(c)}

	var names []string
	query := ""
	for pages := 1; ; pages++ {
		st := f.status(t, query)
		for _, s := range st.Services {
			names = append(names, s.Name)
		}
		if st.Next == "" {
			assert.Equal(t, 3, pages)
			break
		}
		query = "&after=" + st.Next
	}
	require.Len(t, names, 250)
	assert.Equal(t, "svc-249", names[249])

	st := f.status(t, "&prefix=svc-1&limit=5")
	require.Len(t, st.Services, 5)
	assert.Equal(t, "svc-100", st.Services[0].Name)
	assert.Equal(t, "svc-104", st.Next)
	assert.Empty(t, st.Selectors)

	res := f.get(t, http.MethodGet, "/?prefix=svc-1&limit=5")
	body, _ := io.ReadAll(res.Body)
	assert.Contains(t, string(body), `href="?after=svc-104&amp;limit=5&amp;prefix=svc-1"`)
	assert.Equal(t, 5, strings.Count(string(body), `<tr class="service"`))
}

// quiet drops the cache's log lines.
var quiet = logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))

// downRegistry fails every call.
type downRegistry struct{ registry.Registry }

var errDown = errors.New("dial tcp 127.0.0.1:2379: connect: connection refused")

func (downRegistry) GetService(string, ...registry.GetOption) ([]*registry.Service, error) {
	return nil, errDown
}

func (downRegistry) Watch(...registry.WatchOption) (registry.Watcher, error) { return nil, errDown }

func TestRegistryDownIsShown(t *testing.T) {
	c := cache.New(downRegistry{registry.NewMemoryRegistry()}, cache.WithLogger(quiet))
	defer c.Stop()
	// Two calls that fail in a row, of two services or of a service and
	// the watch stream, take the registry down.
	for i := 0; !c.Stats().RegistryDown; i++ {
		_, err := c.GetService(fmt.Sprintf("svc-%d", i))
		require.Error(t, err)
	}
	f := &fixture{c: c, h: admin.Handler(c)}
	st := f.status(t, "")
	require.True(t, st.Cache.RegistryDown)
	require.False(t, st.Cache.RegistryDownSince.IsZero())
	assert.Contains(t, st.Cache.RegistryError, "connection refused")
	assert.Equal(t, uint64(1), st.Cache.Outages)
	require.NotEmpty(t, st.Services, "the services that failed are remembered")
	for _, s := range st.Services {
		assert.Empty(t, s.Source, "no data")
		assert.Contains(t, s.LastError, "connection refused")
		assert.False(t, s.LastErrorAt.IsZero())
		assert.Empty(t, s.NodeList)
	}

	res := f.get(t, http.MethodGet, "/")
	body, _ := io.ReadAll(res.Body)
	assert.Contains(t, string(body), `<span class="state down">down</span> since`)
	assert.Contains(t, string(body), "connection refused")
}
