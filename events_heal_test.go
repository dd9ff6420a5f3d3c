package cache

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/core"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// Data left unprinted heals: a refresh answer with events replayed onto it
// is printed, and a create or update prints data left unprinted before it
// is told. Each event is checked against the copy and merge it stands for.

// ahMeta: nil, empty, one entry, another entry.
func ahMeta(rng *rand.Rand) map[string]string {
	switch rng.IntN(5) {
	case 0:
		return nil
	case 1:
		return map[string]string{}
	case 2:
		return map[string]string{"zone": "eu"}
	case 3:
		return map[string]string{"zone": "us"}
	}
	return map[string]string{"zone": "eu", "rev": fmt.Sprint(rng.IntN(3))}
}

// ahEvent draws an event against the model: creates/updates of held and
// new nodes, deletes, changes to the version (metadata nil/empty/other,
// endpoints), a second version, duplicate Ids, nil nodes.
func ahEvent(t *testing.T, rng *rand.Rand, model []*registry.Service, pool int) *registry.Result {
	base := versionOf(model, "1")
	if base == nil {
		base = model[0]
	}
	s := decoded(t, &registry.Service{Name: base.Name, Version: base.Version, Metadata: base.Metadata, Endpoints: base.Endpoints})
	res := &registry.Result{Action: "update", Service: s}
	switch r := rng.IntN(100); {
	case r < 40:
		res.Action = "create"
	case r < 55:
		res.Action = "delete"
	}
	k := 1 + rng.IntN(3)
	if rng.IntN(15) == 0 {
		k = 5 + rng.IntN(20)
	}
	for ; k > 0; k-- {
		id := fmt.Sprintf("n%d", rng.IntN(pool))
		var n *registry.Node
		if h := nodeByID(base.Nodes, id); h != nil && rng.IntN(2) == 0 {
			n = decoded(t, &registry.Service{Nodes: []*registry.Node{h}}).Nodes[0]
		} else {
			n = &registry.Node{Id: id, Address: fmt.Sprintf("10.1.0.%d:1", rng.IntN(3)), Metadata: ahMeta(rng)}
		}
		s.Nodes = append(s.Nodes, n)
		if rng.IntN(12) == 0 { // the same Id again, maybe differing
			d := *n
			if rng.IntN(2) == 0 {
				d.Address = "10.2.0.1:1"
			}
			s.Nodes = append(s.Nodes, &d)
		}
	}
	if rng.IntN(60) == 0 {
		s.Nodes = append(s.Nodes, nil)
	}
	switch rng.IntN(30) {
	case 0:
		s.Version = "2"
	case 1:
		s.Metadata = map[string]string{"team": fmt.Sprint("t", rng.IntN(2))}
	case 2:
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		} else {
			s.Metadata = nil
		}
	case 3:
		if len(s.Endpoints) > 0 {
			s.Endpoints[0].Metadata = map[string]string{"stream": fmt.Sprint(rng.IntN(2) == 0)}
		} else {
			s.Endpoints = acBase("s", 0).Endpoints
		}
	case 4:
		s.Endpoints = nil
	}
	return res
}

// ahDeepCopy is a copy of svcs sharing nothing.
func ahDeepCopy(t *testing.T, svcs []*registry.Service) []*registry.Service {
	out := make([]*registry.Service, len(svcs))
	for i, s := range svcs {
		out[i] = decoded(t, s)
	}
	return out
}

// ahScribble changes every part of res in place, as a watcher reusing its
// memory would.
func ahScribble(res *registry.Result) {
	s := res.Service
	if s.Metadata != nil {
		s.Metadata["scribbled"] = "x"
	}
	for _, n := range s.Nodes {
		if n == nil {
			continue
		}
		n.Address = "scribbled"
		if n.Metadata != nil {
			n.Metadata["scribbled"] = "x"
		}
	}
	for _, e := range s.Endpoints {
		if e == nil {
			continue
		}
		if e.Metadata != nil {
			e.Metadata["scribbled"] = "x"
		}
		if e.Request != nil {
			e.Request.Name = "scribbled"
		}
	}
}

// ahStep applies one event to the cache and the model, checks the data,
// the prints, aliasing and healing, and returns the next model (the
// same when the event would drop the entry: it is then not applied).
func ahStep(t *testing.T, c *cache, model []*registry.Service, res *registry.Result, step string, heals *int) []*registry.Service {
	t.Helper()
	return ahStepWith(t, c, model, res, step, heals, nil)
}

// ahStepWith is ahStep, applying the event through maps, as the watcher
// does.
func ahStepWith(t *testing.T, c *cache, model []*registry.Service, res *registry.Result, step string, heals *int, maps *svcdata.MapMemo) []*registry.Service {
	t.Helper()
	ev := copyEvent(res, model)
	next, _, ok := svcdata.MergeEvent(model, ev)
	if ok && !svcdata.HasNodes(next) {
		return model
	}
	if !ok {
		next = model
	}
	if repeats(model, res) {
		require.True(t, sameServices(model, next), "%s: repeats() but merge changes", step)
		next = model
	}
	before := c.snapshotOf("s")
	var probe svcdata.MapMemo // a copy: the prepare must not fill the caller's memo
	if maps != nil {
		probe = *maps
	}
	p := svcdata.Prepare(res, before, c.opts.LastKnownNodes, &probe)
	want := ahDeepCopy(t, next)
	c.apply(res, maps)
	ahScribble(res)
	snap := c.snapshotOf("s")
	require.NotNil(t, snap, step)
	if !reflect.DeepEqual(want, snap.Services) {
		require.Failf(t, "data is not the merge", "%s: sameServices(normalized)=%v\nwant %s\ngot  %s\nevent %s\nprepared: repeat=%v change=%v before.prints=%v",
			step, sameServices(want, snap.Services), ahDump(want), ahDump(snap.Services), ahDumpEv(res), p.Repeat, p.Change.Next != nil, before.Prints != nil)
	}
	if snap.Prints != nil {
		require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints, "%s: the prints are not the data's", step)
	}
	if !c.opts.LastKnownNodes && before.Prints == nil && before.Hold == svcdata.Current && (p.Change.Next != nil || (p.Repeat && p.Prints != nil)) {
		require.NotNil(t, snap.Prints, "%s: healed by the event, but stored unprinted", step)
		*heals++
	}
	// The served copy too.
	got, err := c.GetService("s")
	require.NoError(t, err, step)
	require.True(t, sameServices(want, got), "%s: GetService differs", step)
	return snap.Services
}

func ahDump(svcs []*registry.Service) string {
	out := ""
	for _, s := range svcs {
		out += fmt.Sprintf("[v%s md=%v eps=%d:", s.Version, ahMD(s.Metadata), len(s.Endpoints))
		for _, n := range s.Nodes {
			out += fmt.Sprintf(" %s@%s%s", n.Id, n.Address, ahMD(n.Metadata))
		}
		out += "]"
	}
	return out
}

func ahDumpEv(res *registry.Result) string {
	out := res.Action + " v" + res.Service.Version + " md=" + ahMD(res.Service.Metadata) + ":"
	for _, n := range res.Service.Nodes {
		if n == nil {
			out += " <nil>"
			continue
		}
		out += fmt.Sprintf(" %s@%s%s", n.Id, n.Address, ahMD(n.Metadata))
	}
	return out
}

func ahMD(m map[string]string) string {
	if m == nil {
		return "{nil}"
	}
	return fmt.Sprint(m)
}

// ahInitial is a registry answer of shape kind.
func ahInitial(kind string, size int) []*registry.Service {
	base := acBase("s", size)
	switch kind {
	case "dupIDs": // duplicate Ids held (past 16 nodes: the map check)
		base.Nodes = append(base.Nodes, &registry.Node{Id: "n1", Address: "10.9.9.9:1"})
	case "twoVersions":
		v2 := acBase("s", 2)
		v2.Version = "2"
		v2.Nodes[0].Id, v2.Nodes[1].Id = fmt.Sprint("n", size+1), fmt.Sprint("n", size+2)
		return []*registry.Service{base, v2}
	}
	return []*registry.Service{base}
}

// TestHealDifferential: random sequences of events, from data in
// several shapes, hold what copyEvent + svcdata.MergeEvent give (strictly,
// nil and empty maps told apart), prints that are the data's, nothing of
// the event's memory, and a repeat or change that healed unprinted data
// stores prints.
func TestHealDifferential(t *testing.T) {
	cases := []struct {
		kind       string
		size, pool int
		steps      int
	}{
		{"plain", 1, 4, 100},
		{"plain", 5, 9, 100},
		{"plain", 17, 22, 150},
		{"plain", linearPrints, linearPrints + 3, 120},
		{"plain", 40, 45, 100},
		{"dupIDs", 5, 9, 120},
		{"dupIDs", 20, 25, 120},
		{"twoVersions", 5, 9, 120},
		{"plain", maxPrintNodes - 2, maxPrintNodes + 4, 20},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s-%d", tc.kind, tc.size), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(tc.size), 26))
				f := newFakeRegistry()
				acSetRegistry(f, "s", ahInitial(tc.kind, tc.size)...)
				c, _ := newTestCache(t, f, WithTTL(time.Hour))
				defer c.Stop()
				warm(t, c, "s")
				model := c.snapshotOf("s").Services
				heals := 0
				var maps *svcdata.MapMemo
				for i := 0; i < tc.steps; i++ {
					if i == tc.steps/2 {
						maps = new(svcdata.MapMemo) // the second half as the watcher applies events
					}
					res := ahEvent(t, rng, model, tc.pool)
					model = ahStepWith(t, c, model, res, fmt.Sprintf("step %d", i), &heals, maps)
				}
				t.Logf("%s-%d: %d heals", tc.kind, tc.size, heals)
			})
		})
	}
}

// TestHealAfterDeleteThenPrinted: a delete leaves data unprinted;
// the next event, whatever it is (repeat, change with nil/empty metadata
// swapped, a node named twice, an event naming more nodes than held),
// leaves data equal to the merge and prints, when any, the data's.
func TestHealAfterDeleteThenPrinted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		acSetRegistry(f, "s", acBase("s", 6))
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "s")
		model := c.snapshotOf("s").Services
		heals := 0
		del := func(id string) {
			ev := repeatEvent(t, model, id)
			ev.Action = "delete"
			model = ahStep(t, c, model, ev, "delete "+id, &heals)
			require.Nil(t, c.snapshotOf("s").Prints)
		}
		held := func() *registry.Service { return model[0] }

		del("n0")
		// nil metadata held (n5: acMeta(5)=nil) announced with an empty map.
		model = ahStep(t, c, model, acChange(t, held(), &registry.Node{Id: "n5", Address: "10.0.0.5:1", Metadata: map[string]string{}}), "nil->empty", &heals)
		del("n1")
		// empty map held (n1 gone; n... acMeta(1) = {} is n1, so use n6 made empty)
		model = ahStep(t, c, model, acChange(t, held(), &registry.Node{Id: "n2", Address: "10.0.0.2:1", Metadata: nil}), "map->nil", &heals)
		del("n3")
		// a node named twice: as held, then changed, then as held.
		n2 := nodeByID(held().Nodes, "n2")
		model = ahStep(t, c, model, acChange(t, held(), n2, &registry.Node{Id: "n2", Address: "x:1"}, n2), "twice", &heals)
		del("n4")
		// more nodes than held, all repeats but one twice.
		ns := append([]*registry.Node{}, held().Nodes...)
		ns = append(ns, held().Nodes...)
		model = ahStep(t, c, model, acChange(t, held(), ns...), "more than held", &heals)
		require.NotNil(t, c.snapshotOf("s"))
		// A change to the version after a delete: copied; then a change to
		// the nodes heals.
		del("n2")
		v := acChange(t, held(), &registry.Node{Id: "n9", Address: "9:1"})
		v.Service.Metadata = map[string]string{"team": "y"}
		model = ahStep(t, c, model, v, "version", &heals)
		require.Nil(t, c.snapshotOf("s").Prints)
		model = ahStep(t, c, model, acChange(t, held(), &registry.Node{Id: "n10", Address: "10:1"}), "heal", &heals)
		require.NotNil(t, c.snapshotOf("s").Prints)
		// A repeat after a delete heals as well.
		del("n10")
		model = ahStep(t, c, model, repeatEvent(t, model, "n9"), "repeat heal", &heals)
		require.NotNil(t, c.snapshotOf("s").Prints)
		_ = model
		t.Logf("%d heals", heals)
	})
}

// ahReplayModel is what storeAnswerLocked stores for an answer and the
// events replayed onto it.
func ahReplayModel(t *testing.T, answer []*registry.Service, evs []*registry.Result) []*registry.Service {
	fresh, _, _ := svcdata.Replay(answer, evs)
	return fresh
}

// TestHealRefreshRaced: a refresh is held while events (changes,
// deletes, repeats, version changes, a second version, duplicate Ids)
// are applied; its answer is stored with the events replayed, prints
// equal to svcdata.PrintsOf, and the events after it are the merge again.
// With more than core.MaxCallEvents events, the service is fetched again at once.
func TestHealRefreshRaced(t *testing.T) {
	for _, n := range []int{1, 3, 30, core.MaxCallEvents, core.MaxCallEvents + 40} {
		for _, kind := range []string{"plain", "dupIDs", "twoVersions"} {
			t.Run(fmt.Sprintf("%s-%d", kind, n), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), uint64(len(kind))))
					f := newFakeRegistry()
					acSetRegistry(f, "s", ahInitial(kind, 6)...)
					c, _ := newTestCache(t, f, WithTTL(time.Minute))
					defer c.Stop()
					warm(t, c, "s")
					model := c.snapshotOf("s").Services
					heals := 0
					for round := 0; round < 2; round++ {
						// The registry's answer: the model, maybe with a node
						// more or one duplicated.
						answer := ahDeepCopy(t, model)
						if rng.IntN(2) == 0 {
							answer[0].Nodes = append(answer[0].Nodes, &registry.Node{Id: "r" + fmt.Sprint(round), Address: "r:1"})
						}
						acSetRegistry(f, "s", answer...)
						expire(c, "s")
						time.Sleep(c.opts.MinimumRetryInterval) // past the retry window of an overflowed round
						f.Hold()
						calls := f.Calls("s")
						done := make(chan struct{})
						go func() { defer close(done); _, _ = c.GetService("s") }()
						synctest.Wait()
						require.Equal(t, calls+1, f.Calls("s"), "a refresh is out")
						var evs []*registry.Result
						for i := 0; i < n; i++ {
							res := ahEvent(t, rng, model, 10)
							ev := copyEvent(res, model)
							if next, _, ok := svcdata.MergeEvent(model, ev); ok && !svcdata.HasNodes(next) {
								continue
							}
							if nx, _, ok := svcdata.MergeEvent(answer, ev); ok && !svcdata.HasNodes(nx) {
								continue
							}
							evs = append(evs, copyEvent(res, model))
							model = ahStep(t, c, model, res, fmt.Sprintf("round %d event %d", round, i), &heals)
						}
						f.Release()
						<-done
						synctest.Wait()
						snap := c.snapshotOf("s")
						require.NotNil(t, snap)
						if len(evs) > core.MaxCallEvents {
							// Neither the answer nor the events alone are
							// the registry's state: it is asked again.
							require.Equal(t, calls+2, f.Calls("s"), "round %d: overflow: fetched again at once", round)
							want := ahReplayModel(t, ahDeepCopy(t, answer), nil)
							require.Equal(t, want, snap.Services, "round %d: overflow: the registry's answer", round)
						} else {
							want := ahReplayModel(t, ahDeepCopy(t, answer), evs)
							require.Equal(t, want, snap.Services, "round %d: the answer with %d events replayed", round, len(evs))
							if len(evs) > 0 {
								require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints, "round %d: printed as stored", round)
							}
						}
						if snap.Prints != nil {
							require.Equal(t, svcdata.PrintsOf(snap.Services), snap.Prints, "round %d", round)
						}
						model = snap.Services
						for i := 0; i < 40; i++ {
							res := ahEvent(t, rng, model, 10)
							model = ahStep(t, c, model, res, fmt.Sprintf("round %d after %d", round, i), &heals)
						}
					}
				})
			})
		}
	}
}

// TestHealLastKnownNodes: with WithLastKnownNodes, prints are never
// used by events, but a raced refresh now stores them; data stays the
// merge (kept data aside) and prints, when any, are the data's.
func TestHealLastKnownNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 26))
		f := newFakeRegistry()
		acSetRegistry(f, "s", acBase("s", 4))
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithLastKnownNodes())
		defer c.Stop()
		warm(t, c, "s")
		model := c.snapshotOf("s").Services
		heals := 0
		for round := 0; round < 4; round++ {
			expire(c, "s")
			f.Hold()
			done := make(chan struct{})
			go func() { defer close(done); _, _ = c.GetService("s") }()
			synctest.Wait()
			answer := ahDeepCopy(t, model)
			acSetRegistry(f, "s", answer...)
			var evs []*registry.Result
			for i := 0; i < 20; i++ {
				res := ahEvent(t, rng, model, 8)
				ev := copyEvent(res, model)
				if next, _, ok := svcdata.MergeEvent(model, ev); ok && !svcdata.HasNodes(next) {
					continue
				}
				if nx, _, ok := svcdata.MergeEvent(answer, ev); ok && !svcdata.HasNodes(nx) {
					continue
				}
				evs = append(evs, ev)
				model = ahStep(t, c, model, res, fmt.Sprintf("round %d event %d", round, i), &heals)
			}
			f.Release()
			<-done
			synctest.Wait()
			snap := c.snapshotOf("s")
			want := ahReplayModel(t, ahDeepCopy(t, answer), evs)
			require.Equal(t, want, snap.Services, "round %d", round)
			checkPrints(t, snap, fmt.Sprint("round ", round))
			model = snap.Services
			for i := 0; i < 30; i++ {
				model = ahStep(t, c, model, ahEvent(t, rng, model, 8), fmt.Sprintf("round %d after %d", round, i), &heals)
			}
		}
	})
}

// TestHealConcurrentReaders: events (applied by one goroutine, as
// the watch stream does) and refreshes race readers that check every
// snapshot they see: its prints, when any, are its data's.
func TestHealConcurrentReaders(t *testing.T) {
	f := newFakeRegistry()
	acSetRegistry(f, "s", acBase("s", 8))
	c, _ := newTestCache(t, f, WithTTL(time.Millisecond), WithMinimumRetryInterval(time.Microsecond))
	defer c.Stop()
	_, err := c.GetService("s")
	require.NoError(t, err)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Value
	var checked atomic.Int64
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last *svcdata.Snapshot
			for !stop.Load() {
				s := c.snapshotOf("s")
				if s == nil || s == last {
					_, _ = c.GetService("s")
					continue
				}
				last = s
				checked.Add(1)
				if s.Prints != nil && !reflect.DeepEqual(svcdata.PrintsOf(s.Services), s.Prints) {
					bad.Store(ahDump(s.Services))
				}
				_, _ = c.GetService("s")
			}
		}()
	}
	rng := rand.New(rand.NewPCG(3, 26))
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		snap := c.snapshotOf("s")
		if snap == nil {
			_, _ = c.GetService("s")
			continue
		}
		res := ahEvent(t, rng, snap.Services, 12)
		if res.Action == "delete" && len(res.Service.Nodes) >= len(snap.Services[0].Nodes) {
			continue
		}
		c.apply(res, nil)
		if rng.IntN(50) == 0 {
			acSetRegistry(f, "s", ahDeepCopy(t, snap.Services)...)
		}
	}
	stop.Store(true)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatalf("a snapshot's prints are not its data's: %v", v)
	}
	t.Logf("%d snapshots checked", checked.Load())
	assert.Greater(t, checked.Load(), int64(10))
}

// TestHealDataFromAnEvent: data stored from an event with nothing
// cached (not found) is unprinted; the next events heal it and hold the
// merge; a refresh raced by events then stores the replay, printed.
func TestHealDataFromAnEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 26))
		f := newFakeRegistry()
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		_, err := c.GetService("s")
		require.Error(t, err)
		synctest.Wait()
		first := acBase("s", 3)
		c.apply(&registry.Result{Action: "create", Service: decoded(t, first)}, nil)
		snap := c.snapshotOf("s")
		require.NotNil(t, snap)
		require.Nil(t, snap.Prints)
		model := snap.Services
		heals := 0
		for i := 0; i < 200; i++ {
			model = ahStep(t, c, model, ahEvent(t, rng, model, 7), fmt.Sprintf("step %d", i), &heals)
		}
		require.Greater(t, heals, 0)
		answer := ahDeepCopy(t, model)
		acSetRegistry(f, "s", answer...)
		time.Sleep(c.opts.MinimumRetryInterval)
		f.Hold()
		done := make(chan struct{})
		go func() { defer close(done); _, _ = c.GetService("s") }()
		synctest.Wait()
		require.Equal(t, 2, f.Calls("s"), "a refresh is out")
		var evs []*registry.Result
		for i := 0; i < 30; i++ {
			res := ahEvent(t, rng, model, 7)
			ev := copyEvent(res, model)
			if next, _, ok := svcdata.MergeEvent(model, ev); ok && !svcdata.HasNodes(next) {
				continue
			}
			if nx, _, ok := svcdata.MergeEvent(answer, ev); ok && !svcdata.HasNodes(nx) {
				continue
			}
			evs = append(evs, ev)
			model = ahStep(t, c, model, res, fmt.Sprintf("raced %d", i), &heals)
		}
		cur := c.snapshotOf("s")
		calls := f.Calls("s")
		f.Release()
		<-done
		synctest.Wait()
		got := c.snapshotOf("s")
		require.NotSame(t, cur, got, "the answer stored")
		_ = calls
		require.Equal(t, ahReplayModel(t, ahDeepCopy(t, answer), evs), got.Services)
		if len(evs) > 0 {
			require.Equal(t, svcdata.PrintsOf(got.Services), got.Prints)
		}
		t.Logf("%d heals, %d raced", heals, len(evs))
	})
}

// TestHealRaceEmptiedAndRecreated: while a refresh is out, a delete
// empties the data and a create brings nodes back (held unprinted, from
// the event), then changes follow; the answer is stored with all of them
// replayed, and printed.
func TestHealRaceEmptiedAndRecreated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		acSetRegistry(f, "s", acBase("s", 3))
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "s")
		held := c.snapshotOf("s").Services
		answer := ahDeepCopy(t, held)
		answer[0].Nodes = append(answer[0].Nodes, &registry.Node{Id: "r", Address: "r:1"})
		acSetRegistry(f, "s", answer...)
		expire(c, "s")
		f.Hold()
		done := make(chan struct{})
		go func() { defer close(done); _, _ = c.GetService("s") }()
		synctest.Wait()
		gone := repeatEvent(t, held, "n0", "n1", "n2")
		gone.Action = "delete"
		var evs []*registry.Result
		evs = append(evs, copyEvent(gone, held))
		c.apply(gone, nil)
		require.True(t, c.snapshotOf("s").Hold != svcdata.Current, "the last nodes, served until a create replaces them")
		back := acChange(t, held[0], &registry.Node{Id: "n1", Address: "b:1"})
		evs = append(evs, copyEvent(back, nil))
		c.apply(back, nil)
		require.NotNil(t, c.snapshotOf("s"))
		model := c.snapshotOf("s").Services
		heals := 0
		for i, nd := range []*registry.Node{{Id: "n1", Address: "b:2"}, {Id: "n7", Address: "7:1", Metadata: map[string]string{}}, {Id: "n1", Address: "b:2"}} {
			ev := acChange(t, held[0], nd)
			evs = append(evs, copyEvent(ev, model))
			model = ahStep(t, c, model, ev, fmt.Sprint("after ", i), &heals)
		}
		f.Release()
		<-done
		synctest.Wait()
		got := c.snapshotOf("s")
		require.NotNil(t, got)
		want := ahReplayModel(t, ahDeepCopy(t, answer), evs)
		require.Equal(t, want, got.Services)
		require.Equal(t, svcdata.PrintsOf(got.Services), got.Prints)
		t.Logf("%d heals; stored %s", heals, ahDump(got.Services))
	})
}
