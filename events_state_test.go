package cache

import (
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

func nodeOf(t *testing.T, svcs []*registry.Service, version, id string) *registry.Node {
	t.Helper()
	for _, s := range svcs {
		if s.Version != version {
			continue
		}
		for _, n := range s.Nodes {
			if n.Id == id {
				return n
			}
		}
	}
	t.Fatalf("no node %s in version %s: %v", id, version, viewOf(svcs))
	return nil
}

// A refresh raced by a change: the answer's prints must not survive the
// replay, so that the registry's old data, announced again, is applied.
func TestRefreshRacedByAChangeKeepsNoPrints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("s", "a", "b")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "s")
		s := f.Stream()
		expire(c, "s")
		f.Hold()
		_, err := c.Lookup("s") // stale, and a refresh held at the gate
		require.NoError(t, err)
		synctest.Wait()

		moved := svc("s", "1", "a")
		moved.Nodes[0].Address = "moved:1"
		deliver(s, "update", moved)
		f.Release()
		synctest.Wait()

		got, err := c.GetService("s")
		require.NoError(t, err)
		assert.Equal(t, "moved:1", nodeOf(t, got, "1", "a").Address, "the raced change replayed onto the answer")

		// The registry's own data, announced again: a change back.
		deliver(s, "update", svc("s", "1", "a"))
		got, err = c.GetService("s")
		require.NoError(t, err)
		assert.Equal(t, "a:8080", nodeOf(t, got, "1", "a").Address)
		assert.Equal(t, []string{"a", "b"}, nodeIDs(got))
	})
}

// A refresh raced by a repeat of the data held before it, while the
// registry changed: the answer wins, and the old data announced again is
// a change.
func TestRefreshRacedByARepeatOfOldData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("s", "a", "b")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "s")
		s := f.Stream()
		expire(c, "s")
		f.Hold()
		_, err := c.Lookup("s")
		require.NoError(t, err)
		synctest.Wait()
		deliver(s, "update", svc("s", "1", "a")) // a repeat of what is held
		f.Edit("s", func(svcs []*registry.Service) { svcs[0].Nodes[0].Address = "new:1" })
		f.Release()
		synctest.Wait()

		got, err := c.GetService("s")
		require.NoError(t, err)
		// The raced event is replayed onto the answer: a's old address.
		assert.Equal(t, "a:8080", nodeOf(t, got, "1", "a").Address)
		deliver(s, "update", func() *registry.Service { v := svc("s", "1", "a"); v.Nodes[0].Address = "new:1"; return v }())
		got, err = c.GetService("s")
		require.NoError(t, err)
		assert.Equal(t, "new:1", nodeOf(t, got, "1", "a").Address)
		deliver(s, "update", svc("s", "1", "a"))
		got, err = c.GetService("s")
		require.NoError(t, err)
		assert.Equal(t, "a:8080", nodeOf(t, got, "1", "a").Address)
	})
}

// One version, then two, then one again: the repeat found by the
// comparison prints the data held then, and later changes are still seen.
func TestOneVersionToTwoAndBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("s", "a", "b")
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "s")
		s := f.Stream()
		calls := f.TotalCalls()

		deliver(s, "create", svc("s", "2", "c"))
		deliver(s, "update", svc("s", "1", "a")) // a repeat, two versions held
		deliver(s, "update", svc("s", "2", "c")) // and in the other
		got, err := c.GetService("s")
		require.NoError(t, err)
		assert.Equal(t, map[string][]string{"1": {"a", "b"}, "2": {"c"}}, viewOf(got))

		deliver(s, "delete", svc("s", "2", "c"))
		deliver(s, "update", svc("s", "1", "b")) // a repeat: prints made now
		changed := svc("s", "1", "b")
		changed.Nodes[0].Metadata = map[string]string{"id": "b", "rev": "2"}
		deliver(s, "update", changed)
		got, err = c.GetService("s")
		require.NoError(t, err)
		assert.Equal(t, map[string][]string{"1": {"a", "b"}}, viewOf(got))
		assert.Equal(t, "2", nodeOf(t, got, "1", "b").Metadata["rev"])

		deliver(s, "update", svc("s", "1", "b")) // back: a change
		got, err = c.GetService("s")
		require.NoError(t, err)
		assert.NotContains(t, nodeOf(t, got, "1", "b").Metadata, "rev")

		deliver(s, "update", svc("s", "1", "a")) // a repeat again
		deliver(s, "update", svc("s", "2", "a")) // a moves to version 2
		got, err = c.GetService("s")
		require.NoError(t, err)
		assert.Equal(t, map[string][]string{"1": {"b"}, "2": {"a"}}, viewOf(got))
		assert.Equal(t, calls, f.TotalCalls(), "events make no registry call")
	})
}

// Data loaded from the snapshot file has no prints; a repeat prints it,
// and a change after that is applied.
func TestSnapshotDataRepeatThenChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "regcache.json")
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("s", "a", "b")
		first, _ := newTestCache(t, f, WithSnapshot(path))
		_, err := first.Lookup("s")
		require.NoError(t, err)
		synctest.Wait()
		first.Stop()

		f.Fail(errDown)
		c, _ := newTestCache(t, f, WithSnapshot(path))
		defer c.Stop()
		got, err := c.GetService("s") // served from the file; the refresh fails
		require.NoError(t, err)
		assert.Equal(t, []string{"a", "b"}, nodeIDs(got))
		synctest.Wait()
		s := f.Stream()
		require.NotNil(t, s)

		deliver(s, "update", svc("s", "1", "a")) // a repeat of the file's data
		changed := svc("s", "1", "a")
		changed.Nodes[0].Address = "moved:1"
		deliver(s, "update", changed)
		got, err = c.GetService("s")
		require.NoError(t, err)
		assert.Equal(t, "moved:1", nodeOf(t, got, "1", "a").Address)
		deliver(s, "update", svc("s", "1", "a"))
		got, err = c.GetService("s")
		require.NoError(t, err)
		assert.Equal(t, "a:8080", nodeOf(t, got, "1", "a").Address)
	})
}

// The registry's maps, equal across services, changed after the answer
// and after an event: no service's metadata changes, and nil and empty
// maps stay apart though equal maps are held once.
func TestRegistryOwnedMapsAreNotKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The registry answers with the very structs it holds, as a
		// registry that keeps and later changes what it handed out.
		a := newFakeRegistry()
		a.SetShared(true)
		own := map[string][]*registry.Service{}
		for _, name := range []string{"x", "y"} {
			v := svc(name, "1", "a")
			v.Metadata = map[string]string{"team": "core"}
			v.Nodes[0].Metadata = map[string]string{"protocol": "grpc"}
			own[name] = []*registry.Service{v}
		}
		own["nil"] = []*registry.Service{{Name: "nil", Version: "1", Nodes: []*registry.Node{{Id: "a", Address: "a:1"}}}}
		own["empty"] = []*registry.Service{{Name: "empty", Version: "1", Metadata: map[string]string{},
			Nodes: []*registry.Node{{Id: "a", Address: "a:1", Metadata: map[string]string{}}}}}
		for name, svcs := range own {
			a.Set(name, svcs...)
		}
		c, _ := newTestCache(t, a, WithTTL(time.Hour))
		c2, _ := newTestCache(t, a, WithTTL(time.Hour))
		defer c.Stop()
		defer c2.Stop()
		for _, n := range []string{"x", "y", "nil", "empty"} {
			_, err := c.GetService(n)
			require.NoError(t, err)
			_, err = c2.GetService(n)
			require.NoError(t, err)
		}
		synctest.Wait()

		own["x"][0].Metadata["team"] = "changed"
		own["x"][0].Nodes[0].Metadata["protocol"] = "changed"
		own["nil"][0].Nodes[0].Metadata = map[string]string{}
		own["empty"][0].Metadata["k"] = "v"
		for _, cc := range []*cache{c, c2} {
			for _, n := range []string{"x", "y"} {
				got, err := cc.GetService(n)
				require.NoError(t, err)
				assert.Equal(t, map[string]string{"team": "core"}, got[0].Metadata, n)
				assert.Equal(t, map[string]string{"protocol": "grpc"}, got[0].Nodes[0].Metadata, n)
			}
			got, err := cc.GetService("nil")
			require.NoError(t, err)
			assert.Nil(t, got[0].Metadata)
			assert.Nil(t, got[0].Nodes[0].Metadata)
			got, err = cc.GetService("empty")
			require.NoError(t, err)
			assert.NotNil(t, got[0].Metadata)
			assert.Empty(t, got[0].Metadata)
			assert.NotNil(t, got[0].Nodes[0].Metadata)
		}

		// An event's maps, changed by the watcher after it was applied.
		streams := a.Streams()
		require.Len(t, streams, 2)
		all := func(action string, v *registry.Service) {
			for _, s := range streams {
				deliver(s, action, v)
			}
		}
		ev := svc("y", "1", "a")
		ev.Metadata = map[string]string{"team": "core"}
		ev.Nodes[0].Metadata = map[string]string{"protocol": "http"}
		all("update", ev)
		ev.Nodes[0].Metadata["protocol"] = "changed"
		got, err := c.GetService("y")
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"protocol": "http"}, got[0].Nodes[0].Metadata)
		got, err = c.GetService("x")
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"protocol": "grpc"}, got[0].Nodes[0].Metadata)

		// A nil map announced for the node that holds an empty one is a
		// change, not a repeat.
		all("update", &registry.Service{Name: "empty", Version: "1", Metadata: map[string]string{},
			Nodes: []*registry.Node{{Id: "a", Address: "a:1"}}})
		got, err = c.GetService("empty")
		require.NoError(t, err)
		assert.Nil(t, got[0].Nodes[0].Metadata)
	})
}
