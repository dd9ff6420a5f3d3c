package cache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// Attacks on Validate, WithSelectorOptions, Lookup's options and Select's
// context, through the public API only.

// A selector option that panics when applied (a user's own option, or one
// from a plugin that calls context.WithValue on a nil Options.Context) is
// an error from Validate, as a cache option that panics is; New panics with
// that message.
func TestValidateTurnsAPanickingSelectorOptionIntoAnError(t *testing.T) {
	type key struct{}
	// The shape of many plugins' options: context.WithValue on
	// o.Context, which panics when it is nil.
	plugin := func(o *selector.Options) { o.Context = context.WithValue(o.Context, key{}, 1) }
	opt := cache.WithSelectorOptions(plugin)
	var err error
	require.NotPanics(t, func() { err = cache.Validate(opt) }, "Validate must not panic")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WithSelectorOptions")
	assert.PanicsWithValue(t, err.Error(), func() { cache.New(registry.NewMemoryRegistry(), opt) })
}

// A nil selector.Option inside WithSelectorOptions is named by Validate
// and New alike.
func TestNilSelectorOptionInWithSelectorOptions(t *testing.T) {
	opt := cache.WithSelectorOptions(cache.WithEjectAfter(1), nil)
	err := cache.Validate(opt)
	require.Error(t, err)
	assert.PanicsWithValue(t, err.Error(), func() { cache.New(registry.NewMemoryRegistry(), opt) })
}

// Order does not matter: a maximum below a minimum given later is
// refused by both, and accepted by neither.
func TestRetryIntervalOrder(t *testing.T) {
	opts := []cache.Option{cache.WithMaximumRetryInterval(time.Second), cache.WithMinimumRetryInterval(10 * time.Second)}
	err := cache.Validate(opts...)
	require.Error(t, err)
	assert.PanicsWithValue(t, err.Error(), func() { cache.New(registry.NewMemoryRegistry(), opts...) })
	// The reverse order gives the same answer.
	err2 := cache.Validate(opts[1], opts[0])
	require.Error(t, err2)
	assert.Equal(t, err.Error(), err2.Error())
}

// One WithSelectorOptions value given to two caches, each with options of
// its own after it: neither sees the other's (append aliasing of the
// list that the first option built).
func TestSelectorOptionsDoNotAlias(t *testing.T) {
	reg := registry.NewMemoryRegistry()
	require.NoError(t, reg.Register(selService("1", "n1", "n2", "n3")))
	shared := cache.WithSelectorOptions(cache.WithEjectAfter(2), cache.WithEjectAfter(3), cache.WithEjectAfter(5))
	c1 := cache.New(reg, shared, cache.WithSelectorOptions(cache.WithEjectAfter(1)), cache.WithLogger(benchLogger))
	t.Cleanup(c1.Stop)
	c2 := cache.New(reg, shared, cache.WithSelectorOptions(cache.WithEjectAfter(0)), cache.WithLogger(benchLogger))
	t.Cleanup(c2.Stop)
	for _, tc := range []struct {
		c       cache.Cache
		ejected int
	}{{c1, 1}, {c2, 0}} {
		sel := cache.NewSelector(tc.c)
		svcs, err := tc.c.Lookup("svc")
		require.NoError(t, err)
		sel.Mark("svc", svcs[0].Nodes[0], errRefused)
		assert.Len(t, sel.Stats().Ejected, tc.ejected)
	}
}

// NewSelector's own options come after the cache's, so they win.
func TestNewSelectorsOwnOptionsWin(t *testing.T) {
	reg := registry.NewMemoryRegistry()
	require.NoError(t, reg.Register(selService("1", "n1", "n2", "n3")))
	c := cache.New(reg, cache.WithSelectorOptions(cache.WithEjectAfter(0)))
	t.Cleanup(c.Stop)
	sel := cache.NewSelector(c, cache.WithEjectAfter(1))
	svcs, err := c.Lookup("svc")
	require.NoError(t, err)
	sel.Mark("svc", svcs[0].Nodes[0], errRefused)
	assert.Len(t, sel.Stats().Ejected, 1)
}

// A hit is served whatever the context: one already cancelled, fresh or
// stale data alike.
func TestCancelledContextStillGetsAHit(t *testing.T) {
	reg := registry.NewMemoryRegistry()
	require.NoError(t, reg.Register(selService("1", "n1")))
	c := cache.New(reg, cache.WithLogger(benchLogger))
	t.Cleanup(c.Stop)
	sel := cache.NewSelector(c)
	_, err := c.Lookup("svc")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	svcs, err := c.Lookup("svc", registry.GetContext(ctx))
	require.NoError(t, err)
	require.Len(t, svcs, 1)
	next, err := sel.Select("svc", func(o *selector.SelectOptions) { o.Context = ctx })
	require.NoError(t, err)
	n, err := next()
	require.NoError(t, err)
	assert.Equal(t, "n1", n.Id)
}

// The hit path allocates nothing without options (Select: the Next it
// returns). With a context, the caller's variadic slice and the options
// struct that the option writes to escape: at most two more.
func TestHitAllocations(t *testing.T) {
	reg := registry.NewMemoryRegistry()
	require.NoError(t, reg.Register(selService("1", "n1")))
	c := cache.New(reg, cache.WithLogger(benchLogger), cache.WithTTL(time.Hour))
	t.Cleanup(c.Stop)
	sel := cache.NewSelector(c)
	_, err := c.Lookup("svc")
	require.NoError(t, err)
	ctx := context.Background()
	getCtx := registry.GetContext(ctx)
	withCtx := selector.SelectOption(func(o *selector.SelectOptions) { o.Context = ctx })
	for _, tc := range []struct {
		name string
		max  float64
		fn   func()
	}{
		{"Lookup", 0, func() { _, _ = c.Lookup("svc") }},
		{"Lookup(GetContext)", 2, func() { _, _ = c.Lookup("svc", getCtx) }},
		{"Select", 1, func() { _, _ = sel.Select("svc") }},
		{"Select(Context)", 3, func() { _, _ = sel.Select("svc", withCtx) }},
	} {
		got := testing.AllocsPerRun(200, tc.fn)
		t.Logf("%s: %v allocs", tc.name, got)
		assert.LessOrEqual(t, got, tc.max, tc.name)
	}
}

// downReg is a memory registry whose watch always fails and whose
// GetService fails while down is set.
type downReg struct {
	registry.Registry
	down atomic.Bool
}

func (r *downReg) Watch(...registry.WatchOption) (registry.Watcher, error) {
	return nil, errors.New("no watch here")
}

func (r *downReg) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	if r.down.Load() {
		return nil, errors.New("registry down")
	}
	return r.Registry.GetService(name, opts...)
}

// Stale data is a hit too: with the registry down and the caller's
// context already done, Lookup and Select serve it, whether the retry
// window is open (a refresh starts) or closed.
func TestCancelledContextStillGetsStaleData(t *testing.T) {
	// The memory registry's pruning goroutine never ends: made outside
	// the bubble.
	reg := &downReg{Registry: registry.NewMemoryRegistry()}
	require.NoError(t, reg.Register(selService("1", "n1")))
	synctest.Test(t, func(t *testing.T) {
		c := cache.New(reg, cache.WithLogger(benchLogger), cache.WithTTL(time.Second),
			cache.WithMinimumRetryInterval(time.Second), cache.WithProbeInterval(0))
		defer c.Stop()
		sel := cache.NewSelector(c)
		_, err := c.Lookup("svc")
		require.NoError(t, err)
		reg.down.Store(true)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		withCtx := func(o *selector.SelectOptions) { o.Context = ctx }
		for i := 0; i < 4; i++ {
			time.Sleep(1500 * time.Millisecond) // stale, retry window open
			svcs, err := c.Lookup("svc", registry.GetContext(ctx))
			require.NoError(t, err, "round %d", i)
			require.Len(t, svcs, 1)
			next, err := sel.Select("svc", withCtx)
			require.NoError(t, err, "round %d", i)
			_, err = next()
			require.NoError(t, err)
			synctest.Wait()
		}
		assert.NotZero(t, c.Stats().StaleServes)
	})
}
