package svcdata

import (
	"reflect"
	"testing"

	"go-micro.dev/v4/registry"
	util "go-micro.dev/v4/util/registry"
)

// TestCopyLikeGoMicroIsGoMicrosCopy holds the benchmarks' stand-in for
// go-micro's copy to go-micro v4's own (util.Copy): the same result, the
// same structs copied and the same parts shared, the same allocations.
// The v5 flavour has no such test: go-micro v5.30.0 made util/registry
// internal (internal/gen5 skips this file).
func TestCopyLikeGoMicroIsGoMicrosCopy(t *testing.T) {
	shapes := map[string][]*registry.Service{
		"server":        {copyBenchService(3)},
		"two versions":  {copyBenchService(1), copyBenchService(10)},
		"no nodes":      {{Name: "empty", Version: "1"}},
		"no services":   {},
		"nodes, no eps": {{Name: "bare", Nodes: []*registry.Node{{Id: "a", Address: "10.0.0.1:1"}}}},
	}
	for name, in := range shapes {
		t.Run(name, func(t *testing.T) {
			ours, theirs := copyLikeGoMicro(in), util.Copy(in)
			if !reflect.DeepEqual(ours, theirs) {
				t.Fatalf("copyLikeGoMicro = %+v, go-micro's copy = %+v", ours, theirs)
			}
			for i, s := range in {
				o, g := ours[i], theirs[i]
				if o == s || (len(s.Nodes) > 0 && o.Nodes[0] == s.Nodes[0]) || (len(s.Endpoints) > 0 && o.Endpoints[0] == s.Endpoints[0]) {
					t.Errorf("service %d: a struct go-micro copies is shared", i)
				}
				if len(s.Nodes) > 0 && (reflect.ValueOf(o.Nodes[0].Metadata).Pointer() != reflect.ValueOf(g.Nodes[0].Metadata).Pointer()) {
					t.Errorf("service %d: node metadata copied, go-micro shares it", i)
				}
				if len(s.Endpoints) > 0 && o.Endpoints[0].Request != g.Endpoints[0].Request {
					t.Errorf("service %d: endpoint Value copied, go-micro shares it", i)
				}
			}
			a := testing.AllocsPerRun(100, func() { copyOutSink = copyLikeGoMicro(in) })
			b := testing.AllocsPerRun(100, func() { copyOutSink = util.Copy(in) })
			if a != b {
				t.Errorf("copyLikeGoMicro allocates %v times, go-micro's copy %v", a, b)
			}
		})
	}
}
