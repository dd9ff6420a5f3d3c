package etcd

// The scoped stream's own gRPC stream (scoped.go): resumed when it breaks
// while the connection stays up, and failed when etcd does not acknowledge
// a watch in time.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cache "github.com/regcache/cache"
	"go-micro.dev/v4/registry"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// freezeProxy is a TCP proxy in front of etcd whose connections can be
// frozen: they stay open, but nothing crosses them, as through a network
// that drops every packet of an established connection.
type freezeProxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	frozen chan struct{} // nil while forwarding; closed to thaw
	conns  []net.Conn
}

func startFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &freezeProxy{target: target, ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(up, c)
			go p.pipe(c, up)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.thaw()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *freezeProxy) Addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			f := p.frozen
			p.mu.Unlock()
			if f != nil {
				<-f
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

func (p *freezeProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

func silentConnection(t *testing.T, holds int) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	p := startFreezeProxy(t, s.Addr())
	reg := &probe{Registry: newTestRegistry(t, p.Addr(), time.Second)}
	c := cache.New(reg, cache.WithTTL(time.Hour))
	var stopped atomic.Bool
	t.Cleanup(func() {
		if !stopped.Load() {
			c.Stop()
		}
	})
	if _, err := c.GetService("anchor"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetService(anchor): %v", err)
	}
	eventually(t, "the stream established", func() bool { return c.Stats().Stream == cache.StreamConnected })
	p.freeze()
	var wg sync.WaitGroup
	for i := 0; i < holds; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c.GetService(fmt.Sprintf("held-while-silent-%04d", i))
		}(i)
	}
	wg.Wait()
	t.Logf("%d entries held", c.Stats().Entries)
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Stream == cache.StreamConnected && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if st := c.Stats().Stream; st == cache.StreamConnected {
		t.Errorf("the stream is still %q 10 s after %d watches were asked for on a silent connection (timeout 1 s)", st, holds)
		logGoroutines(t, "(*scopedWatcher).send")
	}
	start := time.Now()
	c.Stop()
	stopped.Store(true)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %v", d)
	}
}

func resumeAfterCompaction(t *testing.T, compactFirst bool) {
	checkNoWatcherLeft(t)
	setQuietAfter(t, 100*time.Millisecond)
	s := startEtcd(t)
	p := startProxy(t, s.Addr())
	cl := newClient(t, s.Addr())
	const n = 20
	name := func(i int) string { return fmt.Sprintf("quiet-%02d", i) }
	for i := 0; i < n; i++ {
		putNode(t, cl, service(name(i), "1", "a"))
	}
	c, reg := newScopedCache(t, p.Addr(), cache.WithMinimumRetryInterval(100*time.Millisecond))
	w := reg.scoped(t)
	for i := 0; i < n; i++ {
		if ids := lookupIDsAfterGet(t, c, name(i)); len(ids) != 1 {
			t.Fatalf("%s: %v", name(i), ids)
		}
	}
	eventually(t, "every watch acknowledged", func() bool {
		for i := 0; i < n; i++ {
			if _, created, _ := w.watchOf(name(i)); !created {
				return false
			}
		}
		return true
	})
	var rev int64
	for i := 0; i < 5; i++ {
		rev = putNode(t, cl, service("unheld", "1", fmt.Sprintf("u%d", i)))
	}
	eventually(t, "the stream's revision recent", func() bool { return w.noted() >= rev })
	// A progress notification (the watchdog asks for one while the
	// stream is quiet) tells that every watch has all it had up to the
	// revision: each quiet watch resumes after it.
	eventually(t, "a progress notification", func() bool {
		for i := 0; i < n; i++ {
			if _, _, next := w.watchOf(name(i)); next <= rev {
				return false
			}
		}
		return true
	})
	if compactFirst {
		compact(t, cl, rev)
	}
	p.mu.Lock()
	p.closeAllLocked() // the proxy keeps accepting: the connection comes back
	p.mu.Unlock()
	eventually(t, "the stream resumed", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.resumed.IsZero()
	})
	if reg.streams() != 1 {
		t.Fatalf("the cut ended the stream (%d streams) rather than resume it: inconclusive", reg.streams())
	}
	time.Sleep(time.Second) // the resumed watches created, any restart and re-fetch made
	extra := 0
	for i := 0; i < n; i++ {
		extra += reg.callsFor(name(i)) - 1
	}
	if extra != 0 {
		t.Errorf("a resumption cost %d registry calls for %d services that did not change", extra, n)
	}
	if reg.streams() != 1 {
		t.Errorf("%d watch streams; want 1", reg.streams())
	}
	putNode(t, cl, service(name(0), "1", "b"))
	eventually(t, "a later change served", func() bool { return len(lookupIDs(c, name(0))) == 2 })
}

// A stream that breaks while the connection comes straight back (here: a
// proxy that cuts its connections and forwards new ones) is resumed, each
// watch from the revision after the last etcd sent of it, or after etcd's
// last answer to a progress request: a quiet watch resumes there, not at its
// start, so that a compaction since costs no registry call. It holds off a
// bug where progress was not applied to quiet watches: after etcd compacted,
// as it does periodically, every quiet service's watch resumed at a
// compacted revision and had its service fetched again, a registry call per
// service held, more than the cache's own resync.
func TestAResumptionAfterACompactionCostsNoRegistryCall(t *testing.T) {
	resumeAfterCompaction(t, true)
}

// The same cut without a compaction resumes every watch with no registry
// call.
func TestAResumptionCostsNoRegistryCall(t *testing.T) {
	resumeAfterCompaction(t, false)
}

// After a resumption every watch is asked for again, and a new stream that
// takes the requests but never acknowledges them fails within the
// registry's Timeout. It holds off a bug where a resumption did not arm the
// watchdog, which slept until the end of the quiet period it had set (up to
// 5 s). Fake stream (newScopedWatcherOn): a real etcd always acknowledges.
func TestAWatchUnacknowledgedOnAResumedStreamFailsItInTime(t *testing.T) {
	checkNoWatcherLeft(t)
	// anchor has a node, so that the cache keeps holding it (a service
	// not found is dropped when its retry window ends).
	_, scope := memoryScope(t, service("anchor", "1", "a1"))
	streams := make(chan *fakeStream, 4)
	open := func(ctx context.Context) (pb.Watch_WatchClient, error) {
		s := newFakeStream(ctx)
		s.resps <- created(sentinelID, 10)
		streams <- s
		return s, nil
	}
	const timeout = 200 * time.Millisecond
	w, err := newScopedWatcherOn(open, newFakeConn(connectivity.Ready), scope, context.Background(), timeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first := <-streams
	first.request(t) // the sentinel
	first.request(t) // anchor's
	first.resps <- created(2, 11)
	eventually(t, "anchor's watch acknowledged", func() bool { _, created, _ := w.watchOf("anchor"); return created })
	// Past anchor's first deadline: the watchdog sleeps until the quiet
	// period is over.
	time.Sleep(2 * timeout)
	first.resps <- fakeRecv{err: status.Error(codes.Unavailable, "transport is closing")}
	second := <-streams
	second.request(t) // the sentinel
	if r := second.request(t).GetCreateRequest(); r == nil || r.WatchId != 2 {
		t.Fatalf("request %v, want anchor's watch again", r)
	}
	start := time.Now()
	res, err := next(t, w, 10*time.Second)
	if !errors.Is(err, errAckTimeout) {
		t.Fatalf("Next: %v, %v; want a watch not acknowledged", res, err)
	}
	if d := time.Since(start); d > 5*timeout {
		t.Errorf("a watch asked for again on the resumed stream and never acknowledged failed the stream after %v; the timeout is %v", d.Round(time.Millisecond), timeout)
	}
}

// A watch not acknowledged within the registry's Timeout fails the stream,
// whether or not the sender is stuck: on a connection gone silent (no RST:
// a peer or network that drops packets) with enough services held
// meanwhile, the requests exceed HTTP/2's flow-control window, and Send
// blocks until etcd's window update, which never comes. It holds off a bug
// where the sender checked for overdue watches only after it had sent every
// request waiting: the stream stayed "connected", and Next blocked, for as
// long as the connection stayed silent. The watchdog now checks on its own.
func TestASilentConnectionFailsTheStreamWithManyServicesHeld(t *testing.T) {
	silentConnection(t, 1500)
}

// The same with a few services held, whose requests Send takes.
func TestASilentConnectionFailsTheStreamWithFewServicesHeld(t *testing.T) {
	silentConnection(t, 5)
}
