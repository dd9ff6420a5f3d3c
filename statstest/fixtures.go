package statstest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// Unreachable is the error go-micro's client reports to Mark for a node
// it could not connect to in time: a dial that timed out, which counts
// towards an ejection (a refused connection would eject at once).
var Unreachable = merrors.InternalServerError("go.micro.client", "connection error: dial tcp 127.0.0.1:1: i/o timeout")

// EjectOne returns a cache over go-micro's memory registry that holds
// it.greeter with the nodes g1, g2 and g3, and a selector of it that
// ejected g1 after three connection errors and saw a handler error from
// g2, which does not count. So its Stats are Failures 3, Ejections 1, one
// node Ejected, and 0 Refused, Readmitted and Ignored. The cache is stopped
// when the test ends.
func EjectOne(t *testing.T) (cache.Cache, cache.Selector) {
	t.Helper()
	mem := registry.NewMemoryRegistry()
	mustRegister(t, mem, service("it.greeter", "g1", "g2", "g3"), 0)
	c := newCache(t, mem)
	svcs, err := c.GetService("it.greeter")
	if err != nil {
		t.Fatalf("lookup of it.greeter: %v", err)
	}
	nodes := map[string]*registry.Node{}
	for _, n := range svcs[0].Nodes {
		nodes[n.Id] = n
	}
	sel := cache.NewSelector(c)
	for i := 0; i < 3; i++ {
		sel.Mark("it.greeter", nodes["g1"], Unreachable)
	}
	sel.Mark("it.greeter", nodes["g2"], merrors.InternalServerError("it.greeter", "handler failed"))
	st := sel.Stats()
	if st.Failures != 3 || st.Ejections != 1 || len(st.Ejected) != 1 || st.Refused+st.Readmitted+st.Ignored != 0 {
		t.Fatalf("selector after the marks: %+v", st)
	}
	return c, sel
}

// failingRegistry is go-micro's memory registry, whose GetService fails.
type failingRegistry struct{ registry.Registry }

func (failingRegistry) GetService(string, ...registry.GetOption) ([]*registry.Service, error) {
	return nil, errors.New("scripted registry failure")
}

// Down returns a cache whose registry fails every GetService, after cold
// lookups of two services failed: so the cache holds the registry to be
// down, RegistryDown is set, Outages is 1 and DownTime grows from the
// second failure on. The cache is stopped when the test ends.
func Down(t *testing.T) cache.Cache {
	t.Helper()
	c := newCache(t, failingRegistry{registry.NewMemoryRegistry()})
	for _, name := range []string{"it.a", "it.b"} {
		if _, err := c.GetService(name); err == nil {
			t.Fatalf("lookup of %s: no error from a failing registry", name)
		}
	}
	if st := c.Stats(); !st.RegistryDown || st.Outages != 1 {
		t.Fatalf("after two failed lookups: registry down %v, %d outages; want down, 1", st.RegistryDown, st.Outages)
	}
	return c
}

// someServices is a registry that has the services named svc-*, each with
// one node, and no other.
type someServices struct{ registry.Registry }

func (someServices) GetService(name string, _ ...registry.GetOption) ([]*registry.Service, error) {
	if !strings.HasPrefix(name, "svc-") {
		return nil, registry.ErrNotFound
	}
	return []*registry.Service{service(name, name+"-1")}, nil
}

// Many returns a cache that holds n services with one node each,
// svc-00000 and on, and the names missing-0 to missing-<missing-1>, which
// the registry does not know, without data. It is stopped when the test
// ends.
func Many(t *testing.T, n, missing int) cache.Cache {
	t.Helper()
	c := newCache(t, someServices{registry.NewMemoryRegistry()}, cache.WithTTL(time.Hour), cache.WithMinimumRetryInterval(time.Hour))
	for i := 0; i < n; i++ {
		if _, err := c.Lookup(fmt.Sprintf("svc-%05d", i)); err != nil {
			t.Fatalf("lookup of svc-%05d: %v", i, err)
		}
	}
	for i := 0; i < missing; i++ {
		if _, err := c.Lookup(fmt.Sprintf("missing-%d", i)); err != registry.ErrNotFound {
			t.Fatalf("lookup of missing-%d: %v, want registry.ErrNotFound", i, err)
		}
	}
	return c
}

// CountingCache is a Cache that records the limit of each Services call.
type CountingCache struct {
	cache.Cache
	mu     sync.Mutex
	limits []int
}

// Services records limit and calls the cache's.
func (c *CountingCache) Services(prefix, after string, limit int) []cache.ServiceStats {
	c.mu.Lock()
	c.limits = append(c.limits, limit)
	c.mu.Unlock()
	return c.Cache.Services(prefix, after, limit)
}

// Limits returns the limits of the Services calls so far, and forgets
// them.
func (c *CountingCache) Limits() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.limits
	c.limits = nil
	return l
}
