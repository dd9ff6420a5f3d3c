package cache_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	cache "github.com/regcache/cache"
)

// BenchmarkStatsScrape takes Stats of a cache of 10 000 and 100 000
// services, as a metrics scrape does, while a reader looks up a name the
// registry does not have every 100 µs: each of those lookups takes the
// cache's lock. ns/op is one
// Stats call; max-lookup-ns/op is the slowest of the reader's lookups while
// Stats ran, the stall a scrape can cause. Stats reads counters only, so
// both stay the same whatever the number of services.
func BenchmarkStatsScrape(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("services=%d/impl=regcache", n), func(b *testing.B) {
			if n > 10_000 && testing.Short() {
				b.Skip("100 000 services: not with -short")
			}
			base, names := scaleServices(n, 3)
			c := cache.New(newScaleReg(base), cache.WithTTL(time.Hour), cache.WithLogger(benchLogger))
			defer c.Stop()
			if failed := scaleFill(c, names); failed > 0 {
				b.Fatalf("%d lookups failed", failed)
			}
			var scraping atomic.Bool
			var worst atomic.Int64
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				tick := time.NewTicker(100 * time.Microsecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					start := time.Now()
					_, _ = c.Lookup(absentService)
					if d := time.Since(start); scraping.Load() && int64(d) > worst.Load() {
						worst.Store(int64(d))
					}
				}
			}()
			defer func() { close(stop); <-done }()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				scraping.Store(true)
				st := c.Stats()
				scraping.Store(false)
				if st.Entries < n { // and the absent one, while its window is open
					b.Fatalf("%d entries for %d services", st.Entries, n)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(worst.Load()), "max-lookup-ns/op")
		})
	}
}
