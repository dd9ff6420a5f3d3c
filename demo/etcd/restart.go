package main

// The restart scenario, after the storm: a service has one instance, A,
// cached by four clients; etcd stops for a few seconds and starts again;
// shortly after it serves, a second instance, B, registers. How long after
// B's registration does each client serve B? Each trial has its own
// service and four new clients, each with its own registry instance and
// etcd client, every option at its default.

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"time"
	"unsafe"

	etcdreg "github.com/go-micro/plugins/v4/registry/etcd"
	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	regcache "github.com/regcache/cache"
	lossless "github.com/regcache/cache/etcd"
)

// restartConfig is the restart scenario's: Trials of an outage of Outage,
// B registered Delay after etcd serves again, each client waited for up to
// Limit; Bound is the time to serve B that the table counts trials within.
type restartConfig struct {
	Trials                      int
	Outage, Delay, Limit, Bound time.Duration
}

func defaultRestartConfig() restartConfig {
	return restartConfig{Trials: 5, Outage: 5 * time.Second, Delay: 500 * time.Millisecond, Limit: 5 * time.Second, Bound: 1500 * time.Millisecond}
}

// The four clients, by name.
const (
	rcModule = "regcache, etcd module"
	rcPlugin = "regcache, plugin"
	gmPlugin = "go-micro cache, plugin"
	gmModule = "go-micro cache, etcd module"
)

// restartReport is what the scenario measured: for each client (in the
// order of Clients), its time to serve B in each trial, or -1 if it did
// not within the limit.
type restartReport struct {
	Config    restartConfig
	Clients   []string
	Took      [][]time.Duration // [client][trial]
	Registers []time.Duration   // B's Register, each trial
}

// restartClient is one of the four.
type restartClient struct {
	name   string
	lookup func(string) ([]*registry.Service, error)
	stop   func()
}

func quietZap() *zap.Config {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.DPanicLevel)
	return &zc
}

// pluginRegistry and moduleRegistry are go-micro's etcd plugin and
// github.com/regcache/cache/etcd on addr, with their default Timeout
// (5 s).
func pluginRegistry(addr string) registry.Registry {
	return etcdreg.NewRegistry(registry.Addrs(addr), etcdreg.LogConfig(quietZap()))
}

func moduleRegistry(addr string) registry.Registry {
	return lossless.NewRegistry(registry.Addrs(addr), lossless.LogConfig(quietZap()))
}

func newRestartClients(addr string) []restartClient {
	rc := func(name string, r registry.Registry) restartClient {
		c := regcache.New(r)
		return restartClient{name, func(s string) ([]*registry.Service, error) { return c.Lookup(s) }, func() { c.Stop(); closeEtcdClient(r) }}
	}
	gm := func(name string, r registry.Registry) restartClient {
		c := gmcache.New(r)
		return restartClient{name, func(s string) ([]*registry.Service, error) { return c.GetService(s) }, func() { c.Stop(); closeEtcdClient(r) }}
	}
	return []restartClient{
		rc(rcModule, moduleRegistry(addr)),
		rc(rcPlugin, pluginRegistry(addr)),
		gm(gmPlugin, pluginRegistry(addr)),
		gm(gmModule, moduleRegistry(addr)),
	}
}

var etcdClientType = reflect.TypeOf((*clientv3.Client)(nil))

// closeEtcdClient closes the etcd client of a plugin registry, or of the
// plugin inside github.com/regcache/cache/etcd's, read from its unexported
// field (the plugin has no Close), so that the clients of a trial do not
// reconnect through the next trials' restarts.
func closeEtcdClient(r registry.Registry) {
	v := reflect.ValueOf(r)
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || !v.CanAddr() {
		return
	}
	if f := v.FieldByName("client"); f.IsValid() && f.Type() == etcdClientType {
		if c := *(**clientv3.Client)(unsafe.Pointer(f.UnsafeAddr())); c != nil {
			c.Close()
		}
		return
	}
	if f := v.FieldByName("plugin"); f.IsValid() && f.Kind() == reflect.Interface {
		if inner, _ := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(registry.Registry); inner != nil {
			closeEtcdClient(inner)
		}
	}
}

func hasNode(svcs []*registry.Service, id string) bool {
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if n.Id == id {
				return true
			}
		}
	}
	return false
}

// timeToServe polls every client every 5 ms until want holds for what it
// serves, for at most limit from start; each client's time from start, or
// -1.
func timeToServe(clients []restartClient, service string, start time.Time, limit time.Duration, want func([]*registry.Service) bool) []time.Duration {
	took := make([]time.Duration, len(clients))
	left := len(clients)
	for i := range took {
		took[i] = -1
	}
	for {
		for i, c := range clients {
			if took[i] < 0 {
				if svcs, err := c.lookup(service); err == nil && want(svcs) {
					took[i] = time.Since(start)
					left--
				}
			}
		}
		if left == 0 || time.Since(start) > limit {
			return took
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func allServe(clients []restartClient, service string, what string, want func([]*registry.Service) bool) error {
	for i, d := range timeToServe(clients, service, time.Now(), 10*time.Second, want) {
		if d < 0 {
			return fmt.Errorf("restart: %s: %s not served within 10s", clients[i].name, what)
		}
	}
	return nil
}

func node(service, id string) *registry.Service {
	return &registry.Service{Name: service, Version: "1.0.0", Nodes: []*registry.Node{{Id: id, Address: "127.0.0.1:1"}}}
}

// warmUp registers probe nodes until every client has served one through
// its watch, which each cache opens in the background with its first
// lookup, then removes them.
func warmUp(clients []restartClient, writer registry.Registry, service string) error {
	warm := make([]bool, len(clients))
	done := func() bool {
		for _, w := range warm {
			if !w {
				return false
			}
		}
		return true
	}
	var probes []*registry.Service
	for i := 0; !done(); i++ {
		if i == 20 {
			return errors.New("restart: 20 probes, and not every client's watch delivered one")
		}
		p := node(service, fmt.Sprintf("probe-%d", i))
		if err := writer.Register(p, registry.RegisterTTL(registerTTL)); err != nil {
			return err
		}
		probes = append(probes, p)
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && !done(); time.Sleep(5 * time.Millisecond) {
			for j, c := range clients {
				if !warm[j] {
					svcs, _ := c.lookup(service)
					warm[j] = hasNode(svcs, p.Nodes[0].Id)
				}
			}
		}
	}
	for _, p := range probes {
		if err := writer.Deregister(p); err != nil {
			return err
		}
	}
	return allServe(clients, service, "the probes' removal", func(s []*registry.Service) bool {
		for _, p := range probes {
			if hasNode(s, p.Nodes[0].Id) {
				return false
			}
		}
		return true
	})
}

// runRestart runs the scenario on b's etcd, which it starts if it is
// stopped, telling progress how it goes.
func runRestart(b *etcdBackend, cfg restartConfig, progress io.Writer) (*restartReport, error) {
	if err := b.ensureUp(); err != nil {
		return nil, err
	}
	addr := b.clientURL.Host
	rep := &restartReport{Config: cfg}
	for trial := 0; trial < cfg.Trials; trial++ {
		fmt.Fprintf(progress, "restart: trial %d of %d: etcd down for %v...\n", trial+1, cfg.Trials, cfg.Outage)
		service := fmt.Sprintf("demo.restart-%d", trial)
		clients := newRestartClients(addr)
		stop := func() {
			for _, c := range clients {
				c.stop()
			}
		}
		if rep.Clients == nil {
			for _, c := range clients {
				rep.Clients = append(rep.Clients, c.name)
			}
			rep.Took = make([][]time.Duration, len(clients))
		}
		writer := pluginRegistry(addr)
		err := retry(func() error { return writer.Register(node(service, "A"), registry.RegisterTTL(registerTTL)) })
		if err == nil {
			err = allServe(clients, service, "instance A", func(s []*registry.Service) bool { return hasNode(s, "A") })
		}
		if err == nil {
			err = warmUp(clients, writer, service)
		}
		closeEtcdClient(writer)
		if err != nil {
			stop()
			return nil, err
		}

		b.Down()
		time.Sleep(cfg.Outage)
		if err := b.start(); err != nil {
			stop()
			return nil, err
		}
		time.Sleep(cfg.Delay)

		// B is a process that starts now: a registry of its own, and one
		// Register with a TTL, as a go-micro server's Start makes.
		bReg := pluginRegistry(addr)
		start := time.Now()
		err = bReg.Register(node(service, "B"), registry.RegisterTTL(registerTTL))
		registered := time.Now()
		if err != nil {
			stop()
			closeEtcdClient(bReg)
			return nil, fmt.Errorf("restart: B's Register: %w", err)
		}
		rep.Registers = append(rep.Registers, registered.Sub(start))
		for i, d := range timeToServe(clients, service, registered, cfg.Limit, func(s []*registry.Service) bool { return hasNode(s, "B") }) {
			rep.Took[i] = append(rep.Took[i], d)
		}
		stop()
		closeEtcdClient(bReg)
	}
	return rep, nil
}

// ensureUp starts etcd if it is stopped (the storm ends with it stopped).
func (b *etcdBackend) ensureUp() error {
	b.mu.Lock()
	up := b.e != nil
	b.mu.Unlock()
	if up {
		return nil
	}
	return b.start()
}

// Within is how many trials client i served B within the bound.
func (r *restartReport) Within(i int) int {
	n := 0
	for _, d := range r.Took[i] {
		if d >= 0 && d <= r.Config.Bound {
			n++
		}
	}
	return n
}

func (r *restartReport) show(d time.Duration) string {
	switch {
	case d < 0:
		return "> " + r.Config.Limit.String()
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// writeRestart prints the scenario's table and what it shows.
func writeRestart(w io.Writer, r *restartReport) {
	cfg := r.Config
	fmt.Fprintf(w, "\n== restart: etcd down for %v, then a new instance registers %v after it serves again (%s)\n\n", cfg.Outage, cfg.Delay, plural(cfg.Trials, "trial"))
	fmt.Fprintln(w, "clients:   regcache (cache.New(reg)) and go-micro's cache (go-micro.dev/v4/registry/cache, cache.New(reg)),")
	fmt.Fprintln(w, "           each over go-micro's etcd plugin and over github.com/regcache/cache/etcd, every option at its")
	fmt.Fprintln(w, "           default (registry Timeout 5s, cache TTL 1m); four new clients per trial, each with its own etcd")
	fmt.Fprintln(w, "           client, and a service of one instance cached by each before etcd stops")
	fmt.Fprintf(w, "time:      from the new instance's Register returning to the client serving it (> %v: not within the wait)\n\n", cfg.Limit)

	header := []string{"client"}
	for i := 0; i < cfg.Trials; i++ {
		header = append(header, fmt.Sprintf("trial %d", i+1))
	}
	header = append(header, "median", "within "+cfg.Bound.String())
	rows := [][]string{header}
	for i, name := range r.Clients {
		row := []string{name}
		ds := append([]time.Duration(nil), r.Took[i]...)
		for _, d := range ds {
			row = append(row, r.show(d))
		}
		sort.Slice(ds, func(a, b int) bool { return key(ds[a]) < key(ds[b]) })
		row = append(row, r.show(ds[len(ds)/2]), fmt.Sprintf("%d of %d", r.Within(i), len(ds)))
		rows = append(rows, row)
	}
	widths := make([]int, len(header))
	for _, row := range rows {
		for j, c := range row {
			if len(c) > widths[j] {
				widths[j] = len(c)
			}
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for j, c := range row {
			if j == 0 {
				fmt.Fprintf(&b, "%-*s", widths[j], c)
			} else {
				fmt.Fprintf(&b, "  %*s", widths[j], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	regs := append([]time.Duration(nil), r.Registers...)
	sort.Slice(regs, func(a, b int) bool { return regs[a] < regs[b] })
	fmt.Fprintf(w, "\nThe new instance's own Register took %v to %v.\n", r.show(regs[0]), r.show(regs[len(regs)-1]))

	idx := func(name string) int {
		for i, n := range r.Clients {
			if n == name {
				return i
			}
		}
		return -1
	}
	m, p := idx(rcModule), idx(rcPlugin)
	fmt.Fprintln(w, wrapText(fmt.Sprintf("What it shows: over the etcd module, regcache served the new instance within %v in %d of %d trials, its stream back and resynced within a probe interval (1 s) of etcd's return; over the plugin, in %d of %d: a plugin client hears of it only once its etcd client redials, on gRPC's backoff (1 s, then 1.6 times longer each time), which after an outage of %v can come seconds after etcd is back.",
		cfg.Bound, r.Within(m), cfg.Trials, r.Within(p), cfg.Trials, cfg.Outage)))
}

// key sorts a time to serve, -1 (not within the wait) last.
func key(d time.Duration) time.Duration {
	if d < 0 {
		return 1<<63 - 1
	}
	return d
}

// wrapText wraps s at 100 columns.
func wrapText(s string) string {
	var b strings.Builder
	line := 0
	for _, word := range strings.Fields(s) {
		if line > 0 && line+1+len(word) > 100 {
			b.WriteString("\n")
			line = 0
		} else if line > 0 {
			b.WriteString(" ")
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// plural is n and word, made plural unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
