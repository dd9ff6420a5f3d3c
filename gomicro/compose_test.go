package gomicro_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/transport"

	cache "github.com/regcache/cache"
)

// A status page or a metrics exporter built on the selector's Cache
// before service.Init shows the cache in use after the flags chose another
// registry, not the one the flags replaced.
func TestTheSelectorsCacheFollowsTheFlags(t *testing.T) {
	checkNoCacheLeft(t)
	withArgs(t)
	other := newCountingRegistry("regcache-other")
	registerRegistry(t, "regcache-other", other)
	t.Setenv("MICRO_REGISTRY", "regcache-other")

	reg := newCountingRegistry("regcache-test")
	s := newTestService(t, reg)
	sel, ok := s.Client().Options().Selector.(cache.Selector)
	require.True(t, ok)
	view := sel.Cache() // as an exporter holds it, built before Init
	s.Init()
	s.start(t)
	s.call(t, 20)

	assert.EqualValues(t, 20, view.Stats().Lookups, "the view reads the cache in use")
	assert.EqualValues(t, 1, other.gets.Load())
	svcs, err := view.Lookup("regcache.greeter")
	require.NoError(t, err)
	require.Len(t, svcs, 1)
	rows := view.Services("regcache.", "", 0)
	require.Len(t, rows, 1)
	assert.Equal(t, "regcache.greeter", rows[0].Name)
	assert.Zero(t, reg.gets.Load(), "the registry that the flags replaced")
}

// Stopping the view stops the cache, as the selector's Close does.
func TestTheSelectorsCacheStopsWithTheSelector(t *testing.T) {
	checkNoCacheLeft(t)
	reg := newCountingRegistry("regcache-test")
	s := newTestService(t, reg)
	sel := s.Client().Options().Selector.(cache.Selector)
	s.start(t)
	s.call(t, 1)
	sel.Cache().Stop()
	assert.Equal(t, cache.StreamStopped, sel.Stats().Cache.Stream)
}

// Selector options reach the selector of the one-line wiring: with
// WithEjectAfter(1), one failure to reach a node ejects it; by default
// (3 in a row) it does not.
func TestSelectorOptionsPassThroughTheWiring(t *testing.T) {
	// A dial that timed out: a refused connection would eject at once.
	unreachable := merrors.InternalServerError("go.micro.client", "connection error: dial tcp: i/o timeout")
	for _, tc := range []struct {
		name    string
		opts    []cache.Option
		ejected int
	}{
		{"default", nil, 0},
		{"WithEjectAfter(1)", []cache.Option{cache.WithSelectorOptions(cache.WithEjectAfter(1))}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoCacheLeft(t)
			s := newTestService(t, newCountingRegistry("regcache-test"), tc.opts...)
			s.start(t)
			s.call(t, 1)
			sel := s.Client().Options().Selector.(cache.Selector)
			// A second node, so that one may be ejected.
			svcs, err := sel.Cache().Lookup("regcache.greeter")
			require.NoError(t, err)
			node := svcs[0].Nodes[0]
			sel.Mark("regcache.greeter", node, unreachable)
			assert.Len(t, sel.Stats().Ejected, tc.ejected)
		})
	}
}

// An invalid selector option in the wiring is refused as New refuses any
// invalid option, with the same message that Validate returns.
func TestAnInvalidSelectorOptionIsNamed(t *testing.T) {
	opt := cache.WithSelectorOptions(cache.WithMaximumEjectedPercent(101))
	err := cache.Validate(opt)
	require.Error(t, err)
	assert.Equal(t, "regcache: WithSelectorOptions: WithMaximumEjectedPercent: 101 is outside [0, 100]", err.Error())
	assert.PanicsWithValue(t, err.Error(), func() { cache.New(registry.NewMemoryRegistry(), opt) })
}

// MICRO_SELECTOR=regcache chooses regcache's selector once the package is
// imported, as MICRO_REGISTRY chooses a registry whose package is: here
// in a service wired with micro.Registry, not gomicro.Registry.
func TestMicroSelectorRegcache(t *testing.T) {
	withArgs(t)
	t.Setenv("MICRO_SELECTOR", "regcache")
	global := selector.DefaultSelector
	t.Cleanup(func() { selector.DefaultSelector = global })
	reg := newCountingRegistry("regcache-test")
	tr := transport.NewHTTPTransport()
	log := &recordingLogger{}
	srv := server.NewServer(server.Name("regcache.greeter"), server.Address("127.0.0.1:0"),
		server.Transport(tr), server.WithLogger(log))
	require.NoError(t, srv.Handle(srv.NewHandler(Greeter{})))
	cl := client.NewClient(client.Transport(tr), client.PoolSize(0), client.WithLogger(log))
	svc := micro.NewService(micro.Server(srv), micro.Client(cl), micro.Broker(broker.NewMemoryBroker()),
		micro.Logger(log), micro.Name("regcache.greeter"), micro.Registry(reg))
	svc.Init()
	sel, ok := svc.Client().Options().Selector.(cache.Selector)
	require.True(t, ok, "the client's selector is %s", svc.Client().Options().Selector)
	t.Cleanup(func() { sel.Cache().Stop() })
	s := &testService{Service: svc, log: log}
	s.start(t)
	s.call(t, 10)
	assert.EqualValues(t, 10, sel.Stats().Cache.Lookups)
	assert.EqualValues(t, 1, reg.gets.Load())
	assert.EqualValues(t, 1, reg.watches.Load())
}

// A Select whose context ends while the registry is slow returns the
// context's error; it does not wait for the registry.
func TestSelectHonoursItsContext(t *testing.T) {
	slow := &blockingRegistry{Registry: registry.NewMemoryRegistry(), release: make(chan struct{}), called: make(chan struct{})}
	t.Cleanup(func() { close(slow.release) })
	c := cache.New(slow, cache.WithLogger(quiet{}))
	t.Cleanup(c.Stop)
	sel := cache.NewSelector(c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := sel.Select("svc", func(o *selector.SelectOptions) { o.Context = ctx })
		done <- err
	}()
	<-slow.called
	cancel()
	select {
	case err := <-done:
		assert.True(t, errors.Is(err, context.Canceled), "%v", err)
	case <-time.After(time.Minute):
		t.Fatal("Select did not return when its context ended")
	}
}

// blockingRegistry's GetService blocks until release is closed.
type blockingRegistry struct {
	registry.Registry
	release chan struct{}
	called  chan struct{}
}

func (b *blockingRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	close(b.called)
	<-b.release
	return nil, registry.ErrNotFound
}
