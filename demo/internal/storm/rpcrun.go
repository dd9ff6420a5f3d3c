package storm

import (
	"fmt"
	"sync"
	"time"

	"go-micro.dev/v4/client"
	"go-micro.dev/v4/selector"

	regcache "github.com/regcache/cache"
)

// rpcRun is the client path while it runs: the instances of RPCService,
// and a go-micro client per RPC client, each with RPCs arriving at
// Config.RPCRate.
type rpcRun struct {
	servers []*rpcServer
	groups  []*rpcGroup

	quit     chan struct{} // closed: no more arrivals
	arrivals sync.WaitGroup
}

// rpcGroup is one RPC client's go-micro client and its RPCs.
type rpcGroup struct {
	rc    RPCClient
	sel   selector.Selector
	stop  func()
	cli   client.Client
	t     *tally
	calls sync.WaitGroup // RPCs in flight
}

// beginClientPath stops the lookup callers, starts the instances of
// RPCService and the RPC clients, and sends RPCs. A unit in, the registry
// goes down and the last instance is killed; RPCs go on to the end of the
// scenario, and the ones in flight then are waited for (at most the request
// timeout).
func beginClientPath(r *runner) error {
	r.stopLookups()
	run, err := startRPC(r)
	if err != nil {
		return err
	}
	r.rpc = run
	r.during(func() error {
		defer run.close()
		r.sleepUntil(r.cfg.Unit())
		if err := r.b.Down(); err != nil {
			return fmt.Errorf("start the outage: %w", err)
		}
		dead := run.servers[len(run.servers)-1]
		if err := dead.stop(); err != nil {
			return fmt.Errorf("kill %s: %w", dead.node, err)
		}
		for _, g := range run.groups {
			g.t.open.Store(true)
		}
		r.sc.Origin = r.sinceStart()
		r.sleepUntil(r.length())
		run.drain()
		for _, g := range run.groups {
			g.t.open.Store(false)
			row := g.t.row(g.rc.Name)
			if s, ok := g.sel.(regcache.Selector); ok {
				row.Ejections, row.HasEjections = s.Stats().Ejections, true
			}
			r.sc.RPC = append(r.sc.RPC, row)
		}
		return nil
	})
	return nil
}

// startRPC starts the instances and the clients, and the arrivals of each
// client's RPCs. On an error it stops what it started.
func startRPC(r *runner) (*rpcRun, error) {
	run := &rpcRun{quit: make(chan struct{})}
	for i := 0; i < rpcInstances; i++ {
		s, err := startRPCServer(r.b, i)
		if err != nil {
			run.close()
			return nil, err
		}
		run.servers = append(run.servers, s)
	}
	dead := run.servers[len(run.servers)-1].node
	clients := r.cfg.RPCClients
	if clients == nil {
		clients = DefaultRPCClients()
	}
	for _, rc := range clients {
		conn, err := r.b.Client()
		if err != nil {
			run.close()
			return nil, fmt.Errorf("connect %s to the registry: %w", rc.Name, err)
		}
		inj := &injector{Registry: conn, latency: r.latency, refuses: r.b.Refuses}
		if r.cfg.Capacity > 0 {
			inj.slots = make(chan struct{}, r.cfg.Capacity)
		}
		g := &rpcGroup{rc: rc, t: newTally(dead, r.tl, int32(r.cur))}
		g.sel, g.stop = rc.New(inj)
		g.cli = newRPCClient(g.sel, g.t)
		run.groups = append(run.groups, g)
	}
	every := time.Second / time.Duration(r.cfg.RPCRate)
	for _, g := range run.groups {
		run.arrivals.Add(1)
		go run.arrive(g, every)
	}
	return run, nil
}

// arrive starts an RPC every `every`, each on a goroutine of its own, until
// quit: RPCs arrive at the same rate whatever the earlier ones are doing,
// as requests to a service do.
func (run *rpcRun) arrive(g *rpcGroup, every time.Duration) {
	defer run.arrivals.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := time.Now()
	for {
		select {
		case <-timer.C:
		case <-run.quit:
			return
		}
		g.calls.Add(1)
		go g.call()
		next = next.Add(every)
		if behind := time.Since(next); behind > 10*every {
			next = time.Now() // a pause (GC, a busy machine): no burst after it
		}
		timer.Reset(time.Until(next))
	}
}

// call makes one RPC and notes what it took.
func (g *rpcGroup) call() {
	defer g.calls.Done()
	counted := g.t.open.Load()
	req := g.cli.NewRequest(RPCService, "Greeter.Hello", &HelloRequest{Name: "demo"})
	rsp := new(HelloResponse)
	start := time.Now()
	ctx, st := g.t.rpcContext()
	err := g.cli.Call(ctx, req, rsp)
	d := time.Since(start)
	if err == nil && rsp.Greeting != "hello demo" {
		err = errBadAnswer
	}
	g.t.record(start, d, err, counted, st)
}

// drain stops the arrivals and waits for the RPCs in flight.
func (run *rpcRun) drain() {
	select {
	case <-run.quit:
	default:
		close(run.quit)
	}
	run.arrivals.Wait()
	for _, g := range run.groups {
		g.calls.Wait()
	}
}

// close drains the clients and stops them and every instance still up. The
// run ends with the registry down.
func (run *rpcRun) close() {
	run.drain()
	for _, g := range run.groups {
		g.stop()
	}
	for _, s := range run.servers {
		_ = s.stop() // the killed one is stopped already: a no-op
	}
}

// status is the progress line's: RPCs so far, and failed.
func (run *rpcRun) status() (ended, failed int64) {
	for _, g := range run.groups {
		ended += g.t.ended.Load()
		failed += g.t.failedAll.Load()
	}
	return ended, failed
}
