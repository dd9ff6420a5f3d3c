package integration

import (
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	gmcache "go-micro.dev/v4/registry/cache"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/transport"

	cache "github.com/regcache/cache"
)

// rpcTarget is how soon after a server's registration a client must get its
// first successful RPC through regcache.
const rpcTarget = 100 * time.Millisecond

// rpcClient is one way for a go-micro client to find its servers, each with
// its own etcd client, as separate processes would have.
type rpcClient struct {
	name string
	cl   client.Client
	// target is set for the client the rpcTarget applies to; the others
	// are measured for comparison.
	target bool
}

// newRPCClients returns a client through cache.NewSelector over regcache,
// and for comparison go-micro's default selector over regcache, over the
// raw etcd registry, and over go-micro's registry/cache. Every cache has
// its default options. Each call is one attempt (Retries(0)), so that the
// time of the first success is the time the client first found the server,
// not a retry backoff.
func newRPCClients(t *testing.T, s *etcdServer) []rpcClient {
	t.Helper()
	gmSelector := func(sel selector.Selector) selector.Selector {
		t.Cleanup(func() { sel.Close() })
		return sel
	}
	rc1 := newCache(t, newEtcdRegistry(t, s, 2*time.Second))
	rc2 := newCache(t, newEtcdRegistry(t, s, 2*time.Second))
	raw := newEtcdRegistry(t, s, 2*time.Second)
	gm := gmcache.New(newEtcdRegistry(t, s, 2*time.Second))
	t.Cleanup(gm.Stop)
	return []rpcClient{
		{name: "regcache, cache.NewSelector", cl: newClientWith(t, cache.NewSelector(rc1), 0), target: true},
		{name: "regcache, go-micro selector", cl: newClientWith(t, gmSelector(selector.NewSelector(selector.Registry(rc2))), 0)},
		{name: "go-micro selector, raw etcd", cl: newClientWith(t, gmSelector(selector.NewSelector(selector.Registry(raw))), 0)},
		{name: "go-micro selector, go-micro cache", cl: newClientWith(t, gmSelector(selector.NewSelector(selector.Registry(gm))), 0)},
	}
}

// newClientWith is a go-micro client over sel, every dependency explicit
// (see newClient for PoolSize(0)).
func newClientWith(t *testing.T, sel selector.Selector, retries int) client.Client {
	t.Helper()
	return client.NewClient(
		client.Selector(sel),
		client.Broker(broker.NewMemoryBroker()),
		client.Transport(transport.NewHTTPTransport()),
		client.RequestTimeout(5*time.Second),
		client.Retries(retries),
		client.PoolSize(0),
		client.WithLogger(newTestLogger(t)),
	)
}

// firstRPC is what a client saw until a server it wanted answered.
type firstRPC struct {
	at       time.Time // when the first RPC answered by the wanted server returned
	failures int       // RPCs that failed before it
	lastErr  error
	others   int // RPCs answered by another server
}

// callUntil calls name every 2 ms until the server with id want answers,
// or until deadline.
func callUntil(cl client.Client, name, want string, deadline time.Time) firstRPC {
	var r firstRPC
	for time.Now().Before(deadline) {
		rsp, err := hello(cl, name)
		switch {
		case err != nil:
			r.failures++
			r.lastErr = err
		case rsp.Server == want:
			r.at = time.Now()
			return r
		default:
			r.others++
		}
		time.Sleep(2 * time.Millisecond)
	}
	return r
}

// callAllUntil runs callUntil for every client at once, and returns once
// all are done. started is closed once every client has made its first
// call.
func callAllUntil(clients []rpcClient, name, want string, deadline time.Time) (results []firstRPC, started <-chan struct{}) {
	results = make([]firstRPC, len(clients))
	var wg sync.WaitGroup
	wg.Add(len(clients))
	done := make(chan struct{})
	for i, c := range clients {
		go func() {
			defer wg.Done()
			results[i] = callUntil(c.cl, name, want, deadline)
		}()
	}
	go func() { wg.Wait(); close(done) }()
	return results, done
}

// reportFirstRPCs logs each client's first successful RPC after registered,
// and fails the test if the target client's came later than rpcTarget.
func reportFirstRPCs(t *testing.T, what string, clients []rpcClient, results []firstRPC, registered time.Time) {
	t.Helper()
	for i, c := range clients {
		r := results[i]
		took := "never"
		if !r.at.IsZero() {
			took = r.at.Sub(registered).Round(100 * time.Microsecond).String()
		}
		t.Logf("%s, %-34s first successful RPC %8s after the registration; %4d failed RPCs before (last: %v)",
			what, c.name+":", took, r.failures, r.lastErr)
		if !c.target {
			continue
		}
		if r.at.IsZero() || r.at.Sub(registered) > rpcTarget {
			t.Errorf("%s, %s: first successful RPC %s after the registration, want within %v", what, c.name, took, rpcTarget)
		}
	}
}

// TestLateStartRPC: clients call greeter before it is registered, as in a
// compose file or a rollout where the caller starts first. Every call fails
// until greeter registers; through regcache the first call succeeds within
// rpcTarget of the registration: the create event makes the service
// servable at once, although the lookups before it were answered "not
// found" and throttled.
func TestLateStartRPC(t *testing.T) {
	const name = "it.late"
	s := startEtcd(t)
	clients := newRPCClients(t, s)

	results, done := callAllUntil(clients, name, "late-1", time.Now().Add(20*time.Second))
	// Long enough for every client's lookups to have failed, its retry
	// window to be open, and its watch to be established.
	time.Sleep(time.Second)
	g := startGreeter(t, s, name, "late-1")
	<-done
	reportFirstRPCs(t, "late start", clients, results, g.Registered())
	for i, c := range clients {
		if results[i].failures == 0 {
			t.Errorf("%s: no RPC failed before the registration; the test did not call early enough", c.name)
		}
	}
}

// TestRestartRPC: greeter's only instance stops, which deregisters it, and
// a new instance registers 200 ms later. Through regcache the first call
// to the new instance succeeds within rpcTarget of its registration: the
// delete of the last node did not make the service unservable for the
// retry interval.
func TestRestartRPC(t *testing.T) {
	const name = "it.restart"
	s := startEtcd(t)
	clients := newRPCClients(t, s)
	old := startGreeter(t, s, name, "restart-1")
	results, done := callAllUntil(clients, name, "restart-1", time.Now().Add(20*time.Second))
	<-done
	for i, c := range clients {
		if results[i].at.IsZero() {
			t.Fatalf("%s: no RPC reached the first instance: %v", c.name, results[i].lastErr)
		}
	}

	results, done = callAllUntil(clients, name, "restart-2", time.Now().Add(20*time.Second))
	time.Sleep(100 * time.Millisecond) // the clients are calling the old instance
	old.Stop()
	stopped := time.Now()
	time.Sleep(200 * time.Millisecond)
	g := startGreeter(t, s, name, "restart-2")
	<-done
	t.Logf("the old instance deregistered at %v, the new one registered %v after",
		old.Deregistering().Format("15:04:05.000"), g.Registered().Sub(stopped).Round(time.Millisecond))
	reportFirstRPCs(t, "restart", clients, results, g.Registered())
	for i, c := range clients {
		t.Logf("restart, %-34s %d RPCs answered by the old instance after the restart began", c.name+":", results[i].others)
	}
}
