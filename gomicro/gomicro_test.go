package gomicro_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/transport"
	"go-micro.dev/v4/util/cmd"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/gomicro"
)

// countingRegistry is go-micro's memory registry under a name of the
// test's choice, counting the calls that a cache makes.
type countingRegistry struct {
	registry.Registry
	name          string
	watches, gets atomic.Int64
}

func newCountingRegistry(name string) *countingRegistry {
	return &countingRegistry{Registry: registry.NewMemoryRegistry(), name: name}
}

func (r *countingRegistry) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	r.watches.Add(1)
	return r.Registry.Watch(opts...)
}

func (r *countingRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	r.gets.Add(1)
	return r.Registry.GetService(name, opts...)
}

func (r *countingRegistry) String() string { return r.name }

// recordingLogger keeps the log lines, and the callers that go-micro's
// default logger would show for them.
type recordingLogger struct {
	mu      sync.Mutex
	lines   []string
	callers []string
}

func (l *recordingLogger) Init(...logger.Option) error                 { return nil }
func (l *recordingLogger) Options() logger.Options                     { return logger.Options{} }
func (l *recordingLogger) Fields(map[string]interface{}) logger.Logger { return l }
func (l *recordingLogger) String() string                              { return "recording" }
func (l *recordingLogger) Log(level logger.Level, v ...interface{}) {
	l.add(level.String() + " " + fmt.Sprint(v...))
}
func (l *recordingLogger) Logf(level logger.Level, format string, v ...interface{}) {
	// As go-micro's default logger: runtime.Caller(CallerSkipCount) in Logf.
	if _, file, _, ok := runtime.Caller(2); ok && strings.HasPrefix(format, "regcache:") {
		l.mu.Lock()
		l.callers = append(l.callers, file)
		l.mu.Unlock()
	}
	l.add(level.String() + " " + fmt.Sprintf(format, v...))
}
func (l *recordingLogger) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}
func (l *recordingLogger) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Greeter is the service's handler.
type Greeter struct{}

type Hello struct{ Name string }

func (Greeter) Hello(_ context.Context, req *Hello, rsp *Hello) error {
	rsp.Name = "hello " + req.Name
	return nil
}

// testService is a go-micro service "regcache.greeter" wired with
// gomicro.Registry(reg). Its server, client, broker and transport are its
// own, on 127.0.0.1, so that no global of go-micro's is changed and
// nothing multicasts.
type testService struct {
	micro.Service
	log *recordingLogger
}

func newTestService(t *testing.T, reg registry.Registry, opts ...cache.Option) *testService {
	t.Helper()
	tr := transport.NewHTTPTransport()
	br := broker.NewMemoryBroker()
	log := &recordingLogger{}
	srv := server.NewServer(
		server.Name("regcache.greeter"),
		server.Address("127.0.0.1:0"),
		server.Transport(tr),
		server.WithLogger(log),
	)
	require.NoError(t, srv.Handle(srv.NewHandler(Greeter{})))
	// PoolSize(0): go-micro's connection pool hangs under -race.
	cl := client.NewClient(client.Transport(tr), client.PoolSize(0), client.WithLogger(log))
	// micro.Name after micro.Server: it names the server that the
	// service has at that moment, which before micro.Server is go-micro's
	// default one (with go-micro v5, the server of the last test).
	svc := micro.NewService(
		micro.Server(srv),
		micro.Client(cl),
		micro.Broker(br),
		micro.Logger(log),
		micro.Name("regcache.greeter"),
		gomicro.Registry(reg, append([]cache.Option{cache.WithLogger(log)}, opts...)...),
	)
	return &testService{Service: svc, log: log}
}

// start starts the service's server; Cleanup stops the service, which
// stops the cache.
func (s *testService) start(t *testing.T) {
	t.Helper()
	lc := s.Service.(interface {
		Start() error
		Stop() error
	})
	require.NoError(t, lc.Start())
	t.Cleanup(func() { require.NoError(t, lc.Stop()) })
}

// call makes n RPCs to the service through its client.
func (s *testService) call(t *testing.T, n int) {
	t.Helper()
	cl := s.Client()
	for i := 0; i < n; i++ {
		var rsp Hello
		req := cl.NewRequest("regcache.greeter", "Greeter.Hello", &Hello{Name: "regcache"})
		require.NoError(t, cl.Call(context.Background(), req, &rsp))
		require.Equal(t, "hello regcache", rsp.Name)
	}
}

func (s *testService) stats(t *testing.T) cache.SelectorStats {
	t.Helper()
	st, ok := s.Client().Options().Selector.(cache.Selector)
	require.True(t, ok)
	return st.Stats()
}

// checkNoCacheLeft fails t if goroutines of regcache's cache outlive it.
func checkNoCacheLeft(t *testing.T) {
	t.Helper()
	count := func() int {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		n := 0
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "github.com/regcache/cache.(*cache)") {
				n++
			}
		}
		return n
	}
	before := count()
	t.Cleanup(func() {
		// Stop has returned; give exiting goroutines a moment to go.
		for deadline := time.Now().Add(2 * time.Second); count() > before && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		assert.LessOrEqual(t, count(), before, "goroutines of the cache left")
	})
}

// withArgs prepares a test for service.Init, which parses the command line
// and the environment with go-micro's command. It gives the command only the
// program name as arguments, since the test binary's own flags are not
// go-micro's, and restores the command's flags after the test: the command
// line library keeps a value read from the environment in the flag itself,
// which every later service.Init would then see.
func withArgs(t *testing.T) {
	t.Helper()
	args := os.Args
	os.Args = []string{"gomicro.test"}
	type saved struct {
		value, set reflect.Value
		was        []any
	}
	var flags []saved
	for _, f := range cmd.DefaultFlags {
		v := reflect.ValueOf(f)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			continue
		}
		value, set := v.Elem().FieldByName("Value"), v.Elem().FieldByName("HasBeenSet")
		if !value.IsValid() || !set.IsValid() || !value.CanSet() {
			continue
		}
		flags = append(flags, saved{value, set, []any{value.Interface(), set.Interface()}})
	}
	t.Cleanup(func() {
		os.Args = args
		for _, f := range flags {
			f.value.Set(reflect.ValueOf(f.was[0]))
			f.set.Set(reflect.ValueOf(f.was[1]))
		}
	})
}

// TestRegistryWiresOneCacheAndOneStream: RPCs go through regcache's
// selector, over one cache with one watch stream and one registry call,
// and go-micro's global selector is not touched.
func TestRegistryWiresOneCacheAndOneStream(t *testing.T) {
	checkNoCacheLeft(t)
	globalReg := selector.DefaultSelector.Options().Registry
	reg := newCountingRegistry("regcache-test")
	s := newTestService(t, reg)
	s.start(t)
	s.call(t, 20)

	sel := s.Client().Options().Selector
	assert.Equal(t, "regcache", sel.String())
	assert.EqualValues(t, 1, reg.watches.Load(), "watch streams")
	assert.EqualValues(t, 1, reg.gets.Load(), "registry lookups")
	assert.Same(t, reg, s.Options().Registry)
	assert.Same(t, reg, s.Server().Options().Registry)
	assert.Same(t, globalReg, selector.DefaultSelector.Options().Registry, "go-micro's global selector")
	st := s.stats(t)
	assert.EqualValues(t, 20, st.Cache.Lookups)
	assert.Empty(t, st.Ejected)
	assert.Contains(t, s.log.text(), "info regcache: the client selects nodes through regcache over the regcache-test registry")
	// Each line names regcache's code, not go-micro's that ran it.
	_, self, _, _ := runtime.Caller(0)
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	require.NotEmpty(t, s.log.callers)
	for _, file := range s.log.callers {
		dir := filepath.Dir(file)
		if dir != filepath.Dir(self) { // the cache's own lines
			assert.Equal(t, filepath.Dir(filepath.Dir(self)), dir)
		}
		assert.False(t, strings.HasSuffix(file, "_test.go"), file)
	}
}

// TestRegistrySurvivesInitAndFlags: service.Init parses flags and
// environment variables; regcache stays the client's selector, and go-micro's
// global selector is not touched.
func TestRegistrySurvivesInitAndFlags(t *testing.T) {
	t.Run("MICRO_REGISTRY names the registry given", func(t *testing.T) {
		checkNoCacheLeft(t)
		withArgs(t)
		made := registerRegistry(t, "regcache-test", newCountingRegistry("regcache-test"))
		t.Setenv("MICRO_REGISTRY", "regcache-test")
		t.Setenv("MICRO_SELECTOR", "regcache")
		globalReg := selector.DefaultSelector.Options().Registry

		reg := newCountingRegistry("regcache-test")
		s := newTestService(t, reg)
		s.Init()
		s.start(t)
		s.call(t, 20)

		assert.Zero(t, made.Load(), "the flags made a registry")
		assert.Same(t, reg, s.Options().Registry)
		assert.Equal(t, "regcache", s.Client().Options().Selector.String())
		assert.EqualValues(t, 1, reg.watches.Load(), "watch streams")
		assert.EqualValues(t, 1, reg.gets.Load(), "registry lookups")
		assert.Same(t, globalReg, selector.DefaultSelector.Options().Registry, "go-micro's global selector")
	})
	t.Run("MICRO_REGISTRY names another registry", func(t *testing.T) {
		checkNoCacheLeft(t)
		withArgs(t)
		other := newCountingRegistry("regcache-other")
		made := registerRegistry(t, "regcache-other", other)
		t.Setenv("MICRO_REGISTRY", "regcache-other")
		globalReg := selector.DefaultSelector.Options().Registry

		reg := newCountingRegistry("regcache-test")
		s := newTestService(t, reg)
		s.Init()
		s.start(t) // registers in the registry the flags chose
		s.call(t, 20)

		assert.EqualValues(t, 1, made.Load())
		assert.Same(t, other, s.Options().Registry)
		assert.Same(t, other, s.Server().Options().Registry)
		assert.Equal(t, "regcache", s.Client().Options().Selector.String())
		assert.EqualValues(t, 1, other.watches.Load(), "watch streams of the registry in use")
		assert.EqualValues(t, 1, other.gets.Load(), "registry lookups")
		assert.Zero(t, reg.watches.Load()+reg.gets.Load(), "calls to the registry given in code")
		assert.Same(t, globalReg, selector.DefaultSelector.Options().Registry, "go-micro's global selector")
		assert.Equal(t, selector.DefaultSelector, *cmd.DefaultCmd.Options().Selector,
			"the command's selector for later services")
		assert.EqualValues(t, 20, s.stats(t).Cache.Lookups)
		assert.Contains(t, s.log.text(), "info regcache: the client's registry is now regcache-other; regcache caches it")
	})
}

// TestRegistrySurvivesANewClient: --client or MICRO_CLIENT makes a new
// client in service.Init, with go-micro's selector; regcache's is put back.
func TestRegistrySurvivesANewClient(t *testing.T) {
	checkNoCacheLeft(t)
	withArgs(t)
	var made atomic.Int64
	cmd.DefaultClients["regcache-client"] = func(opts ...client.Option) client.Client {
		made.Add(1)
		return client.NewClient(append([]client.Option{
			client.Transport(transport.NewHTTPTransport()), client.PoolSize(0),
		}, opts...)...)
	}
	t.Cleanup(func() { delete(cmd.DefaultClients, "regcache-client") })
	t.Setenv("MICRO_CLIENT", "regcache-client")
	globalReg := selector.DefaultSelector.Options().Registry

	reg := newCountingRegistry("regcache-test")
	s := newTestService(t, reg)
	s.Init()
	s.start(t)
	s.call(t, 20)

	assert.EqualValues(t, 1, made.Load())
	assert.Equal(t, "regcache", s.Client().Options().Selector.String())
	assert.EqualValues(t, 1, reg.watches.Load(), "watch streams")
	assert.EqualValues(t, 1, reg.gets.Load(), "registry lookups")
	assert.Same(t, globalReg, selector.DefaultSelector.Options().Registry, "go-micro's global selector")
}

// registerRegistry makes name a registry that --registry and
// MICRO_REGISTRY can choose, returning r, and counts how often it is made.
func registerRegistry(t *testing.T, name string, r registry.Registry) *atomic.Int64 {
	t.Helper()
	var made atomic.Int64
	cmd.DefaultRegistries[name] = func(...registry.Option) registry.Registry {
		made.Add(1)
		return r
	}
	t.Cleanup(func() { delete(cmd.DefaultRegistries, name) })
	return &made
}

func TestRegistryPanicsOnNil(t *testing.T) {
	assert.PanicsWithValue(t, "regcache/gomicro: Registry: registry must not be nil", func() {
		gomicro.Registry(nil)
	})
}

// quiet discards log lines.
type quiet struct{}

func (quiet) Init(...logger.Option) error                   { return nil }
func (quiet) Options() logger.Options                       { return logger.Options{} }
func (q quiet) Fields(map[string]interface{}) logger.Logger { return q }
func (quiet) Log(logger.Level, ...interface{})              {}
func (quiet) Logf(logger.Level, string, ...interface{})     {}
func (quiet) String() string                                { return "quiet" }
