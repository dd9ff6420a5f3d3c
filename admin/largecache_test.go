package admin_test

import (
	"fmt"
	"net/http"
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
