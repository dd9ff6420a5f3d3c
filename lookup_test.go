package cache_test

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// lookupService is version "1" of "svc" with nodes n<id> for each id, each
// labelled with a zone by the parity of its id.
func lookupService(ids ...int) *registry.Service {
	s := &registry.Service{
		Name: "svc", Version: "1", Metadata: map[string]string{"team": "x"},
		Endpoints: []*registry.Endpoint{{
			Name:    "Svc.Get",
			Request: &registry.Value{Name: "req", Type: "Req", Values: []*registry.Value{{Name: "id", Type: "string"}}},
		}},
	}
	for _, id := range ids {
		s.Nodes = append(s.Nodes, &registry.Node{
			Id:       fmt.Sprintf("n%d", id),
			Address:  fmt.Sprintf("10.0.0.%d:8080", id),
			Metadata: map[string]string{"zone": []string{"a", "b"}[id%2]},
		})
	}
	return s
}

func lookupIDs(svcs []*registry.Service) []string {
	var ids []string
	for _, s := range svcs {
		for _, n := range s.Nodes {
			ids = append(ids, n.Id)
		}
	}
	return ids
}

// TestLookupReadersAreNeverDisturbed holds Lookup results while watch events
// and refreshes replace the cached data, and checks, under the race
// detector, that nothing a reader holds is ever written: updates build a new
// snapshot and swap it in. GetService callers scribble on their copies and
// Select runs go-micro's filters at the same time, and neither may reach
// what the readers hold.
func TestLookupReadersAreNeverDisturbed(t *testing.T) {
	const readers, rounds = 4, 200
	tests := []struct {
		name string
		opts []cache.Option
	}{
		// Fresh data: readers take the lock-free hit path, and every
		// change comes from watch events.
		{"fresh data, events", []cache.Option{cache.WithTTL(time.Hour)}},
		// Data that is always stale, with no throttle: readers go through
		// the slow path, and nearly every one starts a background refresh
		// that races with the events.
		{"stale data, refreshes and events", []cache.Option{
			cache.WithTTL(time.Nanosecond), cache.WithMinimumRetryInterval(0),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkNoLeak(t)
			r := newReg(lookupService(0, 1, 2, 3))
			c := cache.New(r, append(tt.opts, cache.WithLogger(benchLogger))...)
			defer c.Stop()
			sel := cache.NewSelector(c)

			var wg sync.WaitGroup
			ready := make(chan struct{}, readers)
			done := make(chan struct{})
			for i := 0; i < readers; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					first, err := c.Lookup("svc")
					if err != nil {
						t.Error(err)
						return
					}
					firstPrint := lookupFingerprint(first)
					ready <- struct{}{}
					held, heldPrint := first, firstPrint
					for {
						select {
						case <-done:
							// Held across every round of changes.
							if lookupFingerprint(first) != firstPrint {
								t.Error("the first snapshot changed in place")
							}
							return
						default:
						}
						cur, err := c.Lookup("svc")
						if err != nil {
							t.Error(err)
							return
						}
						if lookupFingerprint(held) != heldPrint {
							t.Error("a held snapshot changed in place")
							return
						}
						held, heldPrint = cur, lookupFingerprint(cur)

						// A copy is the caller's to change.
						cp, err := c.GetService("svc")
						if err != nil {
							t.Error(err)
							return
						}
						cp[0].Name = "scribbled"
						cp[0].Nodes[0].Address = "scribbled"
						cp[0].Nodes = append(cp[0].Nodes, &registry.Node{Id: "mine"})
						cp[0].Endpoints[0] = &registry.Endpoint{Name: "mine"}

						next, err := sel.Select("svc",
							selector.WithFilter(selector.FilterVersion("1"), selector.FilterLabel("zone", "a")))
						if err == nil {
							_, err = next()
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			for i := 0; i < readers; i++ {
				<-ready
			}

			// Round k adds node k and removes node k-4, first in the
			// registry, so that any refresh agrees, then by events.
			for k := 4; k < 4+rounds; k++ {
				putVersion(r, lookupService(k-3, k-2, k-1, k))
				sendEvent(r, "create", lookupService(k))
				sendEvent(r, "delete", lookupService(k-4))
				barrier(r)
				svcs, err := c.Lookup("svc")
				require.NoError(t, err)
				want := []string{fmt.Sprintf("n%d", k-3), fmt.Sprintf("n%d", k-2), fmt.Sprintf("n%d", k-1), fmt.Sprintf("n%d", k)}
				require.ElementsMatch(t, want, lookupIDs(svcs), "round %d", k)
			}
			t.Logf("registry calls: %d", r.TotalCalls())
			close(done)
			wg.Wait()
		})
	}
}

func TestLookupHitDoesNotAllocate(t *testing.T) {
	checkNoLeak(t)
	c := cache.New(newReg(benchService("svc", 10)), cache.WithLogger(benchLogger))
	defer c.Stop()
	_, err := c.Lookup("svc")
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := c.Lookup("svc"); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

// A fresh GetService takes the copy's allocations, whatever the number of
// nodes, in one version or two: one per kind of struct (services,
// endpoints, nodes) up to four of it, and two past that.
func TestGetServiceAllocationsDoNotGrowWithNodes(t *testing.T) {
	checkNoLeak(t)
	for _, nodes := range []int{1, 10, 100, 1000} {
		for _, versions := range []int{1, 2} {
			if nodes < versions {
				continue
			}
			var svcs []*registry.Service
			for v := 0; v < versions; v++ {
				s := benchService("svc", nodes/versions)
				s.Version = fmt.Sprint(v)
				svcs = append(svcs, s)
			}
			c := cache.New(newReg(svcs...), cache.WithLogger(benchLogger))
			_, err := c.GetService("svc")
			require.NoError(t, err)
			// AllocsPerRun counts the process's allocations: the cache's
			// own goroutines (its stream starting, a re-validation) can
			// only add to a run, so the least of three runs is the copy's.
			allocs := 1e9
			for range 3 {
				allocs = min(allocs, testing.AllocsPerRun(20, func() {
					if got, err := c.GetService("svc"); err != nil || len(got) != versions {
						t.Fatal(got, err)
					}
				}))
			}
			c.Stop()
			want := 1.0                                    // the services
			for _, n := range []int{3 * versions, nodes} { // endpoints, nodes
				want++
				if n > 4 {
					want++
				}
			}
			assert.Equal(t, want, allocs, "%d nodes in %d versions, three endpoints each", nodes, versions)
		}
	}
}

func TestGetServiceReturnsCopies(t *testing.T) {
	checkNoLeak(t)
	r := newReg(selService("1", "n1", "n2"), selService("2", "n3"))
	c := cache.New(r, cache.WithLogger(benchLogger))
	defer c.Stop()
	shared, err := c.Lookup("svc")
	require.NoError(t, err)
	before := lookupFingerprint(shared)

	cp, err := c.GetService("svc")
	require.NoError(t, err)
	require.Equal(t, before, lookupFingerprint(cp), "a copy equals the cached data")

	// Structs and slices are the caller's.
	for i := range cp {
		assert.NotSame(t, shared[i], cp[i])
		for j := range cp[i].Nodes {
			assert.NotSame(t, shared[i].Nodes[j], cp[i].Nodes[j])
		}
		for j := range cp[i].Endpoints {
			assert.NotSame(t, shared[i].Endpoints[j], cp[i].Endpoints[j])
		}
	}
	// Appending to one version's slices must not overwrite the next
	// version's, even though a copy's slices share bulk allocations.
	cp[0].Nodes = append(cp[0].Nodes, &registry.Node{Id: "appended"})
	cp[0].Endpoints = append(cp[0].Endpoints, &registry.Endpoint{Name: "appended"})
	assert.Equal(t, []string{"n3"}, lookupIDs(cp[1:]))
	assert.Equal(t, "Svc.Get", cp[1].Endpoints[0].Name)
	cp[0].Nodes[0].Address = "changed"
	cp[1].Version = "changed"
	cp[0], cp[1] = cp[1], cp[0]

	// Metadata maps are shared and read-only, as in go-micro's cache.
	assert.Equal(t,
		reflect.ValueOf(shared[0].Nodes[0].Metadata).UnsafePointer(),
		reflect.ValueOf(cp[1].Nodes[0].Metadata).UnsafePointer())

	again, err := c.GetService("svc")
	require.NoError(t, err)
	assert.Equal(t, before, lookupFingerprint(again))
	assert.Equal(t, before, lookupFingerprint(shared))
}

func TestCachedDataNeverAliasesTheRegistrys(t *testing.T) {
	s := lookupService(1, 2, 3)
	s.Nodes[2].Metadata = nil
	r := newReg(s)
	r.SetShared(true) // GetService hands out s itself
	r.Set(s.Name, s)
	checkNoLeak(t)
	c := cache.New(r, cache.WithLogger(benchLogger))
	defer c.Stop()
	svcs, err := c.Lookup("svc")
	require.NoError(t, err)
	before := lookupFingerprint(svcs)

	s.Name = "changed"
	s.Metadata["team"] = "changed"
	s.Endpoints[0].Request.Values[0].Name = "changed"
	s.Nodes[0].Address = "changed"
	s.Nodes[0].Metadata["zone"] = "changed"
	s.Nodes = s.Nodes[:1]
	assert.Equal(t, before, lookupFingerprint(svcs))
	assert.Nil(t, svcs[0].Nodes[2].Metadata, "nil metadata stays nil")
}

// Cached metadata maps are read-only, so nodes with equal metadata, which
// is the rule among the instances of one service, may share one copy.
func TestCachedNodesShareEqualMetadata(t *testing.T) {
	s := lookupService(1, 3, 2, 5)
	s.Nodes = append(s.Nodes,
		&registry.Node{Id: "empty", Metadata: map[string]string{}},
		&registry.Node{Id: "nil"})
	checkNoLeak(t)
	c := cache.New(newReg(s), cache.WithLogger(benchLogger))
	defer c.Stop()
	svcs, err := c.Lookup("svc")
	require.NoError(t, err)
	nodes := svcs[0].Nodes
	ptr := func(i int) unsafe.Pointer { return reflect.ValueOf(nodes[i].Metadata).UnsafePointer() }

	assert.Equal(t, ptr(0), ptr(1), "n1 and n3, both in zone b")
	assert.NotEqual(t, ptr(1), ptr(2), "n3 in zone b, n2 in zone a")
	assert.NotEqual(t, ptr(2), ptr(3), "n2 in zone a, n5 in zone b")
	assert.Equal(t, map[string]string{"zone": "b"}, nodes[3].Metadata)
	assert.Equal(t, map[string]string{}, nodes[4].Metadata, "empty stays empty")
	assert.Nil(t, nodes[5].Metadata, "nil stays nil")
}
