package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/transport"

	cache "github.com/regcache/cache"
)

// The dead-node scenario: a service of three instances, one of which dies
// during an etcd outage, called at a steady rate for deadWindow.
const (
	deadRate   = 50              // RPCs a second, per client
	deadWindow = 6 * time.Second // of arrivals; the RPCs in flight then are waited for
	// deadTarget is the largest share of a client's attempts that may
	// go to the dead node once it has failed settleAfter times in a row.
	deadTarget = 0.02
	// instanceTTL is the lease of each instance's registration: longer
	// than the test, so that the dead node stays in etcd throughout.
	instanceTTL = time.Minute
)

// instance is one instance of the scenario's service: a go-micro server in
// the test process, with an Id of its own and an etcd client of its own.
type instance struct {
	srv  server.Server
	node string // its node Id: go-micro names it service-id
}

// startInstance starts an instance of name. It registers once, at Start,
// with a lease of instanceTTL, and never deregisters (keepRegistry), so that
// stopping it is a hard kill: the listener closes, and the node stays in
// etcd until its lease expires, as when a process dies.
func startInstance(t *testing.T, s *etcdServer, name, id string) *instance {
	t.Helper()
	in := &instance{node: name + "-" + id}
	in.srv = server.NewServer(
		server.Name(name),
		server.Id(id), // go-micro's default Id is one per process
		server.Version("1.0.0"),
		server.Address("127.0.0.1:0"),
		server.Registry(keepRegistry{Registry: newEtcdRegistry(t, s, 2*time.Second)}),
		server.Broker(broker.NewMemoryBroker()),
		server.Transport(transport.NewHTTPTransport()),
		server.RegisterTTL(instanceTTL),
		server.RegisterInterval(0), // no re-registration, which would block Stop during the outage
		server.WithLogger(newTestLogger(t)),
	)
	if err := in.srv.Handle(in.srv.NewHandler(&Greeter{id: in.node})); err != nil {
		t.Fatalf("instance %s: handle: %v", in.node, err)
	}
	if err := in.srv.Start(); err != nil {
		t.Fatalf("instance %s: start: %v", in.node, err)
	}
	t.Cleanup(in.kill)
	return in
}

// kill stops the instance without deregistering it: it waits for the
// requests it is serving and closes its listener. It is idempotent.
func (in *instance) kill() { _ = in.srv.Stop() }

// keepRegistry registers and never deregisters.
type keepRegistry struct{ registry.Registry }

func (keepRegistry) Deregister(*registry.Service, ...registry.DeregisterOption) error { return nil }

// deadClient is one of the go-micro clients compared in the scenario.
type deadClient struct {
	name, wiring string
	cl           client.Client
	sel          selector.Selector // what it selects with, unwrapped
	t            *deadTally
	calls        sync.WaitGroup
}

// newDeadClient is a go-micro client over sel. Every client of the
// scenario is built the same way (see retryPolicy), with every dependency
// explicit; it has no client.Registry, which would re-initialise the
// selector.
func newDeadClient(name, wiring string, sel selector.Selector, dead string) *deadClient {
	c := &deadClient{name: name, wiring: wiring, sel: sel, t: &deadTally{dead: dead}}
	c.cl = client.NewClient(
		client.Selector(&markingSelector{Selector: sel, t: c.t}),
		client.Broker(broker.NewMemoryBroker()),
		client.Transport(transport.NewHTTPTransport()),
		client.PoolSize(0), // see newClient
		client.Retries(client.DefaultRetries),
		client.Retry(retryUnreachable),
		client.RequestTimeout(deadRequestTimeout),
		client.WrapCall(c.t.wrap),
		client.WithLogger(quietLogger()),
	)
	return c
}

// warm calls name until every one of nodes has answered.
func (c *deadClient) warm(t *testing.T, name string, nodes []string) {
	t.Helper()
	seen := map[string]bool{}
	waitFor(t, 10*time.Second, c.name+": every instance answered", func() bool {
		rsp, err := hello(c.cl, name)
		if err == nil {
			seen[rsp.Server] = true
		}
		for _, n := range nodes {
			if !seen[n] {
				return false
			}
		}
		return true
	})
}

// drive calls name through every client at rate RPCs a second each, for d,
// each RPC on a goroutine of its own, so that RPCs arrive at the same rate
// whatever the earlier ones are doing. It returns once every RPC has ended.
func drive(clients []*deadClient, name string, rate int, d time.Duration) {
	for _, c := range clients {
		c.t.open.Store(true)
	}
	var arrivals sync.WaitGroup
	for _, c := range clients {
		arrivals.Add(1)
		go func() {
			defer arrivals.Done()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			end := time.After(d)
			for {
				select {
				case <-end:
					return
				case <-tick.C:
				}
				c.calls.Add(1)
				go func() {
					defer c.calls.Done()
					start := time.Now()
					rsp, err := hello(c.cl, name)
					if err == nil && rsp.Greeting != "hello it" {
						err = fmt.Errorf("wrong answer %+v", rsp)
					}
					c.t.record(time.Since(start), err)
				}()
			}
		}()
	}
	arrivals.Wait()
	for _, c := range clients {
		c.calls.Wait()
		c.t.open.Store(false)
	}
}

// deadMisses lists the targets a client's row misses: every RPC succeeds,
// and once the dead node has failed settleAfter times in a row it gets at
// most deadTarget of the attempts.
func deadMisses(r deadRow) []string {
	var miss []string
	if r.Failed > 0 {
		miss = append(miss, fmt.Sprintf("%d of %d RPCs failed (last: %v)", r.Failed, r.RPCs, r.LastErr))
	}
	switch {
	case !r.WasSettled && r.Dead <= settleAfter:
		// Ejected before it could fail settleAfter times in a row (a
		// refused connection ejects at once): at most that many attempts
		// went to it in all, better than any share after settling.
	case !r.WasSettled:
		miss = append(miss, fmt.Sprintf("the dead node never failed %d times in a row (%d attempts went to it)", settleAfter, r.Dead))
	case r.Settled < 100:
		miss = append(miss, fmt.Sprintf("only %d attempts after the first few: too few to measure", r.Settled))
	case r.settledShare() > deadTarget:
		miss = append(miss, fmt.Sprintf("%d of %d attempts (%.1f %%) after the first few went to the dead node, target ≤ %.0f %%",
			r.SettledDead, r.Settled, 100*r.settledShare(), 100*deadTarget))
	}
	return miss
}

// TestDeadNodeDuringOutage: a service has three instances registered in
// etcd. etcd goes down, and during the outage one instance dies without
// deregistering: its node stays in etcd, and in every cache, which serve
// their data while etcd is down. Three go-micro clients, with the same
// retry policy and request timeout, call the service at a steady rate:
//
//   - go-micro's default selector over go-micro's registry/cache, which
//     ignores Mark: about a third of its attempts go to the dead node;
//   - cache.NewSelector over regcache, at its defaults: once the dead node
//     has failed a few times in a row it is ejected; every RPC succeeds,
//     and at most deadTarget of the attempts after the first few go to it;
//   - the same with passive health off (WithEjectAfter(0)), which must miss
//     that target: the check can fail.
func TestDeadNodeDuringOutage(t *testing.T) {
	const name = "it.deadnode"
	s := startEtcd(t)
	var instances []*instance
	var nodes []string
	for i := 1; i <= 3; i++ {
		in := startInstance(t, s, name, fmt.Sprint(i))
		instances = append(instances, in)
		nodes = append(nodes, in.node)
	}
	dead := instances[2]

	gm := gmcache.New(newEtcdRegistry(t, s, 2*time.Second))
	t.Cleanup(gm.Stop)
	gmSel := selector.NewSelector(selector.Registry(gm))
	t.Cleanup(func() { gmSel.Close() })
	rcReg := newCountingRegistry(newEtcdRegistry(t, s, 2*time.Second))
	rc := newCache(t, rcReg)
	offReg := newCountingRegistry(newEtcdRegistry(t, s, 2*time.Second))
	off := newCache(t, offReg)

	gmClient := newDeadClient("go-micro selector, go-micro cache",
		"selector.NewSelector(selector.Registry(gmcache.New(reg))), TTL 1m", gmSel, dead.node)
	rcClient := newDeadClient("regcache, cache.NewSelector",
		"cache.NewSelector(cache.New(reg)), defaults", cache.NewSelector(rc), dead.node)
	offClient := newDeadClient("regcache, passive health off",
		"cache.NewSelector(cache.New(reg), cache.WithEjectAfter(0))", cache.NewSelector(off, cache.WithEjectAfter(0)), dead.node)
	clients := []*deadClient{gmClient, rcClient, offClient}

	// Warm: every client has reached every instance, so every cache holds
	// the three nodes. regcache's watch streams must be up before etcd
	// stops, or the caches could not stop until it is back.
	for _, c := range clients {
		c.warm(t, name, nodes)
	}
	writer := newEtcdRegistry(t, s, 2*time.Second)
	waitStream(t, rcReg, writer)
	waitStream(t, offReg, writer)

	s.Stop()
	dead.kill()
	t.Logf("etcd stopped; %s killed without deregistering", dead.node)
	start := time.Now()
	drive(clients, name, deadRate, deadWindow)
	t.Logf("%d RPCs a second per client for %v; the last RPC ended %v after the kill",
		deadRate, deadWindow, time.Since(start).Round(time.Millisecond))

	// The scenario's premise: the dead node is still in the caches.
	if got := cachedIDs(rc, name); !strings.Contains(got, dead.node) {
		t.Fatalf("regcache holds %s for %s, without the dead node", got, name)
	}
	if svcs, err := gm.GetService(name); err != nil || !hasNode(svcs, dead.node) {
		t.Fatalf("go-micro's cache holds %v (%v) for %s, without the dead node", nodeIDs(svcs), err, name)
	}
	t.Logf("after the window, regcache and go-micro's cache still hold %s", cachedIDs(rc, name))

	rows := map[*deadClient]deadRow{}
	t.Logf("retry policy of every client: %s", retryPolicy())
	t.Logf("%-32s %6s %8s %8s %13s %14s %8s %8s %8s",
		"client", "RPCs", "success", "attempts", "to dead node", "after 3 fails", "p50", "p99", "max")
	for _, c := range clients {
		r := c.t.row()
		rows[c] = r
		t.Logf("%-32s %6d %7.2f%% %8d %6d %5.1f%% %6d/%-4d %3.1f%% %8v %8v %8v",
			c.name, r.RPCs, 100*share(int64(r.RPCs-r.Failed), int64(r.RPCs)), r.Attempts,
			r.Dead, 100*r.deadShare(), r.SettledDead, r.Settled, 100*r.settledShare(),
			r.P50.Round(100*time.Microsecond), r.P99.Round(100*time.Microsecond), r.Max.Round(100*time.Microsecond))
	}
	for _, c := range clients {
		t.Logf("%s: %s; attempts by node: %s", c.name, c.wiring, c.t.byNodes(nodes))
		if r := rows[c]; r.Failed > 0 {
			t.Logf("%s: last error: %v", c.name, r.LastErr)
		}
		if s, ok := c.sel.(cache.Selector); ok {
			st := s.Stats()
			t.Logf("%s: selector stats: %d failures, %d ejections, ejected now: %+v", c.name, st.Failures, st.Ejections, st.Ejected)
		}
	}

	t.Run("regcache meets the targets", func(t *testing.T) {
		for _, m := range deadMisses(rows[rcClient]) {
			t.Error(m)
		}
	})
	// The other two show that the scenario puts the dead node in the way
	// and that the check above can fail: without passive health, a
	// uniform pick among three nodes sends about a third of the attempts
	// to the dead one.
	for _, c := range []*deadClient{offClient, gmClient} {
		t.Run(c.name+" misses them", func(t *testing.T) {
			r := rows[c]
			if len(deadMisses(r)) == 0 {
				t.Errorf("meets the targets without passive health")
			}
			if sh := r.settledShare(); !r.WasSettled || sh < 0.2 || sh > 0.5 {
				t.Errorf("%d of %d attempts (%.1f %%) after the first few went to the dead node, want about a third",
					r.SettledDead, r.Settled, 100*sh)
			}
		})
	}
}
