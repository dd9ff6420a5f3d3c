package cache_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/server"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// selService is version v of service "svc" with one node per id. Every node
// is labelled with its zone, and version "2" has an extra endpoint.
func selService(version string, ids ...string) *registry.Service {
	s := &registry.Service{Name: "svc", Version: version}
	s.Endpoints = []*registry.Endpoint{{Name: "Svc.Get"}}
	if version == "2" {
		s.Endpoints = append(s.Endpoints, &registry.Endpoint{Name: "Svc.Put"})
	}
	for _, id := range ids {
		zone := "a"
		if id[len(id)-1]%2 == 0 {
			zone = "b"
		}
		s.Nodes = append(s.Nodes, &registry.Node{
			Id: id, Address: id + ":8080", Metadata: map[string]string{"zone": zone},
		})
	}
	return s
}

// selSetup returns a cache over a registry holding two versions of "svc"
// (v1: n1, n2; v2: n3, n4, n5), a selector over it and the registry.
func selSetup(t *testing.T, opts ...selector.Option) (*fakereg.Registry, cache.Cache, selector.Selector) {
	t.Helper()
	r := newReg(selService("1", "n1", "n2"), selService("2", "n3", "n4", "n5"))
	checkNoLeak(t)
	c := cache.New(r, cache.WithLogger(benchLogger), cache.WithMinimumRetryInterval(time.Hour))
	t.Cleanup(c.Stop)
	return r, c, cache.NewSelector(c, opts...)
}

// selDraw calls next n times and returns the node ids in order.
func selDraw(t *testing.T, next selector.Next, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		node, err := next()
		require.NoError(t, err)
		ids[i] = node.Id
	}
	return ids
}

func selSet(ids []string) map[string]bool {
	set := map[string]bool{}
	for _, id := range ids {
		set[id] = true
	}
	return set
}

func TestSelectorDefaultStrategyPicksEveryNodeOfEveryVersion(t *testing.T) {
	_, _, sel := selSetup(t)
	next, err := sel.Select("svc")
	require.NoError(t, err)
	// Each draw is uniform over 5 nodes: the chance that 1000 draws miss one
	// is below 1e-78.
	assert.Equal(t, selSet([]string{"n1", "n2", "n3", "n4", "n5"}), selSet(selDraw(t, next, 1000)))
}

// The usual service has one version: its nodes are picked uniformly too.
func TestSelectorDefaultStrategyPicksEveryNodeOfOneVersion(t *testing.T) {
	checkNoLeak(t)
	r := newReg(selService("1", "a", "b", "c", "d"))
	c := cache.New(r, cache.WithLogger(benchLogger))
	defer c.Stop()
	next, err := cache.NewSelector(c).Select("svc")
	require.NoError(t, err)
	counts := map[string]int{}
	for _, id := range selDraw(t, next, 4000) {
		counts[id]++
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		assert.InDelta(t, 1000, counts[id], 200, "%s picked %d of 4000 times", id, counts[id])
	}
}

func TestSelectorGoMicroStrategies(t *testing.T) {
	t.Run("RoundRobin through WithStrategy visits each node once per cycle", func(t *testing.T) {
		_, _, sel := selSetup(t)
		next, err := sel.Select("svc", selector.WithStrategy(selector.RoundRobin))
		require.NoError(t, err)
		ids := selDraw(t, next, 10)
		assert.ElementsMatch(t, []string{"n1", "n2", "n3", "n4", "n5"}, ids[:5])
		assert.Equal(t, ids[:5], ids[5:])
	})
	t.Run("Random through SetStrategy", func(t *testing.T) {
		_, _, sel := selSetup(t, selector.SetStrategy(selector.Random))
		next, err := sel.Select("svc")
		require.NoError(t, err)
		assert.Equal(t, selSet([]string{"n1", "n2", "n3", "n4", "n5"}), selSet(selDraw(t, next, 1000)))
	})
	t.Run("Init replaces the default strategy", func(t *testing.T) {
		_, _, sel := selSetup(t)
		require.NoError(t, sel.Init(selector.SetStrategy(selector.RoundRobin)))
		next, err := sel.Select("svc")
		require.NoError(t, err)
		ids := selDraw(t, next, 10)
		assert.Equal(t, ids[:5], ids[5:])
	})
}

func TestSelectorGoMicroFilters(t *testing.T) {
	tests := []struct {
		name   string
		filter selector.Filter
		want   []string
	}{
		{"FilterVersion", selector.FilterVersion("2"), []string{"n3", "n4", "n5"}},
		{"FilterLabel", selector.FilterLabel("zone", "b"), []string{"n2", "n4"}},
		{"FilterEndpoint", selector.FilterEndpoint("Svc.Put"), []string{"n3", "n4", "n5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c, sel := selSetup(t)
			shared, err := c.Lookup("svc")
			require.NoError(t, err)
			before := lookupFingerprint(shared)

			next, err := sel.Select("svc",
				selector.WithFilter(tt.filter),
				selector.WithStrategy(selector.RoundRobin))
			require.NoError(t, err)
			ids := selDraw(t, next, len(tt.want))
			assert.ElementsMatch(t, tt.want, ids)

			// The filter built new slices: the cache's snapshot, which
			// every other Select shares, is as it was.
			assert.Equal(t, before, lookupFingerprint(shared))
			again, err := c.Lookup("svc")
			require.NoError(t, err)
			assert.Same(t, &shared[0], &again[0], "the snapshot was replaced")
		})
	}
}

func TestSelectorErrorsMapLikeGoMicros(t *testing.T) {
	t.Run("not found", func(t *testing.T) {
		r, _, sel := selSetup(t)
		_, err := sel.Select("missing")
		assert.ErrorIs(t, err, selector.ErrNotFound)
		assert.ErrorIs(t, err, registry.ErrNotFound)
		assert.NotErrorIs(t, err, cache.ErrThrottled)
		assert.Equal(t, "not found: the registry has no node of this service", err.Error())
		assert.EqualValues(t, 1, r.TotalCalls())
		_, again := sel.Select("missing") // within the hour-long retry interval
		assert.Equal(t, err.Error(), again.Error(), "the registry's answer again, without a call")
		assert.EqualValues(t, 1, r.TotalCalls())
	})
	t.Run("throttled, nothing cached", func(t *testing.T) {
		r, _, sel := selSetup(t)
		r.SetFault(fakereg.Fault{Err: errBenchRegistry})
		_, _ = sel.Select("missing")
		_, err := sel.Select("missing") // within the hour-long retry interval
		assert.ErrorIs(t, err, selector.ErrNotFound)
		assert.ErrorIs(t, err, cache.ErrThrottled)
		// The message says why, and until when.
		assert.Regexp(t, `^not found: regcache: service "missing": registry lookup throttled, nothing cached; next attempt allowed in 59m5\d`, err.Error())
		assert.EqualValues(t, 1, r.TotalCalls(), "the throttle let a call through")
	})
	t.Run("no node left after filtering", func(t *testing.T) {
		_, _, sel := selSetup(t)
		_, err := sel.Select("svc", selector.WithFilter(selector.FilterVersion("3")))
		assert.Same(t, selector.ErrNoneAvailable, err)
	})
	t.Run("registry failure, nothing cached", func(t *testing.T) {
		r, _, sel := selSetup(t)
		r.SetFault(fakereg.Fault{Err: errBenchRegistry})
		_, err := sel.Select("svc")
		assert.ErrorIs(t, err, errBenchRegistry)
		assert.NotErrorIs(t, err, selector.ErrNotFound)
	})
	t.Run("empty name", func(t *testing.T) {
		r, _, sel := selSetup(t)
		_, err := sel.Select("")
		assert.ErrorIs(t, err, cache.ErrEmptyName)
		// go-micro's cache answers not found for the empty name.
		assert.ErrorIs(t, err, selector.ErrNotFound)
		assert.ErrorIs(t, err, registry.ErrNotFound)
		assert.Zero(t, r.TotalCalls())
	})
}

// TestSelectorErrorReachesTheGoMicroClient shows the reason in the error
// of a real go-micro call: the client matches selector.ErrNotFound with
// errors.Is and puts the message in its own.
func TestSelectorErrorReachesTheGoMicroClient(t *testing.T) {
	reg := registry.NewMemoryRegistry()
	checkNoLeak(t)
	c := cache.New(reg, cache.WithLogger(benchLogger), cache.WithMinimumRetryInterval(time.Hour))
	t.Cleanup(c.Stop)
	cl := selClient(reg, cache.NewSelector(c))

	_, err := selCall(cl)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "service regcache.greeter: not found: the registry has no node of this service")
	_, err = selCall(cl) // within the window: the registry's answer again
	require.Error(t, err)
	assert.Contains(t, err.Error(), "service regcache.greeter: not found: the registry has no node of this service")
}

func TestSelectorReadsTheCacheWithoutACacheOfItsOwn(t *testing.T) {
	r, c, sel := selSetup(t)
	for i := 0; i < 100; i++ {
		next, err := sel.Select("svc")
		require.NoError(t, err)
		_, err = next()
		require.NoError(t, err)
	}
	assert.EqualValues(t, 1, r.TotalCalls(), "registry calls")

	// A watch event reaches the next Select with no delay of its own.
	sendEvent(r, "delete", selService("1", "n1", "n2"))
	barrier(r)
	next, err := sel.Select("svc", selector.WithStrategy(selector.RoundRobin))
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"n3", "n4", "n5"}, selDraw(t, next, 3))
	svcs, err := c.Lookup("svc")
	require.NoError(t, err)
	assert.Len(t, svcs, 1)

	// One watch stream, the cache's: the selector opened none.
	assert.EqualValues(t, 1, len(r.WatchCalls()), "watch streams")
	assert.EqualValues(t, 1, r.TotalCalls(), "registry calls")
}

func TestSelectorOptionsAndNoOps(t *testing.T) {
	_, c, sel := selSetup(t)
	assert.Equal(t, "regcache", sel.String())
	o := sel.Options()
	assert.Same(t, c, o.Registry)
	assert.NotNil(t, o.Strategy)

	// A registry given to Init, as go-micro's client.Registry does, is
	// recorded but Select keeps reading the cache.
	other := registry.NewMemoryRegistry()
	require.NoError(t, sel.Init(selector.Registry(other)))
	assert.Same(t, other, sel.Options().Registry)
	assert.NotNil(t, sel.Options().Strategy)
	_, err := sel.Select("svc")
	require.NoError(t, err)

	sel.Mark("svc", &registry.Node{Id: "n1"}, errors.New("boom"))
	sel.Reset("svc")
	require.NoError(t, sel.Close())
	require.NoError(t, sel.Close())
	// Close leaves the cache, which the selector does not own, running.
	svcs, err := c.Lookup("svc")
	require.NoError(t, err)
	assert.Len(t, svcs, 2)
}

func TestNewSelectorPanicsOnNilCache(t *testing.T) {
	assert.PanicsWithValue(t, "regcache: NewSelector: cache must not be nil", func() {
		cache.NewSelector(nil)
	})
}

// SelGreeter is the handler of the RPC test.
type SelGreeter struct{}

type SelHello struct{ Name string }

func (SelGreeter) Hello(_ context.Context, req *SelHello, rsp *SelHello) error {
	rsp.Name = "hello " + req.Name
	return nil
}

// selServer starts a go-micro server of SelGreeter, version "1", on
// 127.0.0.1 with go-micro's in-memory registry and broker, and returns the
// registry, where it is registered. Cleanup stops it.
func selServer(tb testing.TB) registry.Registry {
	tb.Helper()
	reg := registry.NewMemoryRegistry()
	srv := server.NewServer(
		server.Name("regcache.greeter"),
		server.Version("1"),
		server.Address("127.0.0.1:0"),
		server.Registry(reg),
		server.Broker(broker.NewMemoryBroker(broker.Registry(reg))),
		server.WithLogger(benchLogger),
	)
	require.NoError(tb, srv.Handle(srv.NewHandler(SelGreeter{})))
	require.NoError(tb, srv.Start())
	tb.Cleanup(func() { _ = srv.Stop() })
	return reg
}

// selClient returns a go-micro client over reg that selects with sel.
func selClient(reg registry.Registry, sel selector.Selector) client.Client {
	// Selector before Registry: client.Registry passes the registry to
	// the selector in place at that point, and it must be sel.
	return client.NewClient(
		client.Selector(sel),
		client.Registry(reg),
		client.Broker(broker.NewMemoryBroker(broker.Registry(reg))),
		client.WithLogger(benchLogger),
	)
}

// selCall makes one SelGreeter.Hello RPC.
func selCall(cl client.Client, opts ...client.CallOption) (string, error) {
	var rsp SelHello
	req := cl.NewRequest("regcache.greeter", "SelGreeter.Hello", &SelHello{Name: "regcache"})
	err := cl.Call(context.Background(), req, &rsp, opts...)
	return rsp.Name, err
}

// TestSelectorServesAGoMicroClient makes real RPCs through a go-micro client
// whose selector is regcache's, over go-micro's in-memory registry and
// broker.
func TestSelectorServesAGoMicroClient(t *testing.T) {
	reg := selServer(t)
	checkNoLeak(t)
	c := cache.New(reg, cache.WithLogger(benchLogger))
	t.Cleanup(c.Stop)
	sel := cache.NewSelector(c)
	cl := selClient(reg, sel)
	assert.Same(t, reg, sel.Options().Registry)

	call := func(opts ...client.CallOption) (string, error) { return selCall(cl, opts...) }
	got, err := call()
	require.NoError(t, err)
	assert.Equal(t, "hello regcache", got)

	got, err = call(client.WithSelectOption(selector.WithFilter(selector.FilterVersion("1"))))
	require.NoError(t, err)
	assert.Equal(t, "hello regcache", got)

	_, err = call(client.WithSelectOption(selector.WithFilter(selector.FilterVersion("2"))))
	require.Error(t, err, "no node of version 2")
	assert.Contains(t, err.Error(), selector.ErrNoneAvailable.Error())
}

// lookupFingerprint renders everything reachable from svcs, reading every
// field, so that comparing two fingerprints shows any change, and the race
// detector sees any concurrent write.
func lookupFingerprint(svcs []*registry.Service) string {
	var b []byte
	md := func(m map[string]string) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for _, k := range keys {
			b = append(b, k+"="+m[k]+","...)
		}
		b = append(b, '}')
	}
	var value func(v *registry.Value)
	value = func(v *registry.Value) {
		if v == nil {
			b = append(b, "nil"...)
			return
		}
		b = append(b, "("+v.Name+":"+v.Type...)
		for _, sub := range v.Values {
			value(sub)
		}
		b = append(b, ')')
	}
	for _, s := range svcs {
		b = append(b, "["+s.Name+"@"+s.Version...)
		md(s.Metadata)
		for _, e := range s.Endpoints {
			b = append(b, " ep:"+e.Name...)
			value(e.Request)
			value(e.Response)
			md(e.Metadata)
		}
		for _, n := range s.Nodes {
			b = append(b, " node:"+n.Id+"@"+n.Address...)
			md(n.Metadata)
		}
		b = append(b, ']')
	}
	return string(b)
}
