// Command etcd runs the demo's storm simulation (see the demo command)
// against a real etcd server embedded in the process, through go-micro's
// etcd registry plugin, then a restart scenario that compares the plugin
// with github.com/regcache/cache/etcd (restart.go): `make demo-etcd`, or
// `go run ./etcd` in demo/.
//
// etcd listens on loopback ports picked at run time and keeps its data in
// a temporary directory, removed at the end. The outage is real: the
// server is stopped for its length and restarted on the same ports and
// data directory. Latency and the capacity limit are injected in front of
// each client's plugin, as in the in-memory demo.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	etcdreg "github.com/go-micro/plugins/v4/registry/etcd"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/regcache/cache/demo/internal/storm"
)

func main() {
	cfg, opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2) // parseFlags has said why
	}
	// go-micro's cache and the plugin log every failure; keep the tables
	// readable.
	logger.DefaultLogger = logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))

	start := time.Now()
	fmt.Fprintln(os.Stderr, "starting an embedded etcd...")
	b, err := startEtcd(opts.timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-etcd:", err)
		os.Exit(1)
	}
	// Ctrl-C: stop etcd and remove its data directory.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		b.Close()
		os.Exit(130)
	}()

	rep, err := storm.Run(cfg, b, os.Stderr, isTerminal(os.Stderr))
	stormTook := time.Since(start)
	var restart *restartReport
	if err == nil && opts.restart.Trials > 0 {
		restart, err = runRestart(b, opts.restart, os.Stderr)
	}
	took := time.Since(start)
	b.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-etcd:", err)
		os.Exit(1)
	}
	storm.Write(os.Stdout, rep)
	if restart != nil {
		writeRestart(os.Stdout, restart)
	}
	if opts.figures != "" {
		command := strings.TrimSpace("cd demo && go run ./etcd " + strings.Join(os.Args[1:], " "))
		if err := writeFigures(opts.figures, restartFigures(command, restart, took, stormTook)); err != nil {
			fmt.Fprintln(os.Stderr, "demo-etcd:", err)
			os.Exit(1)
		}
		if abs, err := filepath.Abs(opts.figures); err == nil {
			opts.figures = abs
		}
		fmt.Fprintln(os.Stderr, "demo-etcd: the restart scenario's figures are in", opts.figures)
	}
	if opts.png != "" {
		if err := storm.SavePicture(opts.png, rep); err != nil {
			fmt.Fprintln(os.Stderr, "demo-etcd:", err)
			os.Exit(1)
		}
		if abs, err := filepath.Abs(opts.png); err == nil {
			opts.png = abs
		}
		fmt.Fprintln(os.Stderr, "demo-etcd: the picture of the storm's counts is in", opts.png)
	}
}

// options are demo-etcd's own flags.
type options struct {
	timeout time.Duration // the storm's plugin request timeout
	restart restartConfig
	png     string // where the storm's picture goes; "" for none
	figures string // where the restart scenario's figures go; "" for none
}

// defaultTimeout is the storm's plugin request timeout, -timeout.
const defaultTimeout = time.Second

// parseFlags parses and validates the command line: the demo's flags,
// -timeout and the restart scenario's. It tells stderr what is wrong,
// naming the flag.
func parseFlags(args []string, stderr io.Writer) (storm.Config, options, error) {
	cfg := storm.DefaultConfig()
	opts := options{timeout: defaultTimeout, restart: defaultRestartConfig(), png: "regcache-demo-etcd.png"}
	fs := flag.NewFlagSet("demo-etcd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.Flags(fs)
	fs.DurationVar(&opts.timeout, "timeout", opts.timeout, "request timeout of go-micro's etcd plugin in the storm (registry.Timeout; the plugin's default is 5s)")
	fs.StringVar(&opts.png, "png", opts.png, "where to write the picture of the storm's counts, a PNG (\"\": none)")
	fs.IntVar(&opts.restart.Trials, "restart-trials", opts.restart.Trials, "trials of the restart scenario after the storm (0: none)")
	fs.DurationVar(&opts.restart.Outage, "restart-outage", opts.restart.Outage, "how long etcd is down in each trial of the restart scenario")
	fs.StringVar(&opts.figures, "figures", "", "write the restart scenario's figures to this JSON file, the source of demo/README.md's (`make figures-demo-etcd`; every flag but -png at its default)")
	if err := fs.Parse(args); err != nil {
		return cfg, opts, err // the flag package has printed it, with the usage
	}
	err := cfg.Validate()
	switch {
	case err != nil:
	case opts.timeout <= 0 || opts.timeout > time.Minute:
		err = fmt.Errorf("-timeout must be above 0 and at most 1m, got %v", opts.timeout)
	case opts.restart.Trials < 0 || opts.restart.Trials > 100:
		err = fmt.Errorf("-restart-trials must be between 0 and 100, got %d", opts.restart.Trials)
	case opts.restart.Outage <= 0 || opts.restart.Outage > time.Minute:
		err = fmt.Errorf("-restart-outage must be above 0 and at most 1m, got %v", opts.restart.Outage)
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case opts.figures != "" && !atDefaults(cfg, opts):
		err = errors.New("-figures writes the figures that demo/README.md shows, which are of the defaults: leave every flag but -png at its default")
	}
	if err != nil {
		fmt.Fprintf(stderr, "demo-etcd: %v (see -h)\n", err)
	}
	return cfg, opts, err
}

// atDefaults says whether the storm and the restart scenario run as they
// do without flags.
func atDefaults(cfg storm.Config, opts options) bool {
	d := storm.DefaultConfig()
	return cfg.Duration == d.Duration && cfg.Concurrency == d.Concurrency && cfg.Services == d.Services &&
		cfg.Latency == d.Latency && cfg.Slow == d.Slow && cfg.Capacity == d.Capacity &&
		cfg.RPCRate == d.RPCRate && cfg.OutageEnd == d.OutageEnd &&
		opts.timeout == defaultTimeout && opts.restart == defaultRestartConfig()
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// etcdBackend is a single-member etcd server embedded in the process, with
// go-micro's etcd registry plugin as the client.
type etcdBackend struct {
	dir       string
	clientURL url.URL
	peerURL   url.URL
	timeout   time.Duration
	writer    registry.Registry // registers the services

	mu sync.Mutex
	e  *embed.Etcd
}

// registerTTL is the lease of every registration: longer than any run, as
// nothing renews it. (The plugin v1.2.0 panics on Register without one.)
const registerTTL = time.Hour

func startEtcd(timeout time.Duration) (*etcdBackend, error) {
	dir, err := os.MkdirTemp("", "regcache-demo-etcd-")
	if err != nil {
		return nil, err
	}
	b := &etcdBackend{dir: dir, timeout: timeout}
	for _, u := range []*url.URL{&b.clientURL, &b.peerURL} {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		*u = url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	}
	if err := b.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	w, err := b.Client()
	if err != nil {
		b.Close()
		return nil, err
	}
	b.writer = w
	return b, nil
}

// freePort asks the kernel for a free loopback port. It is free again
// when the listener closes, so another process could take it first; etcd
// then fails to start, and the demo says so.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start starts the server, or restarts it on the same ports and data
// directory, and waits until it serves.
func (b *etcdBackend) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	cfg := embed.NewConfig()
	cfg.Name = "regcache-demo"
	cfg.Dir = b.dir
	cfg.ListenClientUrls = []url.URL{b.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{b.clientURL}
	cfg.ListenPeerUrls = []url.URL{b.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{b.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	cfg.UnsafeNoFsync = true // a throwaway server; keeps a busy disk out of the timings
	// A single member elects itself after an election timeout (1 s by
	// default, randomized up to twice that): a tenth of it keeps the
	// restart's own time out of the recovery.
	cfg.TickMs, cfg.ElectionMs = 10, 100

	// After Close the ports are ours again, but the kernel may take a
	// moment to release them.
	var (
		e   *embed.Etcd
		err error
	)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		e, err = embed.StartEtcd(cfg)
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return errors.New("etcd did not become ready within 30s")
	}
	b.e = e
	return nil
}

func (b *etcdBackend) Describe() string {
	return fmt.Sprintf("embedded etcd 3.5 on %s through go-micro's etcd plugin (timeout %v), a client per cache", b.clientURL.Host, b.timeout)
}

func (b *etcdBackend) OutageNote() string {
	return fmt.Sprintf("etcd is stopped, and a registry call fails after the plugin's %v timeout (the cold instances' plugin clients were created before the outage: the plugin cannot connect while etcd is down)", b.timeout)
}

// Client returns a new plugin instance with its own etcd client.
func (b *etcdBackend) Client() (registry.Registry, error) {
	zc := zap.NewProductionConfig()
	// The etcd client logs every retry during the outage; only worse
	// than errors reaches the terminal.
	zc.Level = zap.NewAtomicLevelAt(zap.DPanicLevel)
	return etcdreg.NewRegistry(
		registry.Addrs(b.clientURL.Host),
		registry.Timeout(b.timeout),
		etcdreg.LogConfig(&zc),
	), nil
}

func (b *etcdBackend) Register(s *registry.Service) error {
	return retry(func() error { return b.writer.Register(s, registry.RegisterTTL(registerTTL)) })
}

func (b *etcdBackend) Deregister(s *registry.Service) error {
	return retry(func() error { return b.writer.Deregister(s) })
}

// retry retries f for up to 30 s: after a restart, an etcd client takes a
// while to reconnect.
func retry(f func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *etcdBackend) Refuses() bool { return false }

// WritesWhileDown is false: nothing can be written to a stopped etcd, so
// the instances that restarted during the outage register right after it.
func (b *etcdBackend) WritesWhileDown() bool { return false }

func (b *etcdBackend) Down() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.e != nil {
		b.e.Close()
		b.e = nil
	}
	return nil
}

// Up restarts etcd, and gives the writer a new plugin instance: the old
// one's etcd client would reconnect only on gRPC's backoff.
func (b *etcdBackend) Up() error {
	if err := b.start(); err != nil {
		return err
	}
	w, err := b.Client()
	if err != nil {
		return err
	}
	b.writer = w
	return nil
}

func (b *etcdBackend) Close() {
	b.Down()
	os.RemoveAll(b.dir)
}
