package svcdata

import (
	"fmt"
	"testing"

	"go-micro.dev/v4/registry"
)

// copyBenchService is shaped like the registration of a go-micro server,
// and like benchService in bench_test.go: three endpoints whose request
// and response describe a few fields, the endpoint metadata go-micro's
// server sets, and nodes carrying the metadata that every instance of a
// binary shares.
func copyBenchService(nodes int) *registry.Service {
	s := &registry.Service{Name: "bench", Version: "1.0.0", Metadata: map[string]string{"team": "bench"}}
	for i := 0; i < 3; i++ {
		s.Endpoints = append(s.Endpoints, &registry.Endpoint{
			Name: fmt.Sprintf("Handler.Method%d", i),
			Request: &registry.Value{Name: "Request", Type: "Request", Values: []*registry.Value{
				{Name: "id", Type: "string"}, {Name: "count", Type: "int64"},
			}},
			Response: &registry.Value{Name: "Response", Type: "Response", Values: []*registry.Value{
				{Name: "msg", Type: "string"},
			}},
			Metadata: map[string]string{"stream": "false"},
		})
	}
	for i := 0; i < nodes; i++ {
		s.Nodes = append(s.Nodes, &registry.Node{
			Id:      fmt.Sprintf("bench-%08x", i),
			Address: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250+1),
			Metadata: map[string]string{
				"broker": "http", "protocol": "mucp", "registry": "etcd",
				"server": "mucp", "transport": "http",
			},
		})
	}
	return s
}

var copySink *registry.Service

// BenchmarkCloneService is the copy on the way in, of one version as a
// registry answers it, beside the copy go-micro's cache makes of every
// answer (copyLikeGoMicro). go-micro's copy is shallower: it shares the
// registry's metadata maps and endpoint Values, which regcache copies so
// that it never aliases the registry's memory.
func BenchmarkCloneService(b *testing.B) {
	for _, nodes := range []int{3, 10} {
		s := copyBenchService(nodes)
		b.Run(fmt.Sprintf("nodes=%d/impl=regcache", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				c, err := cloneService(s)
				if err != nil {
					b.Fatal(err)
				}
				copySink = c
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/impl=gomicro", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				copySink = copyServiceLikeGoMicro(s)
			}
		})
	}
}

// BenchmarkCloneServiceAgain is the copy of an answer equal to the data
// the cache holds, which is what most TTL refreshes and re-validations
// get: regcache shares the parts held, go-micro copies as always.
func BenchmarkCloneServiceAgain(b *testing.B) {
	for _, nodes := range []int{3, 10} {
		held, err := CloneIn([]*registry.Service{copyBenchService(nodes)})
		if err != nil {
			b.Fatal(err)
		}
		answer := []*registry.Service{copyBenchService(nodes)}
		b.Run(fmt.Sprintf("nodes=%d/impl=regcache", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				c, err := CloneInLike(answer, held)
				if err != nil {
					b.Fatal(err)
				}
				copySink = c[0]
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/impl=gomicro", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				copySink = copyLikeGoMicro(answer)[0]
			}
		})
	}
}

var copyOutSink []*registry.Service

// BenchmarkCopyOutFloor is what a GetService copy costs at least: the
// copy out (CopyOut, what regcache's GetService returns), beside the same
// blocks allocated with only their pointers set ("floor": what any copy
// that returns Nodes of its own must allocate, zero and link, before it
// copies a field), and go-micro's copy of the same service
// (copyLikeGoMicro, what its cache's GetService returns). The floor against go-micro's copy
// bounds the ratio any such GetService can reach.
func BenchmarkCopyOutFloor(b *testing.B) {
	for _, nodes := range []int{10, 100} {
		in := []*registry.Service{copyBenchService(nodes)}
		b.Run(fmt.Sprintf("nodes=%d/impl=regcache", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				copyOutSink = CopyOut(in)
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/impl=floor", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				svcs, out := structs[registry.Service](1)
				_, epPtr := structs[registry.Endpoint](len(in[0].Endpoints))
				nodeBuf, nodePtr := structs[registry.Node](nodes)
				for j := range nodePtr {
					nodePtr[j] = &nodeBuf[j]
				}
				svcs[0].Nodes, svcs[0].Endpoints = nodePtr, epPtr
				out[0] = &svcs[0]
				copyOutSink = out
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/impl=gomicro", nodes), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				copyOutSink = copyLikeGoMicro(in)
			}
		})
	}
}

// BenchmarkVersionPrint is the print of a go-micro server's version
// without its nodes, through a stream's memo of maps as the watcher makes
// it, and the print of one of its nodes: what telling an event apart
// costs in the CPU, with its memory in the CPU's caches.
func BenchmarkVersionPrint(b *testing.B) {
	s := copyBenchService(1)
	var maps MapMemo
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		x, _, ok := versionPrintWith(s, &maps)
		if !ok {
			b.Fatal("no print")
		}
		printSink += x + nodePrintOf(s.Nodes[0], maps.print(s.Nodes[0].Metadata))
	}
}

var printSink uint64

// copyLikeGoMicro copies services the way go-micro's registry/cache copies
// what it returns and what it stores: a new Service, Node and Endpoint
// struct for each, with their slices, and every metadata map and endpoint
// Value shared with the original. go-micro's own copy is in a package that
// go-micro v5.30.0 made internal, so the benchmarks compare with this one;
// TestCopyLikeGoMicroIsGoMicrosCopy (v4 only) holds it to go-micro v4's,
// result and allocations.
func copyLikeGoMicro(svcs []*registry.Service) []*registry.Service {
	out := make([]*registry.Service, len(svcs))
	for i, s := range svcs {
		out[i] = copyServiceLikeGoMicro(s)
	}
	return out
}

func copyServiceLikeGoMicro(s *registry.Service) *registry.Service {
	c := new(registry.Service)
	*c = *s
	c.Nodes = make([]*registry.Node, len(s.Nodes))
	for i, n := range s.Nodes {
		nc := new(registry.Node)
		*nc = *n
		c.Nodes[i] = nc
	}
	c.Endpoints = make([]*registry.Endpoint, len(s.Endpoints))
	for i, e := range s.Endpoints {
		ec := new(registry.Endpoint)
		*ec = *e
		c.Endpoints[i] = ec
	}
	return c
}
