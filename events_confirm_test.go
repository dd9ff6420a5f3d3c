package cache

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// checkPrints: the prints a snapshot keeps are those of its services.
func checkPrints(t *testing.T, s *svcdata.Snapshot, msg string) {
	t.Helper()
	if s == nil || s.Prints == nil {
		return
	}
	assert.Equal(t, svcdata.PrintsOf(s.Services), s.Prints, "%s: prints are the data's", msg)
}

// TestConfirmMaxStaleMovesExactly: during an outage, each repeat
// moves the WithMaximumStale limit to exactly its own time, for the lock-free
// path and Stats alike; the limit is never past what the registry told.
func TestConfirmMaxStaleMovesExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a", "b")
		const limit = 10 * time.Minute
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMaximumStale(limit))
		defer c.Stop()
		warm(t, c, "svc")
		held := c.snapshotOf("svc")
		f.Fail(errDown)
		var last time.Time
		for i := 0; i < 4; i++ {
			time.Sleep(7 * time.Minute)
			_, err := c.Lookup("svc")
			require.NoError(t, err, "round %d", i)
			synctest.Wait()
			c.apply(repeatEvent(t, held.Services, "a"), nil)
			last = time.Now()
			require.Same(t, held, c.snapshotOf("svc"))
			assert.Equal(t, last, held.ConfirmedAt())
			assert.Zero(t, c.dataRows()[0].Age)
		}
		time.Sleep(limit - time.Second)
		for i := 0; i < 3; i++ {
			_, err := c.Lookup("svc")
			require.NoError(t, err, "within the limit")
		}
		assert.Equal(t, limit-time.Second, c.dataRows()[0].Age)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		for i := 0; i < 3; i++ {
			_, err := c.Lookup("svc")
			require.ErrorIs(t, err, ErrTooStale, "past the limit from the last repeat")
		}
		assert.Equal(t, last, held.ConfirmedAt(), "reads never move the confirmation")
		// A repeat now, past the limit, brings the data back.
		c.apply(repeatEvent(t, held.Services, "b"), nil)
		_, err := c.Lookup("svc")
		require.NoError(t, err)
		assert.Equal(t, time.Now(), c.snapshotOf("svc").ConfirmedAt())
	})
}

// TestConfirmRepeatRacingRefresh: a repeat of {a,b} that arrives
// while a refresh is out, and the refresh answers {a}: the data stored is
// the answer with the repeat replayed, prints are the data's, and the
// confirmation time is not before the store nor past now.
func TestConfirmRepeatRacingRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("s", "a", "b")
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMaximumStale(5*time.Minute))
		defer c.Stop()
		warm(t, c, "s")
		old := c.snapshotOf("s")
		f.SetNodes("s", "a")
		expire(c, "s")
		gate := f.Hold()
		go func() { _, _ = c.GetService("s") }()
		synctest.Wait()
		time.Sleep(time.Second)
		c.apply(repeatEvent(t, old.Services, "a", "b"), nil)
		repeated := time.Now()
		assert.Equal(t, repeated, old.ConfirmedAt(), "confirmed while the refresh is out")
		time.Sleep(time.Second)
		gate.Open()
		synctest.Wait()
		now := time.Now()
		s := c.snapshotOf("s")
		require.NotSame(t, old, s)
		checkPrints(t, s, "after the refresh")
		assert.False(t, s.ConfirmedAt().After(now))
		assert.Equal(t, now, s.ConfirmedAt())
		assert.Equal(t, []string{"a", "b"}, nodeIDs(s.Services))
		// A repeat against the new data confirms it, not the old.
		time.Sleep(time.Second)
		c.apply(repeatEvent(t, s.Services, "a"), nil)
		assert.Equal(t, time.Now(), c.snapshotOf("s").ConfirmedAt())
		assert.Equal(t, repeated, old.ConfirmedAt(), "the old snapshot is left alone")
		checkPrints(t, c.snapshotOf("s"), "after the repeat")
	})
}

// TestConfirmRepeatPreparedAgainstReplaced: a repeat prepared
// against {a,b} that takes the lock after the data became {a} must not
// confirm {a} as the registry telling {a,b}; it is merged.
func TestConfirmRepeatPreparedAgainstReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("s", "a", "b")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "s")
		old := c.snapshotOf("s")
		ev := repeatEvent(t, old.Services, "a", "b")
		p := svcdata.Prepare(ev, old, false, nil)
		require.True(t, p.Repeat)
		// The data changes to {a} (a delete of b) before the lock is taken.
		c.apply(&registry.Result{Action: "delete", Service: svc("s", "1", "b")}, nil)
		cur := c.snapshotOf("s")
		require.Equal(t, []string{"a"}, nodeIDs(cur.Services))
		// applyWith re-prepares when the data changed; do what it does.
		c.apply(ev, nil)
		s := c.snapshotOf("s")
		assert.Equal(t, []string{"a", "b"}, nodeIDs(s.Services), "the repeat of b is news to {a}")
		checkPrints(t, s, "after")
	})
}

// TestConfirmEventSourcedThenRepeats: data an event brought
// (unconfirmed) stays unconfirmed for a TTL from the first event however
// many repeats come, and the repeats confirm it in place.
func TestConfirmEventSourcedThenRepeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithMaximumStale(3*time.Minute))
		defer c.Stop()
		_, err := c.GetService("s")
		require.Error(t, err)
		synctest.Wait()
		c.apply(&registry.Result{Action: "create", Service: decoded(t, svc("s", "1", "a"))}, nil)
		s := c.snapshotOf("s")
		require.NotNil(t, s)
		first := time.Now()
		f.Fail(errDown)
		for i := 0; i < 5; i++ {
			time.Sleep(50 * time.Second)
			c.apply(&registry.Result{Action: "update", Service: decoded(t, svc("s", "1", "a"))}, nil)
			cur := c.snapshotOf("s")
			checkPrints(t, cur, "repeat")
			assert.Equal(t, time.Now(), cur.ConfirmedAt())
			assert.Equal(t, first, cur.EventSince, "the first event stays the start")
			row := c.dataRows()[0]
			assert.Zero(t, row.Age)
			assert.Equal(t, time.Since(first) < time.Minute, row.Unconfirmed, "round %d", i)
			_, err := c.Lookup("s")
			require.NoError(t, err, "round %d", i)
		}
	})
}

// TestConfirmPersistedAfterRepeat: the snapshot file records the
// repeat's time, and a cache loading it serves within the limit from it.
func TestConfirmPersistedAfterRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := t.TempDir() + "/snap.json"
		f := newFakeRegistry()
		f.SetNodes("svc", "a", "b")
		c, _ := newTestCache(t, f, WithTTL(time.Minute), WithSnapshot(path))
		warm(t, c, "svc")
		held := c.snapshotOf("svc")
		time.Sleep(30 * time.Minute)
		c.apply(repeatEvent(t, held.Services, "a"), nil)
		confirmed := time.Now()
		// The maintainer, woken by the repeat, may write the file at
		// once, the last write being long past: either it has, or the
		// file is due to be written.
		synctest.Wait()
		c.mu.Lock()
		dirty, lastWrite := c.core.Dirty()
		written := dirty || lastWrite.Equal(confirmed)
		file := c.core.SnapshotFile(c.now())
		c.mu.Unlock()
		assert.True(t, written, "a repeat marks the file dirty")
		require.Len(t, file.Services, 1)
		assert.True(t, confirmed.Equal(file.Services[0].Refreshed), "file refreshed %v, confirmed %v", file.Services[0].Refreshed, confirmed)
		c.Stop()
		synctest.Wait()

		time.Sleep(time.Minute)
		f2 := newFakeRegistry()
		f2.Fail(errDown)
		c2, _ := newTestCache(t, f2, WithTTL(time.Minute), WithSnapshot(path), WithMaximumStale(2*time.Minute))
		defer c2.Stop()
		s := c2.snapshotOf("svc")
		require.NotNil(t, s, "loaded")
		assert.True(t, confirmed.Equal(s.ConfirmedAt()), "loaded %v, want %v", s.ConfirmedAt(), confirmed)
		_, err := c2.Lookup("svc")
		require.NoError(t, err, "a minute after the repeat, within the limit")
		time.Sleep(90 * time.Second)
		_, err = c2.Lookup("svc")
		require.ErrorIs(t, err, ErrTooStale)
	})
}

// TestConfirmStaleAgeOnRepeat: a stale read then a repeat notes the
// stale age from the last confirmation, once.
func TestConfirmStaleAgeOnRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		held := c.snapshotOf("svc")
		f.Fail(errDown)
		time.Sleep(3 * time.Minute)
		c.apply(repeatEvent(t, held.Services, "a"), nil)
		time.Sleep(2 * time.Minute)
		_, err := c.Lookup("svc")
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, 2*time.Minute, c.dataRows()[0].Age)
		time.Sleep(time.Minute)
		c.apply(repeatEvent(t, held.Services, "a"), nil)
		assert.False(t, c.entryOf0("svc").StaleRead.Load())
		assert.Zero(t, c.dataRows()[0].Age)
	})
}

// TestConfirmReadersRaceRepeats: lock-free readers, Stats and the
// snapshot file race repeats and refreshes (run with -race).
func TestConfirmReadersRaceRepeats(t *testing.T) {
	f := newFakeRegistry()
	f.SetNodes("svc", "a", "b")
	c, _ := newTestCache(t, f, WithTTL(time.Millisecond), WithMaximumStale(time.Hour),
		WithSnapshot(t.TempDir()+"/s.json"), WithMinimumRetryInterval(time.Millisecond))
	defer c.Stop()
	_, err := c.GetService("svc")
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = c.Lookup("svc")
				_ = c.Stats()
				if s := c.snapshotOf("svc"); s != nil {
					_ = s.ConfirmedAt()
				}
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		s := c.snapshotOf("svc")
		if s != nil && len(s.Services) == 1 {
			c.apply(repeatEvent(t, s.Services, "a"), nil)
		}
		if i%100 == 0 {
			c.mu.Lock()
			_ = c.core.SnapshotFile(c.now())
			c.mu.Unlock()
		}
	}
	close(stop)
	wg.Wait()
}

// memoEvent builds an event whose version and nodes carry many distinct
// small maps, so a memo of 8 slots is evicted mid-event.
func memoEvent(name string, seed int, ids ...string) *registry.Service {
	s := &registry.Service{Name: name, Version: "1", Metadata: map[string]string{"m": fmt.Sprint(seed % 3)}}
	for i := 0; i < 6; i++ {
		md := map[string]string{"ep": fmt.Sprint((seed + i) % 5)}
		if i%2 == 0 {
			md["x"] = ""
		}
		if i == 3 {
			md = map[string]string{}
		}
		if i == 4 {
			md = nil
		}
		s.Endpoints = append(s.Endpoints, &registry.Endpoint{Name: fmt.Sprint("E", i), Metadata: md})
	}
	for j, id := range ids {
		var md map[string]string
		switch (seed + j) % 6 {
		case 0:
			md = nil
		case 1:
			md = map[string]string{}
		case 2:
			md = map[string]string{"": ""}
		case 3:
			md = map[string]string{"k": fmt.Sprint(seed % 4), "": "v"}
		case 4:
			md = map[string]string{"k": fmt.Sprint(seed % 4)}
		case 5:
			md = map[string]string{"k": fmt.Sprint(seed % 4), "z": "1", "": ""}
		}
		s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: id + fmt.Sprint(":", seed%2), Metadata: md})
	}
	return s
}

// TestConfirmMemoDifferential: a stream of events with many distinct
// small maps, applied through a shared memo and without one, gives the
// same data (nil and empty maps aside, which the cache takes as equal),
// prints that are the data's, and never takes a change for a repeat.
func TestConfirmMemoDifferential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fa, fb := newFakeRegistry(), newFakeRegistry()
		fa.SetNodes("s", "a")
		fb.SetNodes("s", "a")
		ca, _ := newTestCache(t, fa, WithTTL(time.Hour))
		cb, _ := newTestCache(t, fb, WithTTL(time.Hour))
		defer ca.Stop()
		defer cb.Stop()
		warm(t, ca, "s")
		warm(t, cb, "s")
		var memo svcdata.MapMemo
		ids := []string{"a", "b", "c", "d", "e"}
		for i := 0; i < 400; i++ {
			sub := ids[:1+i%len(ids)]
			if i%7 == 3 {
				sub = ids[i%3 : i%3+2]
			}
			seed := (i * 7) % 13
			action := "update"
			if i%11 == 5 {
				action = "delete"
				sub = sub[len(sub)-1:]
			}
			ev := memoEvent("s", seed, sub...)
			before := ca.snapshotOf("s")
			var beforeSvcs []*registry.Service
			if before != nil {
				beforeSvcs = before.Services
			}
			ca.apply(&registry.Result{Action: action, Service: decoded(t, ev)}, &memo)
			cb.apply(&registry.Result{Action: action, Service: decoded(t, ev)}, nil)
			sa, sb := ca.snapshotOf("s"), cb.snapshotOf("s")
			require.Equal(t, sa == nil, sb == nil, "event %d", i)
			if sa == nil {
				ca.apply(&registry.Result{Action: "create", Service: decoded(t, memoEvent("s", 0, "a"))}, nil)
				cb.apply(&registry.Result{Action: "create", Service: decoded(t, memoEvent("s", 0, "a"))}, nil)
				continue
			}
			checkPrints(t, sa, fmt.Sprint("memo event ", i))
			checkPrints(t, sb, fmt.Sprint("plain event ", i))
			assert.Equal(t, sa.Prints, sb.Prints, "event %d: the memo prints as the walk does", i)
			require.True(t, sameServices(sa.Services, sb.Services), "event %d: same data", i)
			// The reference merge of the event onto the data before.
			if before != nil && action == "update" {
				want, ok := merged(t, beforeSvcs, &registry.Result{Action: action, Service: decoded(t, ev)})
				if ok {
					require.True(t, sameServices(want, sa.Services), "event %d: a change taken for a repeat?\nwant %v\ngot %v", i, nodeIDs(want), nodeIDs(sa.Services))
				}
			}
		}
	})
}

// sameServices compares two sets of versions as the cache does (nil and
// empty maps equal).
func sameServices(a, b []*registry.Service) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(normSvc(a[i]), normSvc(b[i])) {
			return false
		}
	}
	return true
}

func normMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func normSvc(s *registry.Service) *registry.Service {
	c := *s
	c.Metadata = normMap(s.Metadata)
	c.Nodes = nil
	for _, n := range s.Nodes {
		c.Nodes = append(c.Nodes, &registry.Node{Id: n.Id, Address: n.Address, Metadata: normMap(n.Metadata)})
	}
	c.Endpoints = nil
	for _, e := range s.Endpoints {
		ce := *e
		ce.Metadata = normMap(e.Metadata)
		c.Endpoints = append(c.Endpoints, &ce)
	}
	return &c
}
