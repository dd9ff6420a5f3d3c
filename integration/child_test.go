package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	etcdreg "github.com/go-micro/plugins/v4/registry/etcd"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	cache "github.com/regcache/cache"
	lossless "github.com/regcache/cache/etcd"
	"github.com/regcache/cache/watchscope"
)

// A child is this test binary run again as a client process of its own, so
// that its goroutines, memory and CPU time are the client's alone: the
// etcd server, the proxies and whatever writes to etcd stay in the parent.
// TestMain runs runChild instead of the tests when childEnv is set.
const childEnv = "REGCACHE_IT_CHILD"

// childConfig tells a child what client to be.
type childConfig struct {
	// Mode is the client: "regcache", "regcache-prefix" (its Watch
	// without the cache's watch scope: one watch of the whole registry,
	// with the watch filter), "regcache-unfiltered" (without the scope
	// and the filter), "regcache-perservice" (with
	// WithWatchPerService) or "gomicro" (a cache that looks up every name
	// in Names), "stream" (one unfiltered watch, events
	// for other names discarded), "perservice" (one watch per name),
	// "etcdwatch" (one unfiltered watch of etcd's client, its events
	// counted and never decoded) or "idle" (an etcd client and nothing
	// else).
	Mode    string
	Addr    string
	Names   []string
	TTL     time.Duration
	Timeout time.Duration
	// Readers look up names at random, one a millisecond each, from the
	// "start" command on.
	Readers int
	// Registry is the etcd registry under the client: "" for go-micro's
	// plugin, "lossless" for github.com/regcache/cache/etcd.
	Registry string
	// CPUProfile, if set, is where the child writes a pprof CPU profile,
	// from the "profile" command to the end of stdin.
	CPUProfile string
}

// childReport is what a child tells its parent: each report has the
// figures so far.
type childReport struct {
	// The fill's duration, and the goroutines and heap before the client
	// was created and at the measure command, each after a GC.
	Fill                              time.Duration
	GoroutinesBefore, GoroutinesAfter int
	HeapAllocBefore, HeapAllocAfter   uint64
	HeapInuseBefore, HeapInuse        uint64
	// Cumulative figures.
	CPU                  time.Duration // user and system time of the process
	Gets, Lists, Watches int64         // registry calls
	Lookups, Failed      int64         // by the readers
	// Events the watchers' Next delivered, of all services and of the
	// services in Names (for regcache, from its Stats).
	EventsAll, Events int64
}

// A child reads commands on stdin, one a line, and answers each with a line
// on stdout: childPrefix, a kind, and a childReport in JSON. It answers
// "started" once its client exists, and then "fill" (look up every name)
// with "filled", "measure" with "measured", "report" with "report", and
// "start" (start the readers) and "profile" (start the CPU profile of
// CPUProfile) with nothing. At the end of stdin it stops and sends a last
// "report".
const childPrefix = "REGCACHE-CHILD "

func runChild(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "child: bad config: %v\n", err)
		return 2
	}
	var outMu sync.Mutex
	send := func(kind string, r childReport) {
		b, _ := json.Marshal(r)
		outMu.Lock()
		fmt.Printf("%s%s %s\n", childPrefix, kind, b)
		outMu.Unlock()
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	var reg registry.Registry
	switch cfg.Registry {
	case "":
		reg = etcdreg.NewRegistry(registry.Addrs(cfg.Addr), registry.Timeout(cfg.Timeout), etcdreg.LogConfig(&zc))
	case "lossless":
		reg = lossless.NewRegistry(registry.Addrs(cfg.Addr), registry.Timeout(cfg.Timeout), lossless.LogConfig(&zc))
	default:
		fmt.Fprintf(os.Stderr, "child: unknown registry %q\n", cfg.Registry)
		return 2
	}
	calls := &callCounter{Registry: reg}

	var r childReport
	r.GoroutinesBefore, r.HeapAllocBefore, r.HeapInuseBefore = memory()
	var (
		get               func(string, ...registry.GetOption) ([]*registry.Service, error)
		stop              []func()
		events, eventsAll atomic.Int64
		rc                cache.Cache
	)
	consume := func(w registry.Watcher, keep map[string]bool) {
		for {
			res, err := w.Next()
			if err != nil {
				return
			}
			eventsAll.Add(1)
			if keep != nil && (res.Service == nil || !keep[res.Service.Name]) {
				continue
			}
			events.Add(1)
		}
	}
	switch cfg.Mode {
	case "regcache":
		c := cache.New(calls, cache.WithTTL(cfg.TTL), cache.WithLogger(stderrLogger{}))
		get, stop, rc = c.GetService, append(stop, c.Stop), c
	case "regcache-prefix":
		c := cache.New(unscoped{calls, false}, cache.WithTTL(cfg.TTL), cache.WithLogger(stderrLogger{}))
		get, stop, rc = c.GetService, append(stop, c.Stop), c
	case "regcache-unfiltered":
		c := cache.New(unscoped{calls, true}, cache.WithTTL(cfg.TTL), cache.WithLogger(stderrLogger{}))
		get, stop, rc = c.GetService, append(stop, c.Stop), c
	case "regcache-perservice":
		c := cache.New(calls, cache.WithTTL(cfg.TTL), cache.WithLogger(stderrLogger{}), cache.WithWatchPerService())
		get, stop, rc = c.GetService, append(stop, c.Stop), c
	case "gomicro":
		c := gmcache.New(calls, gmcache.WithTTL(cfg.TTL))
		get, stop = c.GetService, append(stop, c.Stop)
	case "stream":
		keep := map[string]bool{}
		for _, n := range cfg.Names {
			keep[n] = true
		}
		w, err := calls.Watch()
		if err != nil {
			fmt.Fprintf(os.Stderr, "child: watch: %v\n", err)
			return 1
		}
		go consume(w, keep)
		stop = append(stop, w.Stop)
	case "perservice":
		for _, n := range cfg.Names {
			w, err := calls.Watch(registry.WatchService(n))
			if err != nil {
				fmt.Fprintf(os.Stderr, "child: watch %s: %v\n", n, err)
				return 1
			}
			go consume(w, nil)
			stop = append(stop, w.Stop)
		}
	case "etcdwatch":
		// The floor of any client of one unfiltered stream: etcd's
		// client receives every event, and nothing decodes them.
		client := etcdClientOf(reg)
		if client == nil {
			fmt.Fprintln(os.Stderr, "child: the registry's etcd client cannot be read")
			return 1
		}
		ctx, cancel := context.WithCancel(context.Background())
		ch := client.Watch(ctx, "/micro/registry/", clientv3.WithPrefix(), clientv3.WithPrevKV())
		go func() {
			for resp := range ch {
				eventsAll.Add(int64(len(resp.Events)))
			}
		}()
		stop = append(stop, cancel)
	case "idle":
	default:
		fmt.Fprintf(os.Stderr, "child: unknown mode %q\n", cfg.Mode)
		return 2
	}
	send("started", r)
	var (
		lookups, failed atomic.Int64
		done            = make(chan struct{})
		wg              sync.WaitGroup
	)
	report := func() childReport {
		r.CPU = cpuTime()
		g := calls.Snapshot()
		r.Gets, r.Lists, r.Watches = g.Gets, g.Lists, g.Watches
		r.Lookups, r.Failed, r.Events, r.EventsAll = lookups.Load(), failed.Load(), events.Load(), eventsAll.Load()
		if rc != nil {
			st := rc.Stats()
			r.Events = int64(st.EventsApplied + st.EventsInvalidating)
			r.EventsAll = r.Events + int64(st.EventsIgnored)
		}
		return r
	}
	profiling := false
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "fill":
			if get != nil {
				start := time.Now()
				for _, n := range cfg.Names {
					if _, err := get(n); err != nil {
						fmt.Fprintf(os.Stderr, "child: fill: %s: %v\n", n, err)
						return 1
					}
				}
				r.Fill = time.Since(start)
			}
			send("filled", r)
		case "measure":
			r.GoroutinesAfter, r.HeapAllocAfter, r.HeapInuse = memory()
			send("measured", r)
		case "start":
			for i := 0; i < cfg.Readers && get != nil; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-done:
							return
						case <-time.After(time.Millisecond):
						}
						lookups.Add(1)
						if _, err := get(cfg.Names[rand.IntN(len(cfg.Names))]); err != nil {
							failed.Add(1)
						}
					}
				}()
			}
		case "profile":
			if cfg.CPUProfile == "" || profiling {
				break
			}
			f, err := os.Create(cfg.CPUProfile)
			if err == nil {
				err = pprof.StartCPUProfile(f)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "child: cpu profile: %v\n", err)
				return 1
			}
			profiling = true
			defer f.Close()
		case "report":
			send("report", report())
		}
	}
	if profiling {
		pprof.StopCPUProfile()
	}
	close(done)
	wg.Wait()
	for _, f := range stop {
		f()
	}
	send("report", report())
	return 0
}

// unfiltered is a registry whose Watch drops the cache's watch filter
// from its context, so that its watcher decodes every event, as before
// the cache had one.
type unscoped struct {
	registry.Registry
	unfiltered bool
}

func (u unscoped) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	var o registry.WatchOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.Context != nil {
		ctx := o.Context
		if u.unfiltered {
			ctx = watchscope.WithFilter(ctx, nil)
		}
		opts = append(opts, registry.WatchContext(noScope{ctx}))
	}
	return u.Registry.Watch(opts...)
}

// noScope is a context that hides the cache's watch scope.
type noScope struct{ context.Context }

func (n noScope) Value(key any) any {
	v := n.Context.Value(key)
	if _, ok := v.(watchscope.Scope); ok {
		return nil
	}
	return v
}

// memory returns the goroutines, the live heap and the heap in use, after a
// collection.
func memory() (goroutines int, live, inuse uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapAlloc, ms.HeapInuse
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stderrLogger is the go-micro logger of a child: its parent shows what it
// writes.
type stderrLogger struct{}

func (stderrLogger) Init(...logger.Option) error                 { return nil }
func (stderrLogger) Options() logger.Options                     { return logger.Options{Level: logger.InfoLevel} }
func (stderrLogger) Fields(map[string]interface{}) logger.Logger { return stderrLogger{} }
func (stderrLogger) String() string                              { return "stderr" }
func (stderrLogger) Log(level logger.Level, v ...interface{}) {
	fmt.Fprintf(os.Stderr, "%s [%s] %s\n", time.Now().Format("15:04:05.000"), level, fmt.Sprint(v...))
}
func (stderrLogger) Logf(level logger.Level, format string, v ...interface{}) {
	if level < logger.InfoLevel {
		return
	}
	fmt.Fprintf(os.Stderr, "%s [%s] %s\n", time.Now().Format("15:04:05.000"), level, fmt.Sprintf(format, v...))
}

// child is the parent's handle on a child process.
type child struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	mu    sync.Mutex
	errs  bytes.Buffer
}

// startChild starts a child and waits until its client exists.
func startChild(t *testing.T, name string, cfg childConfig) *child {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, name: name, lines: make(chan string, 16)}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	c.cmd.Stderr = lockedWriter{&c.mu, &c.errs}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", name, err)
	}
	go func() {
		defer close(c.lines)
		s := bufio.NewScanner(out)
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			if line, ok := strings.CutPrefix(s.Text(), childPrefix); ok {
				c.lines <- line
			}
		}
	}()
	t.Cleanup(func() { c.close() })
	c.read("started", time.Minute)
	return c
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (c *child) read(kind string, limit time.Duration) childReport {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("child %s ended before its %s report: %s", c.name, kind, c.stderr())
		}
		var r childReport
		if k, b, _ := strings.Cut(line, " "); k != kind || json.Unmarshal([]byte(b), &r) != nil {
			c.t.Fatalf("child %s: %q, want a %s report", c.name, line, kind)
		}
		return r
	case <-time.After(limit):
		c.t.Fatalf("child %s: no %s report within %v: %s", c.name, kind, limit, c.stderr())
	}
	return childReport{}
}

func (c *child) command(cmd string) {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.in, cmd); err != nil {
		c.t.Fatalf("child %s: %s: %v", c.name, cmd, err)
	}
}

// Fill has the child look up every name, and returns once it has.
func (c *child) Fill() childReport {
	c.t.Helper()
	c.command("fill")
	return c.read("filled", 5*time.Minute)
}

// Measure has the child measure its goroutines and heap after a GC.
func (c *child) Measure() childReport {
	c.t.Helper()
	c.command("measure")
	return c.read("measured", time.Minute)
}

// Start starts the child's readers.
func (c *child) Start() { c.t.Helper(); c.command("start") }

// Profile starts the child's CPU profile, if its config names a file.
func (c *child) Profile() { c.t.Helper(); c.command("profile") }

// Report returns the child's cumulative figures.
func (c *child) Report() childReport {
	c.t.Helper()
	c.command("report")
	return c.read("report", 30*time.Second)
}

// Stop stops the child's readers and client, and returns its last figures.
func (c *child) Stop() childReport {
	c.t.Helper()
	c.in.Close()
	r := c.read("report", 30*time.Second)
	if err := c.cmd.Wait(); err != nil {
		c.t.Errorf("child %s: %v: %s", c.name, err, c.stderr())
	}
	return r
}

func (c *child) stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errs.String()
}

// close ends the child if the test did not: stdin closed, then killed if
// it has not exited within 10 s.
func (c *child) close() {
	c.in.Close()
	done := make(chan struct{})
	go func() {
		for range c.lines {
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
	c.cmd.Wait() //nolint:errcheck // already reported by Stop, or the test failed
	if s := c.stderr(); s != "" {
		c.t.Logf("child %s wrote:\n%s", c.name, strings.TrimSpace(s))
	}
}
