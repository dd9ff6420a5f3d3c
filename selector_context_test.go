package cache_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// withContext is the SelectOption that carries ctx; go-micro has none of
// its own, but its SelectOptions has the field.
func withContext(ctx context.Context) selector.SelectOption {
	return func(o *selector.SelectOptions) { o.Context = ctx }
}

// Select and Lookup give up waiting for the registry when the caller's
// context ends, over regcache's cache and over a Cache of another kind,
// and the refresh goes on for the next caller. A hit ignores a context that
// has ended: the data is there.
func TestSelectAndLookupHonourTheContext(t *testing.T) {
	for _, own := range []bool{true, false} {
		name := map[bool]string{true: "regcache's cache", false: "a wrapped cache"}[own]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newReg(selService("1", "a"))
				r.SetFault(fakereg.Fault{Latency: 10 * time.Second, IgnoreCtx: true})
				var c cache.Cache = cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
				defer c.Stop()
				if !own {
					c = &foreignCache{Cache: c}
				}
				sel := cache.NewSelector(c)

				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				start := time.Now()
				_, err := sel.Select("svc", withContext(ctx))
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Equal(t, time.Second, time.Since(start), "Select waited for its context only")

				ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
				defer cancel2()
				_, err = c.Lookup("svc", registry.GetContext(ctx2))
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Equal(t, 2*time.Second, time.Since(start))

				time.Sleep(9 * time.Second) // the refresh went on
				synctest.Wait()
				assert.Equal(t, 1, r.Calls("svc"))
				next, err := sel.Select("svc", withContext(ctx))
				require.NoError(t, err, "a hit with a context that has ended")
				node, err := next()
				require.NoError(t, err)
				assert.Equal(t, "a", node.Id)
			})
		})
	}
}
