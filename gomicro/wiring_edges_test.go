package gomicro_test

import (
	"os"
	"os/exec"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/transport"
	"go-micro.dev/v4/util/cmd"

	merrors "go-micro.dev/v4/errors"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/gomicro"
)

// Attacks on the wiring's selector, its Cache view and --selector=regcache,
// through the public API only.

var errRefusedMicro = merrors.InternalServerError("go.micro.client", "connection error: dial tcp: connection refused")

// runChild runs the test named name in a child process with ATTACK36_CHILD
// set, and fails t if the child does not pass: for a failure that kills
// the process (a stack overflow is fatal, not a panic).
func runChild(t *testing.T, name string) {
	t.Helper()
	if os.Getenv("ATTACK36_CHILD") != "" {
		return
	}
	c := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	c.Env = append(os.Environ(), "ATTACK36_CHILD=1")
	out, err := c.CombinedOutput()
	if err != nil {
		if len(out) > 4000 {
			out = out[:4000]
		}
		t.Fatalf("the child died: %v\n%s", err, out)
	}
}

// Giving the client the selector's own Cache view as its registry (say, so
// that the server and the broker go through the cache as well) must not
// make the view read itself: Select and the view's Lookup recursed until
// the stack overflowed, which kills the process.
func TestViewGivenBackAsTheRegistry(t *testing.T) {
	if os.Getenv("ATTACK36_CHILD") == "" {
		runChild(t, t.Name())
		return
	}
	debug.SetMaxStack(16 << 20) // fail fast, and small, if it recurses
	reg := newCountingRegistry("regcache-test")
	s := newTestService(t, reg)
	sel := s.Client().Options().Selector.(cache.Selector)
	view := sel.Cache()
	t.Cleanup(view.Stop)
	require.NoError(t, s.Client().Init(client.Registry(view)))
	s.start(t)
	s.call(t, 3)
	_, err := view.Lookup("regcache.greeter")
	require.NoError(t, err)
	assert.EqualValues(t, 3, view.Stats().Lookups-1)

	// Two services, each given the other's view: the second one would
	// close the loop.
	a := newTestService(t, newCountingRegistry("regcache-a"))
	b := newTestService(t, newCountingRegistry("regcache-b"))
	aview := a.Client().Options().Selector.(cache.Selector).Cache()
	bview := b.Client().Options().Selector.(cache.Selector).Cache()
	t.Cleanup(aview.Stop)
	t.Cleanup(bview.Stop)
	require.NoError(t, a.Client().Init(client.Registry(bview)))
	require.NoError(t, b.Client().Init(client.Registry(aview)))
	_, err = aview.Lookup("nothing")
	assert.ErrorIs(t, err, registry.ErrNotFound)
	_, err = b.Client().Options().Selector.Select("nothing")
	assert.ErrorIs(t, err, selector.ErrNotFound)
}

// A regcache Cache given to gomicro.Registry is used as it is; the
// options given with it must still reach the selector, or be refused,
// not be dropped without a word: here WithEjectAfter(1) through
// WithSelectorOptions did nothing, and an invalid option was accepted.
func TestOptionsWithACacheAsTheRegistry(t *testing.T) {
	t.Run("selector options", func(t *testing.T) {
		checkNoCacheLeft(t)
		reg := newCountingRegistry("regcache-test")
		c := cache.New(reg, cache.WithLogger(quiet{}))
		t.Cleanup(c.Stop)
		s := newTestService(t, c, cache.WithSelectorOptions(cache.WithEjectAfter(1)))
		s.start(t)
		s.call(t, 1)
		sel := s.Client().Options().Selector.(cache.Selector)
		svcs, err := sel.Cache().Lookup("regcache.greeter")
		require.NoError(t, err)
		sel.Mark("regcache.greeter", svcs[0].Nodes[0], errRefusedMicro)
		assert.Len(t, sel.Stats().Ejected, 1, "WithEjectAfter(1) given with the cache")
	})
	t.Run("invalid option", func(t *testing.T) {
		c := cache.New(registry.NewMemoryRegistry(), cache.WithLogger(quiet{}))
		t.Cleanup(c.Stop)
		opt := cache.WithTTL(-1)
		want := cache.Validate(opt)
		require.Error(t, want)
		assert.Panics(t, func() { newTestService(t, c, opt) }, "an invalid option is refused as with a registry")
	})
}

// The selector's Init switching registries while the view and Select are
// read, and Close racing with it: no data race, every cache made is
// stopped, and the view keeps answering.
func TestConcurrentSwitchesAndView(t *testing.T) {
	checkNoCacheLeft(t)
	regs := []*countingRegistry{newCountingRegistry("a"), newCountingRegistry("b"), newCountingRegistry("c")}
	s := newTestService(t, regs[0])
	s.start(t) // registers regcache.greeter in regs[0]
	for _, r := range regs[1:] {
		svcs, err := regs[0].GetService("regcache.greeter")
		require.NoError(t, err)
		for _, svc := range svcs {
			require.NoError(t, r.Register(svc))
		}
	}
	sel := s.Client().Options().Selector.(cache.Selector)
	view := sel.Cache()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = view.Lookup("regcache.greeter")
				_ = view.Stats()
				_ = view.Services("", "", 0)
				if next, err := sel.Select("regcache.greeter"); err == nil {
					_, _ = next()
				}
				_ = view.String()
			}
		}()
	}
	for i := 0; i < 60; i++ {
		require.NoError(t, sel.Init(selector.Registry(regs[i%3])))
	}
	close(stop)
	wg.Wait()
	view.Stop()
	view.Stop() // twice: no hang, no double stop
	require.NoError(t, sel.Close())
	// After Close, a switch is recorded but no cache is made to leak.
	require.NoError(t, sel.Init(selector.Registry(regs[1])))
	_, err := view.Lookup("regcache.greeter")
	require.NoError(t, err)
}

// --selector=regcache and --registry together, in a service wired with
// micro.Registry and in one wired with gomicro.Registry: the client
// selects through regcache over the registry that the flags chose.
func TestFlagSelectorAndFlagRegistry(t *testing.T) {
	for _, wiring := range []string{"micro.Registry", "gomicro.Registry"} {
		t.Run(wiring, func(t *testing.T) {
			withArgs(t)
			other := newCountingRegistry("regcache-other2")
			registerRegistry(t, "regcache-other2", other)
			t.Setenv("MICRO_REGISTRY", "regcache-other2")
			t.Setenv("MICRO_SELECTOR", "regcache")
			global := selector.DefaultSelector
			globalReg := global.Options().Registry
			t.Cleanup(func() {
				selector.DefaultSelector = global
				_ = global.Init(selector.Registry(globalReg))
			})
			reg := newCountingRegistry("regcache-test")
			var s *testService
			if wiring == "gomicro.Registry" {
				s = newTestService(t, reg)
			} else {
				tr := transport.NewHTTPTransport()
				log := &recordingLogger{}
				srv := server.NewServer(server.Name("regcache.greeter"), server.Address("127.0.0.1:0"),
					server.Transport(tr), server.WithLogger(log))
				require.NoError(t, srv.Handle(srv.NewHandler(Greeter{})))
				cl := client.NewClient(client.Transport(tr), client.PoolSize(0), client.WithLogger(log))
				svc := micro.NewService(micro.Server(srv), micro.Client(cl), micro.Broker(broker.NewMemoryBroker()),
					micro.Logger(log), micro.Name("regcache.greeter"), micro.Registry(reg))
				s = &testService{Service: svc, log: log}
			}
			s.Init()
			sel, ok := s.Client().Options().Selector.(cache.Selector)
			require.True(t, ok, "the client's selector is %s", s.Client().Options().Selector)
			t.Cleanup(func() { sel.Cache().Stop() })
			s.start(t)
			s.call(t, 5)
			assert.EqualValues(t, 5, sel.Stats().Cache.Lookups)
			assert.EqualValues(t, 1, other.gets.Load(), "the registry the flags chose")
			assert.Zero(t, reg.gets.Load(), "the registry the flags replaced")
		})
	}
}

// --selector=regcache made with an invalid option still gives a working
// selector (go-micro's signature has no error), with the defaults.
func TestFlagSelectorWithAnInvalidOption(t *testing.T) {
	reg := newCountingRegistry("regcache-test")
	var sel selector.Selector
	require.NotPanics(t, func() {
		sel = cmd.DefaultSelectors["regcache"](selector.Registry(reg), cache.WithEjectAfter(-1))
	})
	t.Cleanup(sel.(cache.Selector).Cache().Stop)
	_, err := sel.Select("nothing")
	assert.ErrorIs(t, err, selector.ErrNotFound)
	_ = gomicro.Registry
}

// An Init whose option panics (nil, or a caller's own) leaves the selector
// usable once the panic is recovered (an HTTP handler that reconfigures
// it, say): its lock was left held, so the next Init, Close and the view's
// Stop (the service's AfterStop) hung for ever.
func TestPanickingInitOptionLeavesTheSelectorUsable(t *testing.T) {
	checkNoCacheLeft(t)
	reg := newCountingRegistry("regcache-test")
	s := newTestService(t, reg)
	sel := s.Client().Options().Selector.(cache.Selector)
	view := sel.Cache()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, opt := range []selector.Option{nil, func(*selector.Options) { panic("a caller's option") }} {
			func() {
				defer func() { _ = recover() }()
				_ = sel.Init(opt)
			}()
		}
		_ = sel.Init(selector.Registry(newCountingRegistry("regcache-other")))
		view.Stop()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Init and Stop hang after a recovered panic in Init")
	}
}
