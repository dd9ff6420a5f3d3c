package cache

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// The watcher prints and copies the metadata of its events through a
// memo of the maps it saw last (svcdata.MapMemo). These tests drive it
// through the cache: the data the watcher stores is what copying and
// merging each event gives, and the memo is the watcher's alone.

// TestWatcherEventsThroughTheMemoAreTheMerge: the same, through the public API:
// services held by a cache, events sent on its watch stream (so through
// the watcher's memo), the answers of GetService checked after each event
// against copying and merging the event, the events' memory changed once
// the watcher is done with it; and a GetService caller's answer is never
// changed by a later event.
func TestWatcherEventsThroughTheMemoAreTheMerge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 24))
		pool := amPool()
		f := newFakeRegistry()
		const services = 6
		names := make([]string, services)
		sizes := []int{1, 4, 5, 9, linearPrints + 1, 20}
		for i := range names {
			names[i] = fmt.Sprint("s", i)
			acSetRegistry(f, names[i], decoded(t, amService(t, rng, pool, names[i], sizes[i])[0]))
		}
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, names...)
		stream := f.Stream()
		require.NotNil(t, stream)
		model := make([][]*registry.Service, services)
		for i, n := range names {
			model[i] = c.snapshotOf(n).Services
		}
		type answer struct {
			got     []*registry.Service
			decoded *registry.Service
		}
		var answers []answer
		var last []map[string]string
		for step := 0; step < 2500; step++ {
			i := rng.IntN(services)
			res := amEvent(t, rng, pool, model[i], last, sizes[i]+3)
			next, _, ok := svcdata.MergeEvent(model[i], copyEvent(res, model[i]))
			if !ok || !svcdata.HasNodes(next) {
				continue
			}
			announced := map[string]map[string]string{}
			for _, n := range res.Service.Nodes {
				announced[n.Id] = maps.Clone(n.Metadata)
			}
			isRepeat := repeats(model[i], res)
			stream.Send(res.Action, res.Service)
			synctest.Wait()
			if !isRepeat {
				model[i] = next
			}
			name := fmt.Sprintf("step %d (%s %s %v)", step, names[i], res.Action, nodeIDs([]*registry.Service{res.Service}))
			got, err := c.GetService(names[i])
			require.NoError(t, err, name)
			require.Equal(t, model[i], got, "%s: the cache's data is not the merge", name)
			for _, n := range got[0].Nodes {
				if md, ok := announced[n.Id]; ok {
					require.Equal(t, md, n.Metadata, "%s: node %s's metadata is not its event's", name, n.Id)
				}
			}
			last = last[:0]
			for _, n := range res.Service.Nodes {
				last = append(last, maps.Clone(n.Metadata))
			}
			amMutate(res) // the watcher is done with it
			require.Equal(t, model[i], c.snapshotOf(names[i]).Services, "%s: changed with the event's memory", name)
			if step%10 == 0 {
				answers = append(answers, answer{got, decoded(t, got[0])})
			}
		}
		for k, a := range answers {
			require.Equal(t, a.decoded, decoded(t, a.got[0]), "answer %d changed since it was given", k)
		}
	})
}

// TestOnlyTheWatcherHasAMemo: apply, which any goroutine
// may call, uses no memo; the watcher's memo is a local of consume. Events
// applied through apply and through the stream at once, with readers,
// under -race.
func TestOnlyTheWatcherHasAMemo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 24))
		pool := amPool()
		f := newFakeRegistry()
		acSetRegistry(f, "s", decoded(t, amService(t, rng, pool, "s", 6)[0]))
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "s")
		stream := f.Stream()
		done := make(chan struct{})
		go func() {
			defer close(done)
			r := rand.New(rand.NewPCG(10, 24))
			for i := 0; i < 300; i++ {
				c.apply(amEvent(t, r, pool, c.snapshotOf("s").Services, nil, 9), nil)
			}
		}()
		go func() {
			for i := 0; i < 300; i++ {
				got, err := c.GetService("s")
				if err == nil {
					for _, n := range got[0].Nodes {
						for k, v := range n.Metadata {
							_, _ = k, v
						}
					}
				}
			}
		}()
		for i := 0; i < 300; i++ {
			res := amEvent(t, rng, pool, c.snapshotOf("s").Services, nil, 9)
			stream.Send(res.Action, res.Service)
		}
		<-done
		synctest.Wait()
		snap := c.snapshotOf("s")
		for _, n := range snap.Services[0].Nodes {
			_ = n
		}
		if snap.Prints != nil {
			require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints)
		}
	})
}

// amPool is a pool of metadata maps that a careless memo confuses: nil and
// empty; more small maps than the memo has slots; maps of equal length
// differing by one value, by one key, or with keys and values swapped;
// empty keys and values; maps at and past mapMemoBytes; maps at and past
// maxSharedMapLen; and the same maps built in another order.
func amPool() []map[string]string {
	pool := []map[string]string{
		nil,
		{},
		{"a": "1", "b": "2"},
		{"a": "1", "b": "3"}, // one value differs
		{"a": "1", "c": "2"}, // one key differs
		{"1": "a", "2": "b"}, // keys and values swapped
		{"a": "2", "b": "1"}, // values swapped between keys
		{"": ""},
		{"": "x"},
		{"x": ""},
		{"a": "12"}, // "a"+"12" vs "a1"+"2": same bytes, other split
		{"a1": "2"},
		{"broker": "http", "protocol": "mucp", "registry": "etcd", "server": "mucp", "transport": "http"},
		{"broker": "http", "protocol": "mucp", "registry": "etcd", "server": "mucp", "transport": "grpc"},
	}
	for r := 0; r < 2*mapMemoSlots+3; r++ { // more distinct maps than slots
		pool = append(pool, map[string]string{"server": "mucp", "revision": fmt.Sprint("r", r)})
	}
	// At the memo's byte bound and just past it, differing only past the
	// first bytes.
	for _, size := range []int{mapMemoBytes, mapMemoBytes + 1} {
		for _, last := range []string{"x", "y"} {
			pool = append(pool, map[string]string{"k": strings.Repeat("v", size-2) + last})
		}
	}
	// At the shared table's entry bound and just past it.
	for _, n := range []int{maxSharedMapLen, maxSharedMapLen + 1} {
		for _, last := range []string{"x", "y"} {
			m := map[string]string{}
			for k := 0; k < n; k++ {
				m[fmt.Sprint("key", k)] = "v"
			}
			m["key0"] = last
			pool = append(pool, m)
		}
	}
	return pool
}

// amClone is m as an event brings it: a map of its own, nil kept nil,
// built in a random order.
func amClone(rng *rand.Rand, m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	c := make(map[string]string, len(m))
	for _, k := range keys {
		// Strings of their own, as decoded.
		c[strings.Clone(k)] = strings.Clone(m[k])
	}
	return c
}

// amService is a held service name with n nodes, its metadata drawn from
// the pool.
func amService(t *testing.T, rng *rand.Rand, pool []map[string]string, name string, n int) []*registry.Service {
	s := acBase(name, 0)
	for i := 0; i < n; i++ {
		s.Nodes = append(s.Nodes, &registry.Node{Id: fmt.Sprint("n", i), Address: fmt.Sprint("10.0.0.", i), Metadata: amClone(rng, pool[rng.IntN(len(pool))])})
	}
	held, err := svcdata.CloneIn([]*registry.Service{s})
	require.NoError(t, err)
	return held
}

// amEvent draws an event against held (one version): mostly an update or
// create of the version held naming some nodes, as held or with metadata
// from the pool (often one map for every node, or the maps of an earlier
// event), with more than 4 nodes at times, and at times more than held.
//
// Node Ids are n0 to n(limit-1), so that a service does not grow without
// bound.
func amEvent(t *testing.T, rng *rand.Rand, pool []map[string]string, held []*registry.Service, last []map[string]string, limit int) *registry.Result {
	v := held[0]
	s := decoded(t, &registry.Service{Name: v.Name, Version: v.Version, Metadata: v.Metadata, Endpoints: v.Endpoints})
	res := &registry.Result{Action: "update", Service: s}
	if rng.IntN(3) == 0 {
		res.Action = "create"
	}
	k := 1 + rng.IntN(4)
	switch rng.IntN(4) {
	case 0:
		k = 5 + rng.IntN(2*mapMemoSlots) // past the prints kept, past the slots
	case 1:
		k = len(v.Nodes) // every node, maybe more than 4
	}
	if rng.IntN(30) == 0 {
		k = len(v.Nodes) + 1 // more than held: the comparison decides
	}
	one := pool[rng.IntN(len(pool))]
	mode := rng.IntN(4)
	seen := map[string]bool{}
	for i := 0; i < k; i++ {
		id := fmt.Sprint("n", rng.IntN(limit))
		if i < len(v.Nodes) && rng.IntN(2) == 0 {
			id = v.Nodes[i].Id
		}
		if seen[id] {
			continue // an Id named twice: the comparison's business
		}
		seen[id] = true
		h := nodeByID(v.Nodes, id)
		var md map[string]string
		switch {
		case h != nil && rng.IntN(3) == 0:
			n := decoded(t, &registry.Service{Nodes: []*registry.Node{h}}).Nodes[0] // as held
			s.Nodes = append(s.Nodes, n)
			continue
		case mode == 0:
			md = one
		case mode == 1 && len(last) > 0:
			md = last[rng.IntN(len(last))] // a map of an earlier event
		default:
			md = pool[rng.IntN(len(pool))]
		}
		addr := fmt.Sprint("10.1.0.", rng.IntN(2))
		if h != nil && rng.IntN(2) == 0 {
			addr = h.Address // only the metadata differs
		}
		s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: addr, Metadata: amClone(rng, md)})
	}
	return res
}

// amMutate changes every map and string of res in place, as a watcher
// reusing its memory would.
func amMutate(res *registry.Result) {
	for _, n := range res.Service.Nodes {
		if n.Metadata != nil {
			for k := range n.Metadata {
				n.Metadata[k] = "mutated"
			}
			n.Metadata["extra"] = "mutated"
		}
		n.Id, n.Address = "x", "y"
	}
}
