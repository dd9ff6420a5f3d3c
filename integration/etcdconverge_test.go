package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	lossless "github.com/regcache/cache/etcd"
)

// The tests of this file hold off three ways, found by a black-box suite
// (issue 29), in which a cache over github.com/regcache/cache/etcd served
// old data from a real etcd for a whole retry window: a first fetch raced
// by more events than the cache keeps for replay, a connection blip during
// which etcd compacts, and the resync after an outage. In each, every
// service must be served as etcd holds it within the probe interval (1 s)
// plus the registry's answer, counted from the moment the race or the
// fault ends. What etcd holds is read from etcd, not assumed.
//
// The file is written once: integration5's copy is this one with its
// imports changed (integration5/conformance_twin_test.go). It uses the
// deploy* helpers of deployments_test.go, twinned too, and helpers of its
// own, named conv*.

// convProbe is the caches' probe interval, and the first term of every
// limit here.
const convProbe = time.Second

// convGiveUp is how long a test waits for the cache to serve what etcd
// holds before it stops waiting: past every limit, so that a failure
// says when the cache got there, if it did.
const convGiveUp = 12 * time.Second

// TestFirstFetchRacedByManyEvents: a service's first fetch is raced by 300
// events, more than the 256 that the cache keeps for replay onto the
// fetch's answer: 300 of its 400 nodes updated, or deleted, after etcd
// answered and before the answer reached the cache. Neither the answer nor
// the events kept are what etcd holds; the cache must serve what etcd
// holds within the probe interval plus a registry answer of the end of
// the first fetch, not at the end of the retry window (4 s here).
//
// Before the fix (87ca569), the answer was dropped and the data built
// from the events kept, for the whole retry window: 300 nodes served of
// 400, and 144 (the 400 less the 256 deletes kept) where etcd held 100.
func TestFirstFetchRacedByManyEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		delete bool
	}{{"300 of 400 updated", false}, {"300 of 400 deleted", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const svc = "conv-raced"
			s := startDeployEtcd(t, false)
			cl := s.client(t, "")
			ids := deployIDs("n", 0, 400)
			convPut(t, cl, svc, "127.0.0.1:1", ids...)
			convPut(t, cl, "conv-warm", "127.0.0.1:1", "w0")

			c, reg := convCache(t, s.Addr(), 4*time.Second)
			convWarm(t, c, cl, "conv-warm")
			fetched, release := reg.holdAnswer(svc)
			done := make(chan error, 1)
			go func() {
				_, err := c.GetService(svc)
				done <- err
			}()
			select {
			case <-fetched:
			case <-time.After(10 * time.Second):
				t.Fatal("the first fetch did not reach etcd within 10 s")
			}
			// etcd has answered; its answer waits while 300 nodes change,
			// in three transactions of 100.
			raced := ids[:300]
			if tc.delete {
				convDelete(t, cl, svc, raced...)
			} else {
				convPut(t, cl, svc, "127.0.0.1:2", raced...)
			}
			deployWaitFor(t, 10*time.Second, "the cache applying the 300 events", func() bool {
				return reg.applied(svc) >= len(raced)
			})
			answered := time.Now()
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("first GetService(%s): %v", svc, err)
			}
			t.Logf("first fetch done %v after its answer was let through", time.Since(answered).Round(time.Millisecond))
			convConverge(t, c, reg, cl, answered, "after a first fetch raced by 300 events", svc)
		})
	}
}

// TestCompactionDuringABlip: the cache's connection to etcd breaks, and
// is back 300 ms later, within the etcd module's grace of a second, so
// that the module resumes its watches rather than fail the stream. While
// it is away, 10 services held each have a node replaced, and etcd
// compacts past those changes: the module meets the compaction when it
// resumes, and the changes are not in any watch. Every service must be
// served as etcd holds it within the probe interval plus the registry's
// answer of the blip's end, not at the end of its retry window (6 s
// here). The control, without the compaction, shows the watches resumed
// with every change.
//
// Before the fix (87ca569), the module restarted each watch at the
// compaction and had the cache re-validate the services under their retry
// windows: all 10 kept their old nodes until 5.7 s after the blip.
func TestCompactionDuringABlip(t *testing.T) {
	for _, compacted := range []bool{true, false} {
		name := "compacted"
		if !compacted {
			name = "not compacted"
		}
		t.Run(name, func(t *testing.T) {
			s := startDeployEtcd(t, false)
			cl := s.client(t, "")
			p := startConvProxy(t, s.Addr())
			names := convNames("conv-blip", 10)
			for _, n := range names {
				convPut(t, cl, n, "127.0.0.1:1", n+"-a")
			}
			c, reg := convCache(t, p.addr(), 6*time.Second)
			convWarm(t, c, cl, names...)
			reconnects := c.Stats().WatchReconnects

			blip := time.Now()
			p.blip()
			for _, n := range names {
				convReplace(t, cl, n, n+"-a", n+"-b")
			}
			if compacted {
				// A change after them, so that every watch resumes below
				// the compaction.
				rev := convPut(t, cl, "conv-unheld", "127.0.0.1:1", "u0")
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := cl.Compact(ctx, rev)
				cancel()
				if err != nil {
					t.Fatalf("compact at %d: %v", rev, err)
				}
			}
			time.Sleep(time.Until(blip.Add(300 * time.Millisecond))) // the blip's length
			p.release()
			ended := time.Now()
			convConverge(t, c, reg, cl, ended, "after a blip of 300 ms", names...)
			if p.accepted() < 2 {
				t.Errorf("the connection was not re-established (%d accepted): inconclusive", p.accepted())
			}
			if n := c.Stats().WatchReconnects - reconnects; n != 0 {
				t.Errorf("the stream was re-established %d times: the blip was not within the module's grace, inconclusive", n)
			}
		})
	}
}

// TestResyncAfterAnOutage: the cache is cut off from etcd for 2 s, during
// which each service held has a node replaced, or, in the second case,
// two of them lose every node. When it is back, the resync must serve
// every service as etcd holds it within the probe interval plus the
// registry's answer: with 4 services, which it asks for one by one, and
// with 12, which it lists at once, the two emptied ones, absent from the
// list, asked for one by one. The retry interval is an hour: only the
// resync can bring the changes in time.
//
// Before the fix (87ca569), the resync waited for each service's retry
// window: with 4 services, all 4 stale until their windows closed (7.5 s
// after the return with a 10 s interval); with 12, the 2 emptied ones
// kept serving their dead nodes.
func TestResyncAfterAnOutage(t *testing.T) {
	for _, tc := range []struct {
		name       string
		n, emptied int
	}{{"4 services", 4, 0}, {"12 services, 2 emptied", 12, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startDeployEtcd(t, false)
			cl := s.client(t, "")
			p := startConvProxy(t, s.Addr())
			names := convNames("conv-out", tc.n)
			for _, n := range names {
				convPut(t, cl, n, "127.0.0.1:1", n+"-a")
			}
			c, reg := convCache(t, p.addr(), time.Hour)
			convWarm(t, c, cl, names...)
			reconnects := c.Stats().WatchReconnects

			cut := time.Now()
			p.cut()
			deployWaitFor(t, 2*time.Second, "the cache seeing its stream lost", func() bool {
				return c.Stats().Stream != cache.StreamConnected
			})
			emptied := names[:tc.emptied]
			for _, n := range emptied {
				convDelete(t, cl, n, n+"-a", n+"-w") // every node
			}
			for _, n := range names[tc.emptied:] {
				convReplace(t, cl, n, n+"-a", n+"-b")
			}
			time.Sleep(time.Until(cut.Add(2 * time.Second))) // the outage's length
			p.restore()
			back := time.Now()
			convConverge(t, c, reg, cl, back, "after a 2 s outage", names...)
			if c.Stats().WatchReconnects == reconnects {
				t.Errorf("the stream was not re-established: inconclusive")
			}
		})
	}
}

// convCache is a cache, with a TTL of an hour and retry as its retry
// interval, over the etcd module's registry at addr, wrapped in a
// convRegistry. It stops when the test ends.
func convCache(t *testing.T, addr string, retry time.Duration) (cache.Cache, *convRegistry) {
	t.Helper()
	log := newDeployLog(t)
	reg := newConvRegistry(lossless.NewRegistry(registry.Addrs(addr), registry.Timeout(deployTimeout),
		registry.Logger(log), lossless.LogConfig(deployZap())))
	c := cache.New(reg, cache.WithTTL(time.Hour), cache.WithMinimumRetryInterval(retry),
		cache.WithProbeInterval(convProbe), cache.WithLogger(log))
	t.Cleanup(c.Stop)
	return c, reg
}

// convWarm looks each of names up, once the stream is established (so
// that no answer is re-validated for predating it), and makes sure that
// each one's watch delivers: a node registered for each, in one
// transaction, is served through it.
func convWarm(t *testing.T, c cache.Cache, cl *clientv3.Client, names ...string) {
	t.Helper()
	if _, err := c.GetService(names[0]); err != nil {
		t.Fatalf("GetService(%s): %v", names[0], err)
	}
	deployWaitFor(t, 5*time.Second, "the stream established", func() bool {
		return c.Stats().Stream == cache.StreamConnected
	})
	ops := make([]clientv3.Op, len(names))
	for i, n := range names {
		if _, err := c.GetService(n); err != nil {
			t.Fatalf("GetService(%s): %v", n, err)
		}
		ops[i] = convPutOp(t, n, n+"-w", "127.0.0.1:1")
	}
	convTxn(t, cl, ops)
	deployWaitFor(t, 5*time.Second, "every watch delivering", func() bool {
		for _, n := range names {
			served, err := convServed(c, n)
			if err != nil || served[n+"-w"] == "" {
				return false
			}
		}
		return true
	})
}

func convNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return names
}

// convKey is the key of node id of service name, as go-micro's etcd
// registry writes it.
func convKey(name, id string) string { return path.Join("/micro/registry", name, id) }

func convPutOp(t *testing.T, name, id, addr string) clientv3.Op {
	t.Helper()
	b, err := json.Marshal(&registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{{Id: id, Address: addr}}})
	if err != nil {
		t.Fatal(err)
	}
	return clientv3.OpPut(convKey(name, id), string(b))
}

// convTxn commits ops, 100 to a transaction (etcd takes 128 at most), and
// returns the revision of the last.
func convTxn(t *testing.T, cl *clientv3.Client, ops []clientv3.Op) int64 {
	t.Helper()
	var rev int64
	for len(ops) > 0 {
		n := min(len(ops), 100)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cl.Txn(ctx).Then(ops[:n]...).Commit()
		cancel()
		if err != nil {
			t.Fatalf("etcd transaction: %v", err)
		}
		rev = resp.Header.Revision
		ops = ops[n:]
	}
	return rev
}

// convPut writes a node at addr for each id of service name.
func convPut(t *testing.T, cl *clientv3.Client, name, addr string, ids ...string) int64 {
	t.Helper()
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		ops[i] = convPutOp(t, name, id, addr)
	}
	return convTxn(t, cl, ops)
}

// convDelete deletes the nodes ids of service name.
func convDelete(t *testing.T, cl *clientv3.Client, name string, ids ...string) {
	t.Helper()
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		ops[i] = clientv3.OpDelete(convKey(name, id))
	}
	convTxn(t, cl, ops)
}

// convReplace replaces node old of service name by node new, in one
// transaction.
func convReplace(t *testing.T, cl *clientv3.Client, name, old, new string) {
	t.Helper()
	convTxn(t, cl, []clientv3.Op{clientv3.OpDelete(convKey(name, old)), convPutOp(t, name, new, "127.0.0.1:2")})
}

// convNodes is a service's nodes: address by node id.
type convNodes map[string]string

// convHeld reads from etcd the nodes it holds for service name.
func convHeld(t *testing.T, cl *clientv3.Client, name string) convNodes {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cl.Get(ctx, convKey(name, "")+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read %s from etcd: %v", name, err)
	}
	held := convNodes{}
	for _, kv := range resp.Kvs {
		var s registry.Service
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			t.Fatalf("%s: %v", kv.Key, err)
		}
		for _, n := range s.Nodes {
			held[n.Id] = n.Address
		}
	}
	return held
}

// convServed is what the cache serves for name: its nodes, none for a
// not-found, or the error.
func convServed(c cache.Cache, name string) (convNodes, error) {
	svcs, err := c.Lookup(name)
	if errors.Is(err, registry.ErrNotFound) {
		return convNodes{}, nil
	}
	if err != nil {
		return nil, err
	}
	served := convNodes{}
	for _, s := range svcs {
		for _, n := range s.Nodes {
			served[n.Id] = n.Address
		}
	}
	return served, nil
}

// convWrong describes the services of names that the cache does not serve
// as etcd holds them (truth), or returns "".
func convWrong(c cache.Cache, names []string, truth map[string]convNodes) string {
	var wrong []string
	for _, n := range names {
		served, err := convServed(c, n)
		if err != nil {
			wrong = append(wrong, fmt.Sprintf("%s: %v", n, err))
			continue
		}
		same := 0
		for id, addr := range served {
			if held, ok := truth[n][id]; ok && held == addr {
				same++
			}
		}
		if same != len(served) || same != len(truth[n]) {
			wrong = append(wrong, fmt.Sprintf("%s: %d nodes served, %d of them as etcd holds them, where etcd holds %d", n, len(served), same, len(truth[n])))
		}
	}
	if len(wrong) == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d services: %s", len(wrong), len(names), strings.Join(wrong, "; "))
}

// convConverge waits until the cache serves every one of names as etcd
// holds it, and fails unless it did within the probe interval plus the
// registry's slowest answer to the calls that the cache made since since.
func convConverge(t *testing.T, c cache.Cache, reg *convRegistry, cl *clientv3.Client, since time.Time, what string, names ...string) {
	t.Helper()
	truth := map[string]convNodes{}
	for _, n := range names {
		truth[n] = convHeld(t, cl, n)
	}
	var atLimit string // what was wrong when the limit passed
	for {
		now := time.Now()
		wrong := convWrong(c, names, truth)
		if wrong == "" {
			break
		}
		if atLimit == "" && now.Sub(since) > convProbe+reg.slowestSince(since) {
			atLimit = fmt.Sprintf("at %v: %s", now.Sub(since).Round(time.Millisecond), wrong)
		}
		if now.Sub(since) > convGiveUp {
			t.Fatalf("%s: not served as etcd holds them within %v; %s; registry calls since: %s", what, convGiveUp, wrong, reg.callsSince(since))
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(since)
	answer := reg.slowestSince(since)
	t.Logf("%s: %d services served as etcd holds them in %v (limit %v + the registry's slowest answer, %v); registry calls: %s",
		what, len(names), took.Round(time.Millisecond), convProbe, answer.Round(time.Millisecond), reg.callsSince(since))
	if took > convProbe+answer {
		t.Errorf("%s: served as etcd holds them %v after, not within %v + %v; %s", what, took.Round(time.Millisecond), convProbe, answer.Round(time.Millisecond), atLimit)
	}
}

// convRegistry times the registry calls that a cache makes, counts the
// events of each service that the cache has applied, and can hold the
// answer to a GetService until the test lets it through.
type convRegistry struct {
	registry.Registry

	mu    sync.Mutex
	calls []convCall
	holds map[string]*convHold
	// returned counts the events of each service that Next returned, and
	// settled those the cache had applied: the ones returned before it
	// called Next again.
	returned, settled map[string]int
}

type convCall struct {
	what       string
	start, end time.Time
}

type convHold struct{ fetched, release chan struct{} }

func newConvRegistry(r registry.Registry) *convRegistry {
	return &convRegistry{Registry: r, holds: map[string]*convHold{}, returned: map[string]int{}, settled: map[string]int{}}
}

// holdAnswer holds the answer to the next GetService of name: fetched is
// closed once etcd has answered, and the answer reaches the cache once
// release is closed.
func (r *convRegistry) holdAnswer(name string) (fetched <-chan struct{}, release chan struct{}) {
	h := &convHold{fetched: make(chan struct{}), release: make(chan struct{})}
	r.mu.Lock()
	r.holds[name] = h
	r.mu.Unlock()
	return h.fetched, h.release
}

func (r *convRegistry) begin(what string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, convCall{what: what, start: time.Now()})
	return len(r.calls) - 1
}

func (r *convRegistry) end(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[i].end = time.Now()
}

func (r *convRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	i := r.begin("GetService " + name)
	svcs, err := r.Registry.GetService(name, opts...)
	r.end(i)
	r.mu.Lock()
	h := r.holds[name]
	delete(r.holds, name)
	r.mu.Unlock()
	if h != nil {
		close(h.fetched)
		<-h.release
	}
	return svcs, err
}

func (r *convRegistry) ListServices(opts ...registry.ListOption) ([]*registry.Service, error) {
	i := r.begin("ListServices")
	defer r.end(i)
	return r.Registry.ListServices(opts...)
}

func (r *convRegistry) Watch(opts ...registry.WatchOption) (registry.Watcher, error) {
	w, err := r.Registry.Watch(opts...)
	if err != nil {
		return nil, err
	}
	return &convWatcher{Watcher: w, r: r}, nil
}

// slowestSince is the longest that a GetService or ListServices call
// started at since or after took, or has taken so far.
func (r *convRegistry) slowestSince(since time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var slowest time.Duration
	for _, c := range r.calls {
		if c.start.Before(since) {
			continue
		}
		end := c.end
		if end.IsZero() {
			end = time.Now()
		}
		slowest = max(slowest, end.Sub(c.start))
	}
	return slowest
}

// callsSince lists the calls started at since or after, with when they
// started and how long they took.
func (r *convRegistry) callsSince(since time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.calls {
		if c.start.Before(since) {
			continue
		}
		took := "out"
		if !c.end.IsZero() {
			took = c.end.Sub(c.start).Round(time.Millisecond).String()
		}
		out = append(out, fmt.Sprintf("%s at +%v (%s)", c.what, c.start.Sub(since).Round(time.Millisecond), took))
	}
	if len(out) == 0 {
		return "none"
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// applied is the number of events of name that the cache has applied.
func (r *convRegistry) applied(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.settled[name]
}

type convWatcher struct {
	registry.Watcher
	r *convRegistry
}

func (w *convWatcher) Next() (*registry.Result, error) {
	r := w.r
	r.mu.Lock()
	for name, n := range r.returned {
		r.settled[name] = n
	}
	r.mu.Unlock()
	res, err := w.Watcher.Next()
	if err == nil && res != nil && res.Service != nil {
		r.mu.Lock()
		r.returned[res.Service.Name]++
		r.mu.Unlock()
	}
	return res, err
}

// convProxy forwards loopback connections to a target. blip breaks the
// connections open and holds the new ones, neither refused nor answered,
// until release forwards them: a client's dial waits, as through a
// network that stalls, and its connection is not in TRANSIENT_FAILURE.
// cut breaks them and refuses the new ones until restore: an outage.
type convProxy struct {
	l      net.Listener
	target string

	mu       sync.Mutex
	holding  bool
	refusing bool
	conns    map[net.Conn]struct{}
	held     []net.Conn
	count    int
	wg       sync.WaitGroup
}

func startConvProxy(t *testing.T, target string) *convProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &convProxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *convProxy) addr() string { return p.l.Addr().String() }

func (p *convProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		switch {
		case p.refusing:
			c.Close()
		case p.holding:
			p.held = append(p.held, c)
		default:
			p.forwardLocked(c)
		}
		p.mu.Unlock()
	}
}

func (p *convProxy) forwardLocked(c net.Conn) {
	p.count++
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	go p.pipe(c)
}

func (p *convProxy) pipe(c net.Conn) {
	defer p.wg.Done()
	up, err := net.Dial("tcp", p.target)
	p.mu.Lock()
	if err != nil || p.holding || p.refusing {
		p.mu.Unlock()
		if up != nil {
			up.Close()
		}
		c.Close()
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }() //nolint:errcheck
	go func() { io.Copy(c, up); done <- struct{}{} }() //nolint:errcheck
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

func (p *convProxy) breakLocked() {
	for c := range p.conns {
		c.Close()
	}
}

// blip breaks the connections and holds the new ones until release.
func (p *convProxy) blip() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = true
	p.breakLocked()
}

// release forwards the connections held, and the new ones.
func (p *convProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = false
	for _, c := range p.held {
		p.forwardLocked(c)
	}
	p.held = nil
}

// cut breaks the connections and refuses the new ones until restore.
func (p *convProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = true
	p.breakLocked()
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
}

// restore forwards the new connections again.
func (p *convProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = false
}

// accepted is the number of connections forwarded so far.
func (p *convProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}
