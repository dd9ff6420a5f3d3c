package storm

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
	registry5 "go-micro.dev/v5/registry"
)

// A service crosses the adapters unchanged, in structs of its own.
func TestAdaptersCopyAServiceFieldForField(t *testing.T) {
	s := &registry.Service{Name: "a", Version: "1", Metadata: map[string]string{"k": "v"},
		Endpoints: []*registry.Endpoint{{Name: "E", Metadata: map[string]string{"m": "n"},
			Request:  &registry.Value{Name: "req", Type: "Req", Values: []*registry.Value{{Name: "id", Type: "string"}}},
			Response: &registry.Value{Name: "rsp", Type: "Rsp"}}},
		Nodes: []*registry.Node{{Id: "a-1", Address: "10.0.0.1:1", Metadata: map[string]string{"x": "y"}}}}
	back := service4(service5(s))
	if !reflect.DeepEqual(back, s) {
		t.Fatalf("v4 → v5 → v4: %+v, want %+v", back, s)
	}
	if back == s || back.Nodes[0] == s.Nodes[0] || back.Endpoints[0].Request == s.Endpoints[0].Request {
		t.Errorf("the adapters share a struct with the original")
	}
	if services5(nil) != nil || services4(nil) != nil {
		t.Errorf("no services became some")
	}
}

// go-micro v5's cache over the adapter serves what the v4 registry holds,
// hears its changes through the adapted watch, and gets v5's ErrNotFound
// for a service the registry lacks, which its callers see as v4's.
func TestGoMicro5CacheOverTheAdapter(t *testing.T) {
	m := NewMemory()
	conn, _ := m.Client()
	if _, err := registry5Of(conn).GetService("missing"); !errors.Is(err, registry5.ErrNotFound) {
		t.Fatalf("a missing service through the adapter: %v, want v5's ErrNotFound", err)
	}
	must(t, m.Register(svc("a", "a-1")))
	var c5 Client
	for _, c := range goMicroClients() {
		if c.Name == GoMicro5 {
			c5 = c
		}
	}
	lookup, stop := c5.New(conn, DefaultConfig())
	defer stop()
	if _, err := lookup.GetService("missing"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("a missing service through v5's cache: %v, want v4's ErrNotFound", err)
	}
	svcs, err := lookup.GetService("a")
	if err != nil || len(svcs) != 1 || len(svcs[0].Nodes) != 1 || svcs[0].Nodes[0].Id != "a-1" {
		t.Fatalf("GetService(a) = %+v, %v; want node a-1", svcs, err)
	}
	// The cache opens its watch of a after a jitter of up to 100 ms.
	deadline := time.Now().Add(2 * time.Second)
	for !m.watching("a") {
		if time.Now().After(deadline) {
			t.Fatal("v5's cache opened no watch of a")
		}
		time.Sleep(time.Millisecond)
	}
	must(t, m.Register(svc("a", "a-2")))
	// Well within the TTL (5 s), which would bring a-2 without the watch.
	deadline = time.Now().Add(2 * time.Second)
	for {
		svcs, err := lookup.GetService("a")
		if err == nil && len(svcs) == 1 && len(svcs[0].Nodes) == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("v5's cache did not hear a-2 through the adapted watch: %+v, %v", svcs, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// watching says whether a watch stream of service name is open.
func (m *Memory) watching(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for w := range m.watchers {
		if w.service == name {
			return true
		}
	}
	return false
}
