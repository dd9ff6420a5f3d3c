package integration

// The drop-in suite: the registry behaviours that other projects' tests
// check (go-micro's memory registry tests, the NATS and Consul plugins'
// tests), written here in our own words and run against each registry
// three ways side by side: the registry alone, go-micro's cache over it,
// and regcache over it. Every behaviour that holds through go-micro's
// cache must hold through regcache: regcache is a drop-in replacement.
//
// The registries: go-micro's memory registry; NATS (nats-server, a child
// process) through go-micro's plugin and through regcache's nats
// module; Consul's plugin over consulapi_test.go's agent. A cache cannot
// read its own writes at once where the registry announces them
// asynchronously (every registry here announces through a watch stream
// that the cache reads in the background), so each check polls until it
// holds or its deadline passes, and says what it waited for.
//
// integration5/dropin_test.go is this file for go-micro v5, with the
// imports changed and nothing else (TestConformanceIsTheTwin checks it); the
// registries each flavour runs are in its conformance_backends_test.go
// (natsPlugin, natsModule, consulPlugin).

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"

	cache "github.com/regcache/cache"
)

const (
	// dropinWait is how long a check waits for a registry's announcement
	// to reach the registry under test: milliseconds on every registry
	// here, so a change not seen by then is not seen until a cache's TTL
	// (1 min).
	dropinWait = 3 * time.Second
	// dropinTTL is the registrations' TTL in the TTL checks.
	dropinTTL = time.Second
)

// A dropinBackend is one registry of the suite.
type dropinBackend struct {
	name string
	// pair returns the registry a server registers through and the one a
	// client reads: one instance where the registry keeps its state in
	// the process (memory), otherwise two, as in two processes.
	pair func() (writer, reader registry.Registry)
	// nodeless makes the registry hold the service name with a version
	// and no node, its way: a registration without nodes, or, on Consul,
	// which refuses one, a node whose health check is critical.
	nodeless func(writer registry.Registry, name string) error
	// release frees what pair made.
	release func(registry.Registry)
	// alone runs the registry's cells with no other registry's.
	alone bool
}

// dropinBackends starts NATS and the Consul agent for the test.
func dropinBackends(t *testing.T) []*dropinBackend {
	t.Helper()
	n := startNATS(t)
	consul := startConsulAPI(t)
	nodeless := func(w registry.Registry, name string) error {
		return w.Register(&registry.Service{Name: name, Version: "1.0.0"})
	}
	// NATS answers a query with what it hears within the registry's
	// Timeout, 100 ms by default: under the load of this suite (and the
	// race detector) an answer can miss it, and an empty answer is kept by
	// regcache for its retry interval. 500 ms keeps the suite's answers
	// about the behaviours, not about the load.
	natsBackend := func(name string, open func(string, ...registry.Option) registry.Registry) *dropinBackend {
		return &dropinBackend{
			name: name,
			pair: func() (registry.Registry, registry.Registry) {
				return open(n.Addr(), registry.Timeout(500*time.Millisecond)), open(n.Addr(), registry.Timeout(500*time.Millisecond))
			},
			nodeless: nodeless,
			release:  closeNATSConn,
		}
	}
	return []*dropinBackend{
		{
			name: "memory",
			pair: func() (registry.Registry, registry.Registry) {
				m := registry.NewMemoryRegistry()
				return m, m
			},
			nodeless: nodeless,
			release:  func(registry.Registry) {},
			alone:    true,
		},
		natsBackend("nats plugin", natsPlugin),
		natsBackend("nats module", natsModule),
		{
			name: "consul plugin",
			pair: func() (registry.Registry, registry.Registry) {
				return consulPlugin(consul.Addr()), consulPlugin(consul.Addr())
			},
			nodeless: func(w registry.Registry, name string) error {
				if err := w.Register(dropinService(name, "1.0.0", name+"-n1"), registry.RegisterTTL(time.Minute)); err != nil {
					return err
				}
				if !consul.fail(name + "-n1") {
					return errors.New("no check to fail")
				}
				return nil
			},
			release: func(registry.Registry) {},
		},
	}
}

// The ways a registry is read.
var dropinWays = []struct {
	name string
	wrap func(registry.Registry) (registry.Registry, func())
}{
	{"alone", func(r registry.Registry) (registry.Registry, func()) { return r, func() {} }},
	{"go-micro cache", func(r registry.Registry) (registry.Registry, func()) {
		c := gmcache.New(r, gmcache.WithLogger(discardLogger{}))
		return c, func() {
			// go-micro's cache stops the watch of each service it looked
			// up, however young, and consul's api panics, ending the test
			// binary, when a watch plan is stopped just as its first query
			// begins (regcache keeps a watch 100 ms: watchset.minWatchAge).
			time.Sleep(100 * time.Millisecond)
			c.Stop()
		}
	}},
	{"regcache", func(r registry.Registry) (registry.Registry, func()) {
		c := cache.New(r, cache.WithLogger(discardLogger{}))
		return c, c.Stop
	}},
}

// A dropinCell is one behaviour, on one registry, read one way.
type dropinCell struct {
	b      *dropinBackend
	w      registry.Registry // the server's
	raw    registry.Registry // the client's, alone
	x      registry.Registry // the client's, read the way under test
	name   string            // the service, the cell's own
	failed string            // why the behaviour did not hold; "" if it did
}

func dropinService(name, version string, ids ...string) *registry.Service {
	s := &registry.Service{Name: name, Version: version}
	for _, id := range ids {
		s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: "127.0.0.1:1", Metadata: map[string]string{"id": id}})
	}
	return s
}

// dropinIDs is the sorted node ids of svcs, "version/id" with versions.
func dropinIDs(svcs []*registry.Service, versions bool) string {
	var ids []string
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if versions {
				ids = append(ids, s.Version+"/"+n.Id)
			} else {
				ids = append(ids, n.Id)
			}
		}
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

// dropinUntil polls r every 50 ms until cond holds of GetService(name), for up
// to limit; it returns "" or, if cond never held, what it waited for and
// the last answer.
func dropinUntil(r registry.Registry, name string, limit time.Duration, what string, cond func([]*registry.Service, error) bool) string {
	deadline := time.Now().Add(limit)
	for {
		svcs, err := r.GetService(name)
		if cond(svcs, err) {
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("%s: not within %v (last answer: %d versions, nodes [%s], err %v)", what, limit, len(svcs), dropinIDs(svcs, true), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dropinServes is a condition: no error, and exactly the nodes ids.
func dropinServes(ids ...string) func([]*registry.Service, error) bool {
	sort.Strings(ids)
	want := strings.Join(ids, ",")
	return func(svcs []*registry.Service, err error) bool { return err == nil && dropinIDs(svcs, false) == want }
}

// dropinNotFound is a condition: registry.ErrNotFound itself, and no services.
func dropinNotFound(svcs []*registry.Service, err error) bool {
	return err == registry.ErrNotFound && len(svcs) == 0
}

// dropinNoNodeOf is a condition: node id is not served (an error or no nodes is
// fine).
func dropinNoNodeOf(id string) func([]*registry.Service, error) bool {
	return func(svcs []*registry.Service, err error) bool {
		for _, s := range svcs {
			for _, n := range s.Nodes {
				if n.Id == id {
					return false
				}
			}
		}
		return true
	}
}

// hold registers the nodes ids of c's service and reads them once through
// the way under test, so that a cache holds them and starts watching the
// service. Then it waits until the watch delivers, as it has long before a
// change in a running client: probe nodes are registered one after
// another until one is served (a cache's watch starts in the background
// with its first read, and misses what comes before it), then
// deregistered, until none is served.
func (c *dropinCell) hold(ids ...string) string {
	for _, id := range ids {
		if err := c.w.Register(dropinService(c.name, "1.0.0", id)); err != nil {
			return "register: " + err.Error()
		}
	}
	// The registry first: on NATS, a registration reaches the bus
	// asynchronously, and a query that comes before it is answered with
	// nothing, which a cache may keep for its retry interval.
	if why := dropinUntil(c.raw, c.name, dropinWait, "setup: the registry itself serves the registered nodes", dropinServes(ids...)); why != "" {
		return why
	}
	if why := dropinUntil(c.x, c.name, dropinWait, "setup: the registered nodes served", dropinServes(ids...)); why != "" {
		return why
	}
	// Each call gets a service of its own, as a go-micro server builds
	// one for each: go-micro's cache appends the nodes it holds to an
	// event's service, which go-micro's memory registry hands over as the
	// caller registered it, so that a service used again would carry
	// those nodes into the next call.
	var probes []string
	defer func() {
		for _, id := range probes {
			c.w.Deregister(dropinService(c.name, "1.0.0", id))
		}
	}()
	deadline := time.Now().Add(dropinWait)
	for seen := false; !seen; {
		if time.Now().After(deadline) {
			return fmt.Sprintf("setup: %d probe nodes registered after the first read, none served within %v (the watch delivers nothing)", len(probes), dropinWait)
		}
		id := fmt.Sprintf("%s-probe%d", c.name, len(probes))
		if err := c.w.Register(dropinService(c.name, "1.0.0", id)); err != nil {
			return "register a probe: " + err.Error()
		}
		probes = append(probes, id)
		seen = dropinUntil(c.x, c.name, 200*time.Millisecond, "", func(svcs []*registry.Service, err error) bool {
			return err == nil && strings.Contains(","+dropinIDs(svcs, false)+",", ","+id+",")
		}) == ""
	}
	for _, id := range probes {
		if err := c.w.Deregister(dropinService(c.name, "1.0.0", id)); err != nil {
			return "deregister a probe: " + err.Error()
		}
	}
	probes = nil
	return dropinUntil(c.x, c.name, dropinWait, "setup: the probe nodes' deregistration served", dropinServes(ids...))
}

// dropinBehaviour is one behaviour: it returns "" if it held, or why not.
type dropinBehaviour struct {
	name  string
	check func(c *dropinCell) string
}

var dropinBehaviours = []dropinBehaviour{
	{"register seen", func(c *dropinCell) string {
		if why := c.hold(c.name + "-n1"); why != "" {
			return why
		}
		if err := c.w.Register(dropinService(c.name, "1.0.0", c.name+"-n2")); err != nil {
			return "register: " + err.Error()
		}
		return dropinUntil(c.x, c.name, dropinWait, "a second node registered", dropinServes(c.name+"-n1", c.name+"-n2"))
	}},
	{"deregister seen", func(c *dropinCell) string {
		if why := c.hold(c.name+"-n1", c.name+"-n2"); why != "" {
			return why
		}
		if err := c.w.Deregister(dropinService(c.name, "1.0.0", c.name+"-n2")); err != nil {
			return "deregister: " + err.Error()
		}
		return dropinUntil(c.x, c.name, dropinWait, "one of two nodes deregistered", dropinServes(c.name+"-n1"))
	}},
	{"last node deregistered: err == registry.ErrNotFound", func(c *dropinCell) string {
		if why := c.hold(c.name + "-n1"); why != "" {
			return why
		}
		if err := c.w.Deregister(dropinService(c.name, "1.0.0", c.name+"-n1")); err != nil {
			return "deregister: " + err.Error()
		}
		return dropinUntil(c.x, c.name, dropinWait, "the last node deregistered: registry.ErrNotFound, no services", dropinNotFound)
	}},
	{"missing service: err == registry.ErrNotFound", func(c *dropinCell) string {
		for i := 0; i < 2; i++ {
			svcs, err := c.x.GetService(c.name)
			if !dropinNotFound(svcs, err) {
				return fmt.Sprintf("lookup %d of a service never registered: %d versions, err %v; want registry.ErrNotFound", i+1, len(svcs), err)
			}
		}
		return ""
	}},
	{"TTL expiry, read after", func(c *dropinCell) string {
		// As go-micro's memory registry test: the first read comes once
		// the registry has let the node go.
		id := c.name + "-n1"
		if err := c.w.Register(dropinService(c.name, "1.0.0", id), registry.RegisterTTL(dropinTTL)); err != nil {
			return "register: " + err.Error()
		}
		// Three answers in a row without the node: NATS answers nothing
		// now and then, when a query goes unanswered in its 100 ms.
		gone := 0
		if why := dropinUntil(c.raw, c.name, dropinTTL+dropinWait, "the registry itself lets the node go after its TTL", func(svcs []*registry.Service, err error) bool {
			if dropinNoNodeOf(id)(svcs, err) {
				gone++
			} else {
				gone = 0
			}
			return gone == 3
		}); why != "" {
			return why
		}
		svcs, err := c.x.GetService(c.name)
		if !dropinNoNodeOf(id)(svcs, err) {
			return fmt.Sprintf("read after the TTL: serves the expired node (nodes [%s])", dropinIDs(svcs, false))
		}
		return ""
	}},
	{"TTL expiry, read before and after", func(c *dropinCell) string {
		id := c.name + "-n1"
		if err := c.w.Register(dropinService(c.name, "1.0.0", id), registry.RegisterTTL(dropinTTL)); err != nil {
			return "register: " + err.Error()
		}
		if why := dropinUntil(c.x, c.name, dropinWait, "setup: the node served", dropinServes(id)); why != "" {
			return why
		}
		return dropinUntil(c.x, c.name, dropinTTL+dropinWait, "the node no longer served after its TTL", dropinNoNodeOf(id))
	}},
	{"service without nodes", func(c *dropinCell) string {
		if err := c.b.nodeless(c.w, c.name); err != nil {
			return "setup: " + err.Error()
		}
		return dropinUntil(c.x, c.name, dropinWait, "a version without nodes, no error", func(svcs []*registry.Service, err error) bool {
			return err == nil && len(svcs) > 0 && dropinIDs(svcs, false) == ""
		})
	}},
	{"several versions", func(c *dropinCell) string {
		if why := c.hold(c.name + "-v1"); why != "" {
			return why
		}
		want := []string{"1.0.0/" + c.name + "-v1"}
		for _, v := range []string{"2.0.0", "3.0.0"} {
			id := c.name + "-" + v[:1]
			if err := c.w.Register(dropinService(c.name, v, id)); err != nil {
				return "register: " + err.Error()
			}
			want = append(want, v+"/"+id)
			all := strings.Join(want, ",")
			if why := dropinUntil(c.x, c.name, dropinWait, "version "+v+" registered next to the others", func(svcs []*registry.Service, err error) bool {
				return err == nil && len(svcs) == len(want) && dropinIDs(svcs, true) == all
			}); why != "" {
				return why
			}
		}
		return ""
	}},
	{"watch events", func(c *dropinCell) string {
		w, err := c.x.Watch(registry.WatchService(c.name))
		if err != nil {
			return "Watch: " + err.Error()
		}
		defer w.Stop()
		results := make(chan *registry.Result, 16)
		go func() {
			defer close(results)
			for {
				res, err := w.Next()
				if err != nil {
					return
				}
				results <- res
			}
		}()
		id := c.name + "-n1"
		expect := func(action string) string {
			timeout := time.After(dropinWait)
			for {
				select {
				case res, ok := <-results:
					if !ok {
						return fmt.Sprintf("the watch ended before a %s of %s", action, id)
					}
					ok = res.Service != nil && res.Service.Name == c.name && strings.Contains(","+dropinIDs([]*registry.Service{res.Service}, false)+",", ","+id+",")
					if ok && (res.Action == action || action == "create" && res.Action == "update") {
						return ""
					}
				case <-timeout:
					return fmt.Sprintf("no %s event of %s within %v", action, id, dropinWait)
				}
			}
		}
		if err := c.w.Register(dropinService(c.name, "1.0.0", id)); err != nil {
			return "register: " + err.Error()
		}
		if why := expect("create"); why != "" {
			return why
		}
		if err := c.w.Deregister(dropinService(c.name, "1.0.0", id)); err != nil {
			return "deregister: " + err.Error()
		}
		return expect("delete")
	}},
}

// TestDropIn runs every behaviour on every registry, read three ways, and
// prints the table. It fails where a behaviour holds through go-micro's
// cache and not through regcache. Every cell runs side by side with the
// others, but the memory registry's run before the rest: it drops an event
// that a watcher has not taken within 10 ms, which the load of the others
// (under the race detector) would make happen.
func TestDropIn(t *testing.T) {
	backends := dropinBackends(t)
	cells := make([][][]*dropinCell, len(backends)) // [backend][behaviour][way]
	var wg sync.WaitGroup
	for bi, b := range backends {
		if b.alone {
			wg.Wait()
		}
		cells[bi] = make([][]*dropinCell, len(dropinBehaviours))
		for hi, h := range dropinBehaviours {
			cells[bi][hi] = make([]*dropinCell, len(dropinWays))
			for wi, way := range dropinWays {
				w, r := b.pair()
				x, stop := way.wrap(r)
				c := &dropinCell{b: b, w: w, raw: r, x: x, name: fmt.Sprintf("dropin-%d-%d-%d", bi, hi, wi)}
				cells[bi][hi][wi] = c
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() {
						stop()
						b.release(r)
						if w != r {
							b.release(w)
						}
					}()
					c.failed = h.check(c)
				}()
			}
		}
		if b.alone {
			wg.Wait()
		}
	}
	wg.Wait()

	mark := func(c *dropinCell) string {
		if c.failed == "" {
			return "pass"
		}
		return "FAIL"
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n| behaviour | registry | alone | go-micro cache | regcache |\n| --- | --- | --- | --- | --- |\n")
	for hi, h := range dropinBehaviours {
		for bi, b := range backends {
			row := cells[bi][hi]
			fmt.Fprintf(&table, "| %s | %s | %s | %s | %s |\n", h.name, b.name, mark(row[0]), mark(row[1]), mark(row[2]))
		}
	}
	passed := make([]int, len(dropinWays))
	total := 0
	var why strings.Builder
	for hi, h := range dropinBehaviours {
		for bi, b := range backends {
			total++
			for wi, c := range cells[bi][hi] {
				if c.failed == "" {
					passed[wi]++
				} else {
					fmt.Fprintf(&why, "  %s, %s, %s: %s\n", h.name, b.name, dropinWays[wi].name, c.failed)
				}
			}
		}
	}
	fmt.Fprintf(&table, "| **passed** | | %d of %d | %d of %d | %d of %d |\n", passed[0], total, passed[1], total, passed[2], total)
	t.Logf("drop-in suite, %d behaviours on %d registries:%s", len(dropinBehaviours), len(backends), table.String())
	if why.Len() > 0 {
		t.Logf("what did not hold:\n%s", why.String())
	}
	for hi, h := range dropinBehaviours {
		for bi, b := range backends {
			gm, rc := cells[bi][hi][1], cells[bi][hi][2]
			if gm.failed == "" && rc.failed != "" {
				t.Errorf("%s, %s: holds through go-micro's cache, not through regcache: %s", h.name, b.name, rc.failed)
			}
		}
	}
}
