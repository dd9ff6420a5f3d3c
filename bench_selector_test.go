package cache_test

import (
	"fmt"
	"testing"

	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
)

// The benchmarks of passive health: Mark, which go-micro's client calls
// after every attempt, and Select with an ejected node. go-micro's default
// selector keeps no health (its Mark does nothing), so its rows are the
// cost of doing nothing; BenchmarkSelect in bench_test.go is the healthy
// case.

// benchUnreachable is what go-micro's client passes to Mark for a node it
// cannot connect to.
var benchUnreachable = merrors.InternalServerError("go.micro.client",
	"connection error: dial tcp 10.0.0.1:8080: connect: connection refused")

// benchEject makes the selector eject node by reporting failures until it
// is, as go-micro's client would, Selecting before each attempt.
func benchEject(b *testing.B, sel selector.Selector, svc string, node *registry.Node) {
	b.Helper()
	for i := 0; i < 10; i++ {
		if _, err := sel.Select(svc); err != nil {
			b.Fatal(err)
		}
		sel.Mark(svc, node, benchUnreachable)
	}
}

// BenchmarkMark is one Mark per attempt: a success, a handler error, and
// an unreachable node, for a service of 10 nodes. The first two are the
// common case and touch no shared state; the last takes the service's own
// lock, never a global one.
func BenchmarkMark(b *testing.B) {
	outcomes := []struct {
		name string
		err  error
	}{
		{"success", nil},
		{"handler-error", merrors.InternalServerError("svc", "not today")},
		{"unreachable", benchUnreachable},
	}
	for _, o := range outcomes {
		b.Run("outcome="+o.name, func(b *testing.B) {
			for _, impl := range benchImpls {
				b.Run("impl="+impl.name, func(b *testing.B) {
					r := newBenchReg(benchService("svc", 10))
					sel, stop := benchSelector(impl, r)
					defer stop()
					svcs, err := r.GetService("svc")
					if err != nil {
						b.Fatal(err)
					}
					nodes := svcs[0].Nodes
					if _, err := sel.Select("svc"); err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						sel.Mark("svc", nodes[i%len(nodes)], o.err)
					}
				})
			}
		})
	}
}

// BenchmarkMarkFirstFailure is the first failure of a node in a service
// whose other ids all failed once, at 10, 2 000 and 20 000 ids: a node
// reached again is forgotten, and failing again makes its state anew. The
// cost must not grow with the ids (no copy of the node map). Each
// iteration is the success and the failure.
func BenchmarkMarkFirstFailure(b *testing.B) {
	for _, n := range []int{10, 2000, 20000} {
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
			for _, impl := range benchImpls {
				b.Run("impl="+impl.name, func(b *testing.B) {
					r := newBenchReg(benchService("svc", n))
					sel, stop := benchSelector(impl, r)
					defer stop()
					svcs, err := r.GetService("svc")
					if err != nil {
						b.Fatal(err)
					}
					nodes := svcs[0].Nodes
					if _, err := sel.Select("svc"); err != nil {
						b.Fatal(err)
					}
					for _, node := range nodes {
						sel.Mark("svc", node, benchUnreachable)
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						node := nodes[i%len(nodes)]
						sel.Mark("svc", node, nil)
						sel.Mark("svc", node, benchUnreachable)
					}
				})
			}
		})
	}
}

// BenchmarkMarkParallel is successes reported from every core at once for
// a service with an ejected node, so that its state exists: they read it
// without a lock and write nothing.
func BenchmarkMarkParallel(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			r := newBenchReg(benchService("svc", 10))
			sel, stop := benchSelector(impl, r)
			defer stop()
			svcs, err := r.GetService("svc")
			if err != nil {
				b.Fatal(err)
			}
			nodes := svcs[0].Nodes
			benchEject(b, sel, "svc", nodes[0])
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for i := 1; pb.Next(); i++ {
					sel.Mark("svc", nodes[1+i%(len(nodes)-1)], nil)
				}
			})
		})
	}
}

// BenchmarkSelectEjected is BenchmarkSelect with one node of the service
// ejected: Next skips it without allocating.
func BenchmarkSelectEjected(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for _, impl := range benchImpls {
				b.Run("impl="+impl.name, func(b *testing.B) {
					r := newBenchReg(benchService("svc", n))
					sel, stop := benchSelector(impl, r)
					defer stop()
					svcs, err := r.GetService("svc")
					if err != nil {
						b.Fatal(err)
					}
					dead := svcs[0].Nodes[0]
					benchEject(b, sel, "svc", dead)
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						next, err := sel.Select("svc")
						if err != nil {
							b.Fatal(err)
						}
						node, err := next()
						if err != nil {
							b.Fatal(err)
						}
						if impl.name == "regcache" && node.Id == dead.Id {
							b.Fatal("the ejected node was picked")
						}
					}
				})
			}
		})
	}
}
