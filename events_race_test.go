package cache

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// Two caches over services with equal metadata, refreshed every fake
// second while events (repeats and changes) and lookups run concurrently:
// run with -race for the prints made outside the lock and the shared maps
// table. After a last event per service, each cache serves it, and the
// caches' goroutines are gone after Stop.
func TestConcurrentEventsRefreshesAndSharedMaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		const n = 8
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprint("s", i)
			f.SetNodes(names[i], "a", "b")
		}
		caches := make([]*cache, 2)
		for i := range caches {
			caches[i], _ = newTestCache(t, f, WithTTL(time.Second), WithMinimumRetryInterval(0))
		}
		for _, c := range caches {
			for _, name := range names {
				_, err := c.GetService(name)
				require.NoError(t, err)
			}
		}
		synctest.Wait()
		streams := f.Streams()
		require.Len(t, streams, 2)

		var wg sync.WaitGroup
		for _, s := range streams {
			wg.Add(1)
			go func(s *fakereg.Stream) {
				defer wg.Done()
				for round := 0; round < 40; round++ {
					for _, name := range names {
						ev := svc(name, "1", "a")
						if round%3 == 0 {
							ev.Nodes[0].Metadata = map[string]string{"id": "a", "round": fmt.Sprint(round % 2)}
						}
						s.Send("update", ev)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}(s)
		}
		for _, c := range caches {
			wg.Add(1)
			go func(c *cache) {
				defer wg.Done()
				for round := 0; round < 40; round++ {
					for _, name := range names {
						got, err := c.GetService(name)
						if err == nil && len(got) > 0 {
							for _, n := range got[0].Nodes {
								_ = n.Metadata["id"]
							}
						}
					}
					time.Sleep(100 * time.Millisecond)
				}
				_ = c.Stats()
			}(c)
		}
		wg.Wait()
		synctest.Wait()
		for _, s := range streams {
			for _, name := range names {
				last := svc(name, "1", "a")
				last.Nodes[0].Metadata = map[string]string{"id": "a", "final": "yes"}
				deliver(s, "update", last)
			}
		}
		for ci, c := range caches {
			for _, name := range names {
				got, err := c.GetService(name)
				require.NoError(t, err)
				var a *registry.Node
				for _, n := range got[0].Nodes {
					if n.Id == "a" {
						a = n
					}
				}
				require.NotNil(t, a, "cache %d %s", ci, name)
				assert.Equal(t, map[string]string{"id": "a", "final": "yes"}, a.Metadata, "cache %d %s", ci, name)
			}
			checkByName(t, c)
		}
		for _, c := range caches {
			c.Stop()
		}
		synctest.Wait()
		assert.Zero(t, cacheGoroutines(), "goroutines left after Stop")
	})
}
