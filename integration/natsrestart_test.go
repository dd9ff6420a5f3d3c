package integration

// A node registered while the connection to NATS is being re-established
// (issue 29): NATS stops for 5 s and starts again on its port; 1 s after
// it serves, a new process registers a second node. nats.go re-establishes
// every client's connection, and its subscriptions, by itself, and what
// was announced meanwhile is lost: a cache learns of the new node from the
// announcement only if its subscription was back in time, and otherwise
// only if something tells it to ask again. The figures that the README,
// docs/streams.md and integration/README.md show come from one run of it
// (figures_test.go).
//
// integration5/natsrestart_test.go is this file for go-micro v5, with the
// imports changed and nothing else (TestConformanceIsTheTwin checks it); the
// registries each flavour runs are in its conformance_backends_test.go
// (natsPlugin, natsModule).

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"

	cache "github.com/regcache/cache"
)

// closeNATSConn closes the NATS connection of r, go-micro's NATS registry
// or regcache's nats module over it, which neither ever closes: the field
// conn of the plugin, found under the module's field plugin.
func closeNATSConn(r registry.Registry) {
	v := reflect.ValueOf(r)
	for v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct {
		if c := v.Elem().FieldByName("conn"); c.IsValid() && c.Type() == reflect.TypeOf((*nats.Conn)(nil)) {
			if conn := *(**nats.Conn)(unsafe.Pointer(c.UnsafeAddr())); conn != nil {
				conn.Close()
			}
			return
		}
		p := v.Elem().FieldByName("plugin")
		if !p.IsValid() || p.Kind() != reflect.Interface || p.IsNil() {
			return
		}
		v = reflect.ValueOf(*(*registry.Registry)(unsafe.Pointer(p.UnsafeAddr())))
	}
}

// discardLogger keeps the caches' log lines out of the test's output.
type discardLogger struct{}

func (discardLogger) Init(...logger.Option) error                 { return nil }
func (discardLogger) Options() logger.Options                     { return logger.Options{} }
func (discardLogger) Fields(map[string]interface{}) logger.Logger { return discardLogger{} }
func (discardLogger) Log(logger.Level, ...interface{})            {}
func (discardLogger) Logf(logger.Level, string, ...interface{})   {}
func (discardLogger) String() string                              { return "discard" }

// natsGapClient is one of the clients a trial compares.
type natsGapClient struct {
	name  string
	reg   registry.Registry
	cache registry.Registry
	stop  func()
}

// natsGapClients are, each with a connection of its own and every option
// at its default (a TTL of 1 min): regcache over regcache's nats module
// (whose result is asserted), regcache and go-micro's cache over the
// plugin, and go-micro's cache over the module.
func natsGapClients(addr string) []*natsGapClient {
	mk := func(name string, reg registry.Registry, regcache bool) *natsGapClient {
		if regcache {
			c := cache.New(reg, cache.WithLogger(discardLogger{}))
			return &natsGapClient{name: name, reg: reg, cache: c, stop: c.Stop}
		}
		c := gmcache.New(reg, gmcache.WithLogger(discardLogger{}))
		return &natsGapClient{name: name, reg: reg, cache: c, stop: c.Stop}
	}
	return []*natsGapClient{
		mk("regcache, nats module", natsModule(addr), true),
		mk("regcache, nats plugin", natsPlugin(addr), true),
		mk("go-micro cache, nats plugin", natsPlugin(addr), false),
		mk("go-micro cache, nats module", natsModule(addr), false),
	}
}

func natsGapNode(name, id string) *registry.Service {
	return &registry.Service{Name: name, Version: "1.0.0", Nodes: []*registry.Node{{Id: id, Address: "127.0.0.1:1"}}}
}

func natsGapHas(r registry.Registry, name, id string) bool {
	svcs, err := r.GetService(name)
	if err != nil {
		return false
	}
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if n.Id == id {
				return true
			}
		}
	}
	return false
}

// natsGapUntil polls every client every 10 ms until each serves the node id
// of name (or, with gone, no longer serves it), for up to limit, and
// returns for each the time from start; -1 if not within limit.
func natsGapUntil(clients []*natsGapClient, name, id string, gone bool, start time.Time, limit time.Duration) []time.Duration {
	took := make([]time.Duration, len(clients))
	left := len(clients)
	for i := range took {
		took[i] = -1
	}
	for left > 0 && time.Since(start) <= limit {
		for i, c := range clients {
			if took[i] < 0 && natsGapHas(c.cache, name, id) != gone {
				took[i] = time.Since(start)
				left--
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return took
}

// natsGapTrial is one trial: its clients' times to serve B, or an error
// that stopped it.
func natsGapTrial(trial int, outage, delay, limit time.Duration) (names []string, took []time.Duration, err error) {
	n, err := newNATSServer()
	if err != nil {
		return nil, nil, err
	}
	defer n.Stop()
	name := fmt.Sprintf("natsgap-%02d", trial)
	writer := natsPlugin(n.Addr())
	defer closeNATSConn(writer)
	clients := natsGapClients(n.Addr())
	defer func() {
		for _, c := range clients {
			c.stop()
			closeNATSConn(c.reg)
		}
	}()
	for _, c := range clients {
		names = append(names, c.name)
	}

	// Every client holds A, and its watch delivers: a probe node
	// registered and deregistered reaches each through its stream (no
	// cache here refreshes within its TTL).
	if err := writer.Register(natsGapNode(name, "A")); err != nil {
		return nil, nil, err
	}
	if t := natsGapUntil(clients, name, "A", false, time.Now(), 10*time.Second); strings.Contains(fmt.Sprint(t), "-1") {
		return nil, nil, fmt.Errorf("instance A not served by every client within 10 s: %v", t)
	}
	for i := 0; ; i++ {
		if i == 20 {
			return nil, nil, fmt.Errorf("20 probes, and not every client's watch delivered one")
		}
		probe := natsGapNode(name, fmt.Sprintf("probe-%d", i))
		if err := writer.Register(probe); err != nil {
			return nil, nil, err
		}
		seen := natsGapUntil(clients, name, probe.Nodes[0].Id, false, time.Now(), time.Second)
		if err := writer.Deregister(probe); err != nil {
			return nil, nil, err
		}
		gone := natsGapUntil(clients, name, probe.Nodes[0].Id, true, time.Now(), 2*time.Second)
		if !strings.Contains(fmt.Sprint(seen, gone), "-1") {
			break
		}
	}

	if err := n.Stop(); err != nil {
		return nil, nil, err
	}
	time.Sleep(outage)
	if err := n.Start(); err != nil {
		return nil, nil, err
	}
	time.Sleep(delay)
	b := natsPlugin(n.Addr()) // a process started after the restart
	defer closeNATSConn(b)
	if err := b.Register(natsGapNode(name, "B")); err != nil {
		return nil, nil, fmt.Errorf("B's Register: %w", err)
	}
	return names, natsGapUntil(clients, name, "B", false, time.Now(), limit), nil
}

// TestNodeRegisteredAfterANATSRestart runs 20 trials side by side, each
// on a NATS server of its own, started 200 ms apart: in each, every client
// holds instance A, NATS stops for 5 s and starts again on its port, and
// 1 s after it serves, a new process registers instance B. How long after
// B's Register returned does each client serve B? regcache over the nats
// module must serve it within 1.5 s in every trial: its stream fails when
// the connection is lost, the redial waits for nats.go to re-establish
// it, and the resync that follows every stream established asks NATS
// again, in case B was announced before the subscription was back.
func TestNodeRegisteredAfterANATSRestart(t *testing.T) {
	const (
		trials  = 20
		outage  = 5 * time.Second
		delay   = time.Second             // from NATS serving again to B's Register
		limit   = 3 * time.Second         // the wait, capped: the TTL is 1 min
		bound   = 1500 * time.Millisecond // asserted for regcache over the module
		stagger = 200 * time.Millisecond
	)
	began := time.Now()
	type result struct {
		names []string
		took  []time.Duration
		err   error
	}
	results := make([]result, trials)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * stagger)
			names, took, err := natsGapTrial(i, outage, delay, limit)
			results[i] = result{names, took, err}
		}()
	}
	wg.Wait()

	var names []string
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("trial %d: %v", i+1, r.err)
		}
		names = r.names
		var line strings.Builder
		for j, d := range r.took {
			fmt.Fprintf(&line, "  %s %s;", names[j], natsGapShow(d, limit))
		}
		t.Logf("trial %2d: B served:%s", i+1, line.String())
	}
	t.Logf("NATS down %v, B registered %v after it served again; time from B's Register to B served, over %d trials (cap %v):", outage, delay, trials, limit)
	t.Logf("%-28s %9s %9s %9s  %s", "client", "min", "median", "max", "trials within "+bound.String())
	for j, n := range names {
		var ds []time.Duration
		within := 0
		for _, r := range results {
			d := r.took[j]
			if d >= 0 && d <= bound {
				within++
			}
			if d < 0 {
				d = 1<<63 - 1 // sorts last
			}
			ds = append(ds, d)
		}
		sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
		show := func(d time.Duration) string {
			if d == 1<<63-1 {
				d = -1
			}
			return natsGapShow(d, limit)
		}
		t.Logf("%-28s %9s %9s %9s  %d of %d", n, show(ds[0]), show(ds[len(ds)/2]), show(ds[len(ds)-1]), within, trials)
		if j == 0 && within != trials {
			t.Errorf("%s served B within %v in %d of %d trials; want every one", n, bound, within, trials)
		}
	}

	run := figureRun{ID: "nats-restart", Server: serverName(natsServerEnv),
		Outage: figureDuration(outage), Delay: figureDuration(delay), Limit: figureDuration(limit), Bound: figureDuration(bound)}
	for j, n := range names {
		var ds []time.Duration
		for _, r := range results {
			ds = append(ds, r.took[j])
		}
		run.Clients = append(run.Clients, figureClient{Name: n, Took: figureTimes(ds)})
	}
	writeFigures(t, run, began)
}

func natsGapShow(d, limit time.Duration) string {
	if d < 0 {
		return "> " + limit.String()
	}
	return d.Round(time.Millisecond).String()
}
