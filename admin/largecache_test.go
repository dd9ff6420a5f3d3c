package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/admin"
)

// A cache of 100 000 services: a page is built while lookups go on. The
// longest wait of a lookup that takes the cache's lock (a cold name) is
// logged, not asserted.
func TestLargeCachePageLockWait(t *testing.T) {
	if testing.Short() {
		t.Skip("large")
	}
	reg := registry.NewMemoryRegistry()
	const n = 100000
	for i := 0; i < n; i++ {
		require.NoError(t, reg.Register(&registry.Service{Name: fmt.Sprintf("svc-%06d", i), Version: "1", Nodes: []*registry.Node{{Id: "n", Address: "1.2.3.4:1"}}}))
	}
	c := cache.New(reg, cache.WithLogger(quiet))
	t.Cleanup(c.Stop)
	for i := 0; i < n; i++ {
		_, err := c.GetService(fmt.Sprintf("svc-%06d", i))
		require.NoError(t, err)
	}
	h := admin.Handler(c)
	// measure runs cold lookups (each takes the cache's lock) while work
	// runs, and returns the longest and the number of lookups.
	measure := func(work func()) (time.Duration, int) {
		var stop atomic.Bool
		var longest atomic.Int64
		var count atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				start := time.Now()
				_, _ = c.GetService(fmt.Sprintf("cold-%d-%d", count.Load(), i)) // not found: takes the lock
				if d := time.Since(start); int64(d) > longest.Load() {
					longest.Store(int64(d))
				}
				count.Add(1)
			}
		}()
		work()
		stop.Store(true)
		wg.Wait()
		return time.Duration(longest.Load()), int(count.Load())
	}
	var pages time.Duration
	withPages, n1 := measure(func() {
		start := time.Now()
		for _, q := range []string{"/?format=json", "/", "/?limit=1000&after=svc-050000", "/?prefix=svc-09"} {
			res, _ := serve(t, h, http.MethodGet, q)
			require.Equal(t, http.StatusOK, res.StatusCode)
		}
		pages = time.Since(start)
	})
	idle, n2 := measure(func() { time.Sleep(pages) })
	t.Logf("4 pages of 100 000 services took %v; longest concurrent cold lookup %v (%d lookups); with no page, over as long: %v (%d lookups)",
		pages, withPages, n1, idle, n2)
}

// someServices is a registry that has the services named svc-*, each with
// one node, and no other.
type someServices struct{ registry.Registry }

func (someServices) GetService(name string, _ ...registry.GetOption) ([]*registry.Service, error) {
	if !strings.HasPrefix(name, "svc-") {
		return nil, registry.ErrNotFound
	}
	return []*registry.Service{{Name: name, Version: "1", Nodes: []*registry.Node{{Id: name + "-1", Address: "10.0.0.1:8080"}}}}, nil
}

// servicesCache is a cache of someServices holding svc-000000 to svc-<n-1>,
// with a retry window of a millisecond: a missing name is dropped soon
// after its lookup.
func servicesCache(t testing.TB, n int) cache.Cache {
	c := cache.New(someServices{registry.NewMemoryRegistry()}, cache.WithLogger(quiet),
		cache.WithTTL(time.Hour), cache.WithMinimumRetryInterval(time.Millisecond))
	t.Cleanup(c.Stop)
	for i := 0; i < n; i++ {
		_, err := c.Lookup(fmt.Sprintf("svc-%06d", i))
		require.NoError(t, err)
	}
	return c
}

// churn looks up ever-new missing names, which sort before the services,
// each dropped once its retry window closes, until the test ends.
func churn(t *testing.T, c cache.Cache) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	var seq atomic.Int64
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				_, _ = c.GetService(fmt.Sprintf("miss-%09d", seq.Add(1)))
			}
		}()
	}
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
		t.Logf("%d lookups of missing names meanwhile", seq.Load())
	})
}

// A page answers, full, while clients look up ever-new missing names, each
// dropped after its retry window, and paging by next_query visits every
// service once. It holds off a page that never answered at 100 000
// services under that churn (3 of 3 runs): Services picked again after
// each pass that lost dropped names, and the new names kept it going. The
// time per page is logged, not asserted.
func TestPageDuringChurn(t *testing.T) {
	t.Run("1000 services, paged through", func(t *testing.T) {
		const n, limit = 1000, 100
		c := servicesCache(t, n)
		h := admin.Handler(c)
		churn(t, c)
		var seen []string
		var slowest time.Duration
		query := "?" + url.Values{"format": {"json"}, "limit": {fmt.Sprint(limit)}}.Encode()
		for pages := 0; query != ""; pages++ {
			require.Less(t, pages, 1000, "paging does not end")
			start := time.Now()
			res, body := serve(t, h, http.MethodGet, "/"+query)
			slowest = max(slowest, time.Since(start))
			require.Equal(t, http.StatusOK, res.StatusCode)
			var st statusJSON
			require.NoError(t, json.Unmarshal([]byte(body), &st))
			if st.NextQuery != "" {
				require.Len(t, st.Services, limit, "a page before the last is full")
			}
			for _, s := range st.Services {
				if strings.HasPrefix(s.Name, "svc-") {
					seen = append(seen, s.Name)
				}
			}
			query = st.NextQuery
		}
		require.Len(t, seen, n, "every service, once")
		for i, name := range seen {
			require.Equal(t, fmt.Sprintf("svc-%06d", i), name)
		}
		t.Logf("%d services: slowest page of %d %v", n, limit, slowest)
	})
	t.Run("100000 services", func(t *testing.T) {
		if testing.Short() || raceEnabled {
			t.Skip("100 000 services: not with -short, nor under the race detector, which makes the figure meaningless")
		}
		c := servicesCache(t, 100_000)
		h := admin.Handler(c)
		churn(t, c)
		for _, q := range []string{"/?format=json", "/", "/?format=json&limit=1000&after=svc-050000"} {
			var slowest time.Duration
			for i := 0; i < 5; i++ {
				start := time.Now()
				res, body := serve(t, h, http.MethodGet, q)
				slowest = max(slowest, time.Since(start))
				require.Equal(t, http.StatusOK, res.StatusCode)
				if strings.Contains(q, "format=json") {
					var st statusJSON
					require.NoError(t, json.Unmarshal([]byte(body), &st))
					require.Len(t, st.Services, st.Limit, "a full page")
					require.NotEmpty(t, st.Next)
				}
			}
			t.Logf("100 000 services: slowest of 5 pages %s: %v", q, slowest)
		}
	})
}

// A page allocates for its rows, not for the cache: the same at 100 000
// services as at 1 000 (20 000 with -short or under the race detector).
func TestPageAllocatesForItsRowsNotTheCache(t *testing.T) {
	large := 100_000
	if testing.Short() || raceEnabled {
		large = 20_000
	}
	type cost struct{ allocs, bytes float64 }
	handlers := map[int]http.Handler{1000: admin.Handler(servicesCache(t, 1000)), large: admin.Handler(servicesCache(t, large))}
	measure := func(n int, target string) cost {
		h := handlers[n]
		page := func() {
			if res, _ := serve(t, h, http.MethodGet, target); res.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d", target, res.StatusCode)
			}
		}
		allocs := testing.AllocsPerRun(10, page)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := 0; i < 10; i++ {
			page()
		}
		runtime.ReadMemStats(&after)
		return cost{allocs, float64(after.TotalAlloc-before.TotalAlloc) / 10}
	}
	for _, target := range []string{"/?format=json", "/", "/?format=json&limit=500&after=svc-000100"} {
		small, big := measure(1000, target), measure(large, target)
		t.Logf("%s: %.0f allocations, %.0f KB a page at 1 000 services; %.0f, %.0f KB at %d",
			target, small.allocs, small.bytes/1024, big.allocs, big.bytes/1024, large)
		if big.allocs > small.allocs*1.1+50 || big.bytes > small.bytes*1.25+64<<10 {
			t.Errorf("%s: a page of %d services costs %.0f allocations and %.0f KB, of 1 000 %.0f and %.0f KB",
				target, large, big.allocs, big.bytes/1024, small.allocs, small.bytes/1024)
		}
	}
}
