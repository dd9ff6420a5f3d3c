package cache_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// A Cache that is not regcache's own (a user's wrapper) gets the same
// passive health, from the list that each service's last Select met.

// foreignCache is a Cache that is not regcache's own type: a user's
// wrapper around regcache's cache (for metrics, tracing, a fallback to a
// second cache, ...). NewSelector accepts any Cache. If list is set,
// Lookup answers it instead of the wrapped cache (a wrapper that merges or
// re-slices lists, or serves from one of several replicas).
type foreignCache struct {
	cache.Cache
	list atomic.Pointer[[]*registry.Service]
}

func (f *foreignCache) Lookup(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	if p := f.list.Load(); p != nil && name == "svc" {
		return *p, nil
	}
	return f.Cache.Lookup(name, opts...)
}

func (f *foreignCache) answer(svcs []*registry.Service) { f.list.Store(&svcs) }

// newForeign returns regcache's cache over a registry of "svc" with the
// nodes, and the same cache wrapped.
func newForeign(t *testing.T, ids ...string) (*fakereg.Registry, cache.Cache, *foreignCache) {
	t.Helper()
	r := newReg(selService("1", ids...))
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	t.Cleanup(c.Stop)
	return r, c, &foreignCache{Cache: c}
}

// With a Cache that is not regcache's own, failures reported before the
// service's next Select (the retries of in-flight calls whose Select ran
// while the service had no state: exactly the calls that meet a zone outage
// first) count against the list the last Select met: the share caps them,
// and Stats().Ejected shows them.
//
// Regression: such a failure had no list to count the share on and was of
// a node "off the list", ejected with no cap and hidden from Stats. With 3
// of 4 nodes failing, 3 were ejected (cap: 2), every Next in flight sent
// all its retries to the one node left, and Stats showed no ejection.
func TestForeignCacheFailuresBeforeTheNextSelectAreCapped(t *testing.T) {
	for _, own := range []bool{true, false} {
		name := "wrapped cache"
		if own {
			name = "regcache's cache (control)"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, c, f := newForeign(t, "n1", "n2", "n3", "n4")
				var cc cache.Cache = f
				if own {
					cc = c
				}
				sel := cache.NewSelector(cc, cache.WithEjectionTime(time.Hour, time.Hour))
				next, err := sel.Select("svc") // in-flight calls: Selected before any failure
				require.NoError(t, err)
				for _, id := range []string{"n1", "n2", "n3"} { // their attempts fail
					for k := 0; k < 3; k++ {
						sel.Mark("svc", listedNode(id), errRefused)
					}
				}
				st := selStats(t, sel)
				picks := pickCounts(t, next, 400)
				assert.Len(t, st.Ejected, 2, "Stats().Ejected of 4 listed nodes with 3 failing, cap 50 %%: %s (Ejections %d, Refused %d)", ejectedRows(st), st.Ejections, st.Refused)
				assert.Positive(t, picks["n1"]+picks["n2"]+picks["n3"], "picks of the failing nodes: with the cap at 2 of 4, one stays in rotation (picks %v)", picks)
				_, err = sel.Select("svc") // the next call
				require.NoError(t, err)
				t.Logf("after the next Select: Ejected %s", ejectedRows(selStats(t, sel)))
			})
		})
	}
}

// With a Cache that is not regcache's own, a list with a nil node (a
// registry plugin that leaves holes, a wrapper that filters in place) is
// served after a failure as before it.
//
// Regression: once the service had passive health state, every Select
// panicked indexing the whole list (nodeKey(nil)), so one connection
// failure turned a service with a bad entry into a panic on every call.
func TestForeignCacheNilNodeDoesNotPanicSelect(t *testing.T) {
	_, _, f := newForeign(t, "n1", "n2")
	svc := selService("1", "n1", "n2")
	svc.Nodes = append(svc.Nodes, nil)
	f.answer([]*registry.Service{svc})
	sel := cache.NewSelector(f)
	_, err := sel.Select("svc")
	require.NoError(t, err, "Select without state")
	sel.Mark("svc", listedNode("n1"), errRefused) // one connection failure
	assert.NotPanics(t, func() {
		next, err := sel.Select("svc")
		if err == nil {
			for i := 0; i < 20; i++ {
				_, _ = next()
			}
		}
	}, "Select of a list with a nil node, after one failure Mark")
}

// A foreign Cache whose lists alternate between an old and a new one, under
// concurrent Selects, Nexts, Marks (trial copies included), Resets and
// Inits: no race (run it with -race), no panic, and once every node answers
// again nothing stays ejected.
func TestForeignCacheConcurrentChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, f := newForeign(t, "n1", "n2", "n3", "n4")
		sel := cache.NewSelector(f, cache.WithEjectionTime(time.Second, 4*time.Second))
		lists := [][]*registry.Service{
			{selService("1", "n1", "n2", "n3", "n4")},
			{selService("1", "n1", "n2")},
			{selService("1", "n2", "n3", "n4")},
		}
		f.answer(lists[0])
		var wg sync.WaitGroup
		end := time.Now().Add(time.Minute)
		for g := 0; g < 6; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 3))
				for time.Now().Before(end) {
					switch rng.IntN(10) {
					case 0:
						f.answer(lists[rng.IntN(len(lists))])
					case 1:
						sel.Reset("svc")
					case 2:
						_ = sel.Init(cache.WithMaximumEjectedPercent([]int{0, 50, 100}[rng.IntN(3)]))
					default:
						next, err := sel.Select("svc")
						if err != nil {
							break
						}
						n, err := next()
						if err != nil || n == nil {
							t.Errorf("next: %v %v", n, err)
							return
						}
						var e error
						if n.Id == "n3" || n.Id == "n4" {
							e = errRefused
						}
						time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
						sel.Mark("svc", n, e)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}(g)
		}
		wg.Wait()
		time.Sleep(10 * time.Second)
		f.answer(lists[0])
		for i := 1; i <= 4; i++ {
			sel.Mark("svc", listedNode(fmt.Sprintf("n%d", i)), nil)
		}
		_, err := sel.Select("svc")
		require.NoError(t, err)
		assert.Empty(t, selStats(t, sel).Ejected)
	})
}
