package cache

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/regcache/cache/internal/svcdata"
)

// A change to the nodes alone (svcdata's changeNodes) shares the version
// held and stores its own prints. These tests drive changes through the
// cache, against copying and merging each event.

// acBase is version "1" of name with n nodes, endpoints with nested
// Values, and the metadata cases a careless merge confuses.
func acBase(name string, n int) *registry.Service {
	s := &registry.Service{
		Name:     name,
		Version:  "1",
		Metadata: map[string]string{"team": "x"},
		Endpoints: []*registry.Endpoint{{
			Name:     "H.Call",
			Request:  &registry.Value{Name: "Req", Type: "Req", Values: []*registry.Value{{Name: "id", Type: "string"}}},
			Response: &registry.Value{Name: "Rsp", Type: "Rsp"},
			Metadata: map[string]string{"stream": "false"},
		}},
	}
	for i := 0; i < n; i++ {
		s.Nodes = append(s.Nodes, &registry.Node{Id: fmt.Sprintf("n%d", i), Address: fmt.Sprintf("10.0.0.%d:1", i), Metadata: acMeta(i)})
	}
	return s
}

// acMeta: nil, empty, small, and one too large to share (past
// maxSharedMapLen).
func acMeta(i int) map[string]string {
	switch i % 5 {
	case 0:
		return nil
	case 1:
		return map[string]string{}
	case 2:
		return map[string]string{"zone": "eu"}
	case 3:
		return map[string]string{"broker": "http", "protocol": "mucp", "registry": "etcd", "server": "mucp", "transport": "http"}
	}
	m := map[string]string{}
	for k := 0; k < maxSharedMapLen+2; k++ {
		m[fmt.Sprintf("k%d", k)] = fmt.Sprintf("v%d", k)
	}
	return m
}

// acSetRegistry makes f answer name with svcs.
func acSetRegistry(f *fakereg.Registry, name string, svcs ...*registry.Service) {
	f.Set(name, svcs...)
}

// acEvent draws an event against the model's data: mostly changes to the
// nodes alone of version 1 (some nodes as held, some new, some moved,
// duplicates of an Id), sometimes a version or endpoint change, a delete,
// or nil and empty maps swapped.
func acEvent(t *testing.T, rng *rand.Rand, model []*registry.Service, size int) *registry.Result {
	base := versionOf(model, "1")
	if base == nil {
		base = model[0]
	}
	s := decoded(t, &registry.Service{Name: base.Name, Version: "1", Metadata: base.Metadata, Endpoints: base.Endpoints})
	res := &registry.Result{Action: "update", Service: s}
	if rng.IntN(2) == 0 {
		res.Action = "create"
	}
	k := 1 + rng.IntN(4)
	if rng.IntN(20) == 0 {
		k = 5 + rng.IntN(8) // past the event prints kept (4)
	}
	for ; k > 0; k-- {
		id := fmt.Sprintf("n%d", rng.IntN(size+4))
		var n *registry.Node
		if h := nodeByID(base.Nodes, id); h != nil && rng.IntN(3) == 0 {
			n = decoded(t, &registry.Service{Nodes: []*registry.Node{h}}).Nodes[0] // as held
		} else {
			n = &registry.Node{Id: id, Address: fmt.Sprintf("10.1.0.%d:1", rng.IntN(3)), Metadata: acMeta(rng.IntN(5))}
		}
		s.Nodes = append(s.Nodes, n)
		if rng.IntN(10) == 0 { // the same Id again, maybe differing
			d := *n
			if rng.IntN(2) == 0 {
				d.Address = "10.2.0.1:1"
			}
			s.Nodes = append(s.Nodes, &d)
		}
	}
	switch rng.IntN(40) {
	case 0:
		s.Version = "2" // a second version: prints off until it goes
	case 1:
		if len(s.Endpoints) == 0 {
			s.Endpoints = acBase("s", 0).Endpoints
			break
		}
		s.Endpoints[0].Request.Values[0].Type = fmt.Sprint("t", rng.IntN(2)) // the version changed
	case 2:
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		} else if len(s.Metadata) == 0 {
			s.Metadata = nil
		} else {
			s.Metadata = map[string]string{}
		}
	case 3, 4:
		res.Action = "delete"
	case 5:
		s.Endpoints = nil
	}
	return res
}

// acCheck compares what the cache holds for name with the model, and its
// prints with the prints of its data.
func acCheck(t *testing.T, c *cache, name string, model []*registry.Service, step string) {
	t.Helper()
	snap := c.snapshotOf(name)
	require.NotNil(t, snap, step)
	require.Equal(t, model, snap.Services, "%s: the data is not the old path's", step)
	want := svcdata.PrintsOf(snap.Services)
	if snap.Prints != nil {
		require.Equal(t, want, snap.Prints, "%s: the prints are not the data's", step)
	}
}

// TestChangeSequencesAreTheMerge: any sequence of events, applied by the
// cache, holds what copyEvent + svcdata.MergeEvent give step after step,
// and prints that are the data's; across sizes either side of
// linearPrints.
func TestChangeSequencesAreTheMerge(t *testing.T) {
	for _, size := range []int{1, 3, linearPrints - 1, linearPrints, linearPrints + 1, 70} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(size), 22))
				f := newFakeRegistry()
				acSetRegistry(f, "s", acBase("s", size))
				c, _ := newTestCache(t, f, WithTTL(time.Hour))
				defer c.Stop()
				warm(t, c, "s")
				model := c.snapshotOf("s").Services
				changes := 0
				for i := 0; i < 1500; i++ {
					if i%100 == 99 {
						// A refresh, answering the model's data with its
						// nodes in another order.
						var answer []*registry.Service
						for _, v := range model {
							copied, err := svcdata.CloneIn([]*registry.Service{v})
							require.NoError(t, err)
							cv := copied[0]
							rng.Shuffle(len(cv.Nodes), func(a, b int) { cv.Nodes[a], cv.Nodes[b] = cv.Nodes[b], cv.Nodes[a] })
							answer = append(answer, cv)
						}
						acSetRegistry(f, "s", answer...)
						expire(c, "s")
						_, err := c.GetService("s")
						require.NoError(t, err)
						synctest.Wait()
						snap := c.snapshotOf("s")
						require.Equal(t, answer, snap.Services, "step %d: the refresh's answer", i)
						require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints, "step %d: the refresh's prints", i)
						model = snap.Services
					}
					res := acEvent(t, rng, model, size)
					ev := copyEvent(res, model)
					next, _, ok := svcdata.MergeEvent(model, ev)
					if !ok || !svcdata.HasNodes(next) {
						continue // would drop or invalidate the entry
					}
					if p := svcdata.Prepare(res, c.snapshotOf("s"), false, nil); p.Change.Next != nil {
						changes++
					}
					c.apply(res, nil)
					if !repeats(model, res) {
						model = next
					}
					acCheck(t, c, "s", model, fmt.Sprintf("size %d step %d (%s %v)", size, i, res.Action, nodeIDs([]*registry.Service{res.Service})))
				}
				t.Logf("size %d: %d changes to the nodes alone", size, changes)
				assert.Greater(t, changes, 100)
			})
		})
	}
}

// acChange is an update of version 1 of held (one version) naming the
// given nodes, each fresh, as a registry decodes them.
func acChange(t *testing.T, held *registry.Service, nodes ...*registry.Node) *registry.Result {
	s := decoded(t, &registry.Service{Name: held.Name, Version: held.Version, Metadata: held.Metadata, Endpoints: held.Endpoints})
	s.Nodes = decoded(t, &registry.Service{Nodes: nodes}).Nodes
	return &registry.Result{Action: "update", Service: s}
}

// acIsChange reports whether res would be applied to the nodes alone.
func acIsChange(c *cache, name string, res *registry.Result) bool {
	return svcdata.Prepare(res, c.snapshotOf(name), c.opts.LastKnownNodes, nil).Change.Next != nil
}

// TestChangeEventMemoryIsNotKept: after a change to the nodes alone,
// the watcher may reuse the event's memory: its nodes, their maps and the
// version's maps and Values are changed in place, and the data held stays
// as it was.
func TestChangeEventMemoryIsNotKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		acSetRegistry(f, "s", acBase("s", 5))
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "s")
		for i, md := range []map[string]string{nil, {}, {"zone": "eu"}, acMeta(3), acMeta(4)} {
			held := c.snapshotOf("s").Services[0]
			res := acChange(t, held,
				&registry.Node{Id: "n1", Address: fmt.Sprint("10.3.0.", i), Metadata: md},
				&registry.Node{Id: fmt.Sprint("new", i), Address: "10.4.0.1:1", Metadata: md},
				held.Nodes[2])
			require.True(t, acIsChange(c, "s", res))
			c.apply(res, nil)
			snap := c.snapshotOf("s")
			before := decoded(t, snap.Services[0])
			// The watcher reuses its memory.
			s := res.Service
			for _, n := range s.Nodes {
				n.Id, n.Address = "x", "y"
				if n.Metadata != nil {
					n.Metadata["zone"] = "mutated"
					n.Metadata["extra"] = "mutated"
				}
			}
			s.Metadata["team"] = "mutated"
			s.Endpoints[0].Name = "mutated"
			s.Endpoints[0].Metadata["stream"] = "mutated"
			s.Endpoints[0].Request.Values[0].Type = "mutated"
			s.Nodes[0] = &registry.Node{Id: "other"}
			assert.Equal(t, before, decoded(t, snap.Services[0]), "event %d: the data changed with the event's memory", i)
			assert.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
			// And a fresh lookup of the same data finds it a repeat.
			again := acChange(t, snap.Services[0], snap.Services[0].Nodes...)
			require.True(t, repeats(snap.Services, again))
			p := svcdata.Prepare(again, snap, false, nil)
			assert.True(t, p.Repeat, "event %d: the data held no longer repeats itself by prints", i)
		}
	})
}

// TestChangeBackIsNotARepeat: node b changes, then changes back to
// what it was; a node changes, then the version; each is applied, never
// taken for a repeat.
func TestChangeBackIsNotARepeat(t *testing.T) {
	for _, size := range []int{3, linearPrints, linearPrints + 1, 100} {
		synctest.Test(t, func(t *testing.T) {
			f := newFakeRegistry()
			acSetRegistry(f, "s", acBase("s", size))
			c, _ := newTestCache(t, f, WithTTL(time.Hour))
			defer c.Stop()
			warm(t, c, "s")
			orig := decoded(t, c.snapshotOf("s").Services[0])
			b := nodeByID(orig.Nodes, "n1")
			changed := &registry.Node{Id: "n1", Address: "10.9.9.9:1", Metadata: b.Metadata}
			for round := 0; round < 3; round++ {
				for _, n := range []*registry.Node{changed, b} {
					res := acChange(t, c.snapshotOf("s").Services[0], n)
					require.True(t, acIsChange(c, "s", res), "size %d round %d", size, round)
					c.apply(res, nil)
					got := nodeByID(c.snapshotOf("s").Services[0].Nodes, "n1")
					require.Equal(t, n.Address, got.Address, "size %d round %d: taken for a repeat", size, round)
					require.Equal(t, svcdata.PrintsOf(c.snapshotOf("s").Services), c.snapshotOf("s").Prints)
				}
			}
			// Metadata alone, nil to empty and back.
			for _, md := range []map[string]string{{}, nil, {}, {"a": "b"}, nil} {
				n := &registry.Node{Id: "n0", Address: nodeByID(orig.Nodes, "n0").Address, Metadata: md}
				res := acChange(t, c.snapshotOf("s").Services[0], n)
				c.apply(res, nil)
				got := nodeByID(c.snapshotOf("s").Services[0].Nodes, "n0")
				require.Equal(t, md == nil, got.Metadata == nil, "size %d: nil and empty metadata", size)
				require.Equal(t, len(md), len(got.Metadata))
				require.Equal(t, svcdata.PrintsOf(c.snapshotOf("s").Services), c.snapshotOf("s").Prints)
			}
			// A change, then the version.
			c.apply(acChange(t, c.snapshotOf("s").Services[0], &registry.Node{Id: "n2", Address: "10.8.8.8:1"}), nil)
			res := acChange(t, c.snapshotOf("s").Services[0], &registry.Node{Id: "n2", Address: "10.8.8.8:1"})
			res.Service.Metadata = map[string]string{"team": "y"}
			c.apply(res, nil)
			assert.Equal(t, map[string]string{"team": "y"}, c.snapshotOf("s").Services[0].Metadata, "size %d: the version change was lost", size)
			// A new node appended after a change, then that node changed.
			c.apply(acChange(t, c.snapshotOf("s").Services[0], &registry.Node{Id: "z", Address: "1"}), nil)
			c.apply(acChange(t, c.snapshotOf("s").Services[0], &registry.Node{Id: "z", Address: "2"}), nil)
			c.apply(acChange(t, c.snapshotOf("s").Services[0], &registry.Node{Id: "z", Address: "1"}), nil)
			got := c.snapshotOf("s").Services[0]
			assert.Equal(t, "1", nodeByID(got.Nodes, "z").Address, "size %d", size)
			assert.Len(t, got.Nodes, size+1)
			if p := c.snapshotOf("s").Prints; p != nil { // none after the copy of a version change
				assert.Equal(t, svcdata.PrintsOf(c.snapshotOf("s").Services), p)
			}
		})
	}
}

// TestChangeRacingARefresh: a refresh starts, a change to the nodes
// alone lands while it is out, and the answer, which predates the change,
// lands after it: the change is replayed onto the answer, and the prints
// stored are the data's, so that changing the node back is applied.
func TestChangeRacingARefresh(t *testing.T) {
	for _, size := range []int{3, linearPrints + 5} {
		for _, reorder := range []bool{false, true} {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeRegistry()
				acSetRegistry(f, "s", acBase("s", size))
				c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(0))
				defer c.Stop()
				warm(t, c, "s")
				orig := decoded(t, c.snapshotOf("s").Services[0])
				answer := acBase("s", size)
				if reorder {
					for i, j := 0, len(answer.Nodes)-1; i < j; i, j = i+1, j-1 {
						answer.Nodes[i], answer.Nodes[j] = answer.Nodes[j], answer.Nodes[i]
					}
				}
				acSetRegistry(f, "s", answer)
				expire(c, "s")
				gate := f.Hold()
				go func() { _, _ = c.GetService("s") }()
				synctest.Wait()
				res := acChange(t, c.snapshotOf("s").Services[0], &registry.Node{Id: "n1", Address: "moved"})
				require.True(t, acIsChange(c, "s", res))
				c.apply(res, nil)
				gate.Open()
				synctest.Wait()
				snap := c.snapshotOf("s")
				require.Equal(t, "moved", nodeByID(snap.Services[0].Nodes, "n1").Address, "the change was lost by the refresh")
				if snap.Prints != nil {
					require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
				}
				// Back to what it was, the answer's.
				c.apply(acChange(t, snap.Services[0], nodeByID(orig.Nodes, "n1")), nil)
				snap = c.snapshotOf("s")
				require.Equal(t, nodeByID(orig.Nodes, "n1").Address, nodeByID(snap.Services[0].Nodes, "n1").Address, "size %d reorder %v: taken for a repeat", size, reorder)
				if snap.Prints != nil {
					require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
				}
				// Then changes by prints again after a clean refresh.
				acSetRegistry(f, "s", decoded(t, snap.Services[0]))
				expire(c, "s")
				_, _ = c.GetService("s")
				synctest.Wait()
				snap = c.snapshotOf("s")
				require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
				for i := 0; i < 5; i++ {
					res := acChange(t, snap.Services[0], &registry.Node{Id: "n0", Address: fmt.Sprint("r", i%2)})
					require.True(t, acIsChange(c, "s", res))
					c.apply(res, nil)
					snap = c.snapshotOf("s")
					require.Equal(t, fmt.Sprint("r", i%2), nodeByID(snap.Services[0].Nodes, "n0").Address)
					require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
				}
			})
		}
	}
}

// TestChangeAcrossAResync: changes land before, during and after a
// resync that re-validates the service; the data is the registry's with
// the changes, and the prints are the data's.
func TestChangeAcrossAResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		acSetRegistry(f, "s", acBase("s", 4))
		c, _ := newTestCache(t, f, WithTTL(time.Hour), WithMinimumRetryInterval(0))
		defer c.Stop()
		warm(t, c, "s")
		c.apply(acChange(t, c.snapshotOf("s").Services[0], &registry.Node{Id: "n1", Address: "before"}), nil)
		want := decoded(t, c.snapshotOf("s").Services[0])
		nodeByID(want.Nodes, "n1").Address = "during"
		acSetRegistry(f, "s", acBase("s", 4)) // the registry lags: n1 as it was
		gate := f.Hold()
		c.mu.Lock()
		c.core.Resync(c.now())
		c.unlock()
		synctest.Wait()
		c.apply(acChange(t, c.snapshotOf("s").Services[0], &registry.Node{Id: "n1", Address: "during"}), nil)
		gate.Open()
		synctest.Wait()
		snap := c.snapshotOf("s")
		require.Equal(t, "during", nodeByID(snap.Services[0].Nodes, "n1").Address)
		if snap.Prints != nil {
			require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
		}
		c.apply(acChange(t, snap.Services[0], &registry.Node{Id: "n1", Address: "before"}), nil)
		snap = c.snapshotOf("s")
		require.Equal(t, "before", nodeByID(snap.Services[0].Nodes, "n1").Address)
		if snap.Prints != nil {
			require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
		}
	})
}

// TestChangeWithLastKnownNodes: with WithLastKnownNodes the path is
// off, and the known nodes still gather every node an event announced;
// and data kept after the registry showed none is replaced by the nodes
// an event brings.
func TestChangeWithLastKnownNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		acSetRegistry(f, "s", acBase("s", 3))
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMinimumRetryInterval(0), WithLastKnownNodes())
		defer c.Stop()
		warm(t, c, "s")
		held := c.snapshotOf("s").Services[0]
		res := acChange(t, held, &registry.Node{Id: "n1", Address: "moved"}, &registry.Node{Id: "x", Address: "x"})
		assert.False(t, acIsChange(c, "s", res), "the path is off with WithLastKnownNodes")
		c.apply(res, nil)
		snap := c.snapshotOf("s")
		assert.Equal(t, "moved", nodeByID(snap.Services[0].Nodes, "n1").Address)
		assert.NotNil(t, nodeByID(snap.Known[0].Nodes, "x"), "known nodes")
		// Kept: the registry shows none.
		acSetRegistry(f, "s")
		f.Delete("s")
		expire(c, "s")
		_, _ = c.GetService("s")
		synctest.Wait()
		require.True(t, c.snapshotOf("s").Hold != svcdata.Current)
		c.apply(acChange(t, held, &registry.Node{Id: "n2", Address: "back"}), nil)
		snap = c.snapshotOf("s")
		require.False(t, snap.Hold != svcdata.Current)
		assert.Equal(t, []string{"n2"}, nodeIDs(snap.Services), "kept nodes replaced by the event's")
		if snap.Prints != nil {
			assert.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
		}
	})
}

// TestChangeMemoryIsBounded: changes to a 100-node service, one
// node at a time, each with a fresh address: what stays reachable after
// GC must not grow with the number of changes (no chain of blocks).
func TestChangeMemoryIsBounded(t *testing.T) {
	f := newFakeRegistry()
	base := acBase("s", 100)
	for _, n := range base.Nodes {
		n.Metadata = map[string]string{"zone": "eu"} // one shared map: the table stays put
	}
	acSetRegistry(f, "s", base)
	c, _ := newTestCache(t, f, WithTTL(time.Hour))
	defer c.Stop()
	_, err := c.GetService("s")
	require.NoError(t, err)
	held := c.snapshotOf("s").Services[0]
	events := func(k int) []*registry.Result {
		out := make([]*registry.Result, k)
		for i := range out {
			out[i] = acChange(t, held, &registry.Node{Id: fmt.Sprint("n", i%100), Address: fmt.Sprint("a", i), Metadata: map[string]string{"zone": "eu"}})
		}
		return out
	}
	heap := func() uint64 {
		var m runtime.MemStats
		for i := 0; i < 3; i++ {
			runtime.GC()
		}
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	run := func(evs []*registry.Result) {
		for _, ev := range evs {
			c.apply(ev, nil)
		}
	}
	// Events are made in batches and dropped before measuring.
	for b := 0; b < 2; b++ {
		evs := events(1000)
		require.True(t, acIsChange(c, "s", evs[0]))
		run(evs)
	}
	h1 := heap()
	for b := 0; b < 20; b++ {
		run(events(1000))
	}
	h2 := heap()
	snap := c.snapshotOf("s")
	require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
	require.Len(t, snap.Services[0].Nodes, 100)
	growth := int64(h2) - int64(h1)
	t.Logf("heap after 2000 changes %d, after 22000 %d: growth %d bytes", h1, h2, growth)
	// A block per change is about 2.7 KB at 100 nodes: a chain of 20000
	// would be over 50 MB. The bound leaves room for what tests running
	// in parallel hold at the time.
	assert.Less(t, growth, int64(16<<20), "memory grows with the number of changes")
	runtime.KeepAlive(c)
}

// TestChangeConcurrent: changes, repeats, version changes, lookups,
// GetService, refreshes, resyncs and Stop at once; run with -race.
func TestChangeConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		acSetRegistry(f, "s", acBase("s", 40))
		c, _ := newTestCache(t, f, WithTTL(50*time.Millisecond), WithMinimumRetryInterval(0))
		warm(t, c, "s")
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					snap := c.snapshotOf("s")
					if snap == nil || len(snap.Services) == 0 {
						time.Sleep(time.Millisecond)
						continue
					}
					res := acEvent(t, rng, snap.Services, 40)
					c.apply(res, nil)
					if i%4 == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			}()
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if svcs, err := c.GetService("s"); err == nil {
					for _, s := range svcs {
						for _, n := range s.Nodes {
							_ = n.Address + n.Metadata["zone"]
						}
					}
				}
				if snap := c.snapshotOf("s"); snap != nil && snap.Prints != nil {
					_ = svcdata.PrintsOf(snap.Services) // reads all
				}
				time.Sleep(time.Millisecond)
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if i%10 == 0 {
					c.mu.Lock()
					c.core.Resync(c.now())
					c.unlock()
				}
				if snap := c.snapshotOf("s"); snap != nil {
					acSetRegistry(f, "s", decoded(t, snap.Services[0]))
				}
				time.Sleep(7 * time.Millisecond)
			}
		}()
		time.Sleep(2 * time.Second)
		go c.Stop()
		time.Sleep(10 * time.Millisecond)
		close(stop)
		wg.Wait()
		c.Stop()
		snap := c.snapshotOf("s")
		if snap != nil && snap.Prints != nil {
			assert.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
		}
	})
}
