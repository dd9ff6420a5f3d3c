package storm

import (
	"fmt"
	"sync/atomic"
	"time"

	"go-micro.dev/v4/registry"
)

// fleet is the services of the demo and their instances. Every service has
// one instance at a time, except while a rolling deployment replaces it;
// each new instance is a new generation of the service, with a node id and
// an address of its own.
//
// Every node the script can register exists from the start in nodes, which
// is never written after Run starts the callers, so that a caller can tell
// an old node from a current one without a lock: it only reads the node's
// gone time.
type fleet struct {
	b     Backend
	tl    *timeline
	names []string
	gen   []int // each service's current generation; the script's goroutine only
	nodes map[string]*node
}

// generations is how many instances a service can have over one run: the
// first, the rolling deployment's, the restart's and the outage's.
const generations = 4

// node is one instance of a service.
type node struct {
	svc, gen int
	// gone is when the node left the registry, since the start of the
	// run (at least 1 ns); 0 while it is registered or before.
	gone atomic.Int64
}

// ServiceName is the name of service i.
func ServiceName(i int) string { return fmt.Sprintf("demo.svc-%03d", i) }

// nodeID is the id of generation gen of service i.
func nodeID(i, gen int) string { return fmt.Sprintf("%s-%d", ServiceName(i), gen) }

func newFleet(b Backend, tl *timeline, services int) *fleet {
	f := &fleet{b: b, tl: tl, gen: make([]int, services), nodes: make(map[string]*node, services*generations)}
	for i := 0; i < services; i++ {
		f.names = append(f.names, ServiceName(i))
		for g := 0; g < generations; g++ {
			f.nodes[nodeID(i, g)] = &node{svc: i, gen: g}
		}
	}
	return f
}

// service is generation gen of service i, one node.
func (f *fleet) service(i, gen int) *registry.Service {
	return &registry.Service{
		Name:    f.names[i],
		Version: "1.0.0",
		Nodes: []*registry.Node{{
			Id: nodeID(i, gen),
			// Never dialled: one address per service and generation.
			Address: fmt.Sprintf("127.%d.%d.%d:8080", gen+1, i/256, i%256),
		}},
	}
}

// start registers the next generation of service i and returns it.
func (f *fleet) start(i int) (int, error) {
	if f.gen[i]+1 >= generations {
		return 0, fmt.Errorf("%s: more than %d instances in one run", f.names[i], generations)
	}
	f.gen[i]++
	if err := f.b.Register(f.service(i, f.gen[i])); err != nil {
		return 0, fmt.Errorf("register %s: %w", nodeID(i, f.gen[i]), err)
	}
	return f.gen[i], nil
}

// stop deregisters generation gen of service i. mark says whether it is
// gone from now on; the recovery marks its nodes itself, when the registry
// comes back.
func (f *fleet) stop(i, gen int, mark bool) error {
	if err := f.b.Deregister(f.service(i, gen)); err != nil {
		return fmt.Errorf("deregister %s: %w", nodeID(i, gen), err)
	}
	if mark {
		f.markGone(i, gen, f.tl.since())
	}
	return nil
}

func (f *fleet) markGone(i, gen int, at time.Duration) {
	f.nodes[nodeID(i, gen)].gone.Store(int64(max(at, 1)))
}

// check looks at an answer to a lookup that started at `at`, since the start
// of the run. It counts the nodes, and reports whether any of them had left
// the registry before the lookup started, and how long before.
func (f *fleet) check(svcs []*registry.Service, at time.Duration) (nodes int, old bool, lag time.Duration) {
	for _, s := range svcs {
		if s == nil {
			continue
		}
		for _, n := range s.Nodes {
			if n == nil {
				continue
			}
			nodes++
			nd, ok := f.nodes[n.Id]
			if !ok {
				continue
			}
			if gone := time.Duration(nd.gone.Load()); gone > 0 && gone <= at {
				old = true
				lag = max(lag, at-gone)
			}
		}
	}
	return nodes, old, lag
}
