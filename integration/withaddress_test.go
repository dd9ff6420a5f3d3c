package integration

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/transport"

	cache "github.com/regcache/cache"
)

// closedAddress returns a loopback address where nothing listens: a dial
// is refused at once.
func closedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// markLog records, per node address, the errors that go-micro's client
// passes to Mark.
type markLog struct {
	selector.Selector
	mu     sync.Mutex
	failed map[string]int // attempts that failed, by address
	all    map[string]int // attempts, by address
}

func (m *markLog) Mark(service string, node *registry.Node, err error) {
	m.mu.Lock()
	m.all[node.Address]++
	if err != nil {
		m.failed[node.Address]++
	}
	m.mu.Unlock()
	m.Selector.Mark(service, node, err)
}

// TestWithAddressFailuresDoNotCostTheListedNodes: go-micro's client calls
// a service through cache.NewSelector(cache.New(reg)), with etcd as the
// registry, and some of its calls are made with client.WithAddress to an
// address where nothing listens. go-micro's client reports those failures
// to Mark under the service's name, for a node (no Id, that address) that
// is not in the service's node list. They must not take the ejection share
// of the listed nodes:
//
//   - with 2 live nodes listed, every ordinary call succeeds;
//   - with a dead node listed too (an instance killed without
//     deregistering, as during a registry outage), it is ejected after its
//     first 3 failures, and every ordinary call after those succeeds.
//
// Today the WithAddress failures take the one ejection slot (50 % of 2 or
// 3 nodes is 1), the listed dead node is refused, and it keeps its share of
// the ordinary calls: about half of them fail with one live node, a third
// with two.
func TestWithAddressFailuresDoNotCostTheListedNodes(t *testing.T) {
	s := startEtcd(t)
	for _, tt := range []struct {
		name string
		live int
		dead bool
	}{
		{"2 live nodes", 2, false},
		{"2 live nodes and a dead one", 2, true},
		{"a live node and a dead one", 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := "it.withaddress." + strings.ReplaceAll(tt.name, " ", "-")
			for i := 0; i < tt.live; i++ {
				startInstance(t, s, name, "live"+string(rune('1'+i)))
			}
			if tt.dead {
				startInstance(t, s, name, "dead").kill() // its node stays in etcd
			}
			listed := tt.live
			if tt.dead {
				listed++
			}

			c := newCache(t, newEtcdRegistry(t, s, 2*time.Second))
			sel := &markLog{Selector: cache.NewSelector(c), failed: map[string]int{}, all: map[string]int{}}
			cl := client.NewClient(
				client.Selector(sel),
				client.Broker(broker.NewMemoryBroker()),
				client.Transport(transport.NewHTTPTransport()),
				client.RequestTimeout(5*time.Second),
				client.PoolSize(0), // see newClient
				client.WithLogger(quietLogger()),
			)
			svcs, err := c.GetService(name)
			if err != nil || len(svcs) != 1 || len(svcs[0].Nodes) != listed {
				t.Fatalf("the cache holds %+v (err %v); want one version of %d nodes", svcs, err, listed)
			}

			dead := closedAddress(t)
			const calls = 100
			ordinaryFailed, withAddressFailed := 0, 0
			var lastErr error
			// Three WithAddress calls for each ordinary one: the closed
			// address fails 3 times in a row between any two ordinary
			// calls, before the listed dead node can (today that makes
			// the outcome certain rather than likely).
			for i := 0; i < 4*calls; i++ {
				req := cl.NewRequest(name, "Greeter.Hello", &HelloRequest{Name: "it"})
				rsp := new(HelloResponse)
				if i%4 != 0 {
					if cl.Call(context.Background(), req, rsp, client.WithAddress(dead)) != nil {
						withAddressFailed++
					}
					continue
				}
				if err := cl.Call(context.Background(), req, rsp); err != nil {
					ordinaryFailed++
					lastErr = err
				}
			}

			st := sel.Selector.(cache.Selector).Stats()
			var ejected []string
			for _, e := range st.Ejected {
				ejected = append(ejected, e.Id+"@"+e.Address)
			}
			sel.mu.Lock()
			t.Logf("%d of %d ordinary calls failed (last: %v); %d of %d WithAddress calls to %s failed; attempts by address %v, failed %v; ejected %v, refused %d",
				ordinaryFailed, calls, lastErr, withAddressFailed, 3*calls, dead, sel.all, sel.failed, ejected, st.Refused)
			sel.mu.Unlock()

			if withAddressFailed != 3*calls {
				t.Errorf("%d of %d calls to the closed address %s failed; want all", withAddressFailed, 3*calls, dead)
			}
			allowed := 0
			if tt.dead {
				allowed = 3 // the dead node's failures before its ejection
			}
			if ordinaryFailed > allowed {
				t.Errorf("%d of %d ordinary calls to the %d listed nodes failed; want at most %d (the listed dead node's first failures): "+
					"the WithAddress failures took the ejection share (ejected %v, refused %d)",
					ordinaryFailed, calls, listed, allowed, ejected, st.Refused)
			}
		})
	}
}
