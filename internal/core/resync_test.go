package core

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/svcdata"
)

// listed fills n services, each with node n1, behind an open stream, and
// starts a resync whose ListServices call is out. It returns the names
// and the list call.
func listed(t *testing.T, n int, cfg Config) (*harness, []string, *Call) {
	h := newHarness(t, cfg)
	h.open()
	var names []string
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("svc-%03d", i))
	}
	h.fill(names...)
	h.k.Resync(h.now)
	h.take()
	c := h.list()
	require.NotNil(t, c, "a resync of %d services lists them", n)
	return h, names, c
}

// fullList lists every name with nodes ids.
func fullList(names []string, ids ...string) []*registry.Service {
	var out []*registry.Service
	for _, n := range names {
		out = append(out, fakereg.Service(n, "1", ids...))
	}
	return out
}

// checkPrints checks that the prints of s, if any, are its data's.
func checkPrints(t *testing.T, s *svcdata.Snapshot, msg string) {
	t.Helper()
	if s != nil && s.Prints != nil {
		assert.Equal(t, svcdata.PrintsOf(s.Services), s.Prints, "%s: prints are the data's", msg)
	}
}

// A list's answer is stored a chunk at a time, the lock released between
// chunks. An event applied in between, to an entry the list has not
// stored yet, is replayed onto the list's older answer rather than undone
// by it until the TTL.
func TestAListKeepsTheEventsThatLandWhileItIsStored(t *testing.T) {
	h, names, c := listed(t, 2*ScanChunk+3, testConfig())
	last := names[len(names)-1]
	h.answerList(c, fullList(names, "n1"), nil, func(chunk int) {
		if chunk == 1 {
			h.event("update", fakereg.Service(last, "1", "n2"))
		}
	})
	assert.Equal(t, []string{"n1", "n2"}, h.nodesOf(last), "the event was undone by the list's older answer")
	assert.Empty(t, h.k.work.lists, "the list stopped recording once stored")
	assert.Zero(t, h.started[last]-1, "settled by the list: no call of its own")
}

// The recording of a list ends on every path: an error, an empty list, a
// names-only list, an overflow before the answer or during its store, and
// a full store.
func TestAListEndsOnEveryPath(t *testing.T) {
	for _, tc := range []struct {
		name   string
		list   func(names []string) []*registry.Service
		err    error
		before int // events before the answer
		during int // events after the answer is taken, before its store
	}{
		{name: "error", err: errors.New("boom")},
		{name: "empty list", list: func([]string) []*registry.Service { return nil }},
		{name: "names only", list: func(n []string) []*registry.Service { return []*registry.Service{{Name: n[0]}} }},
		{name: "overflow before", list: func(n []string) []*registry.Service { return fullList(n, "n1") }, before: maxListEvents + 1},
		{name: "overflow during", list: func(n []string) []*registry.Service { return fullList(n, "n1") }, during: maxListEvents + 1},
		{name: "full store", list: func(n []string) []*registry.Service { return fullList(n, "n1") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, names, c := listed(t, ScanChunk+5, testConfig())
			for i := 0; i < tc.before; i++ {
				h.event("update", fakereg.Service(names[i%len(names)], "1", "n1"))
			}
			var list []*registry.Service
			if tc.list != nil {
				list = tc.list(names)
			}
			h.answerList(c, list, tc.err, func(chunk int) {
				if chunk == 0 {
					for i := 0; i < tc.during; i++ {
						h.event("update", fakereg.Service(names[len(names)-1], "1", "n1"))
					}
				}
			})
			assert.Empty(t, h.k.work.lists)
			h.sleep(policy.SlowCall)
			for _, n := range names {
				checkPrints(t, h.k.Find(n).Data.Load(), n)
			}
			if tc.name == "full store" {
				for _, n := range names {
					assert.Equal(t, 1, h.started[n], "%s: settled by the list", n)
				}
			}
		})
	}
}

// During the store of a list, a delete and a repeat land: the list's
// older answer neither undoes the delete nor loses the data the repeat
// confirmed.
func TestAListReplaysADeleteAndARepeat(t *testing.T) {
	cfg := testConfig()
	cfg.MaxStale = 2 * time.Hour
	h, names, c := listed(t, 2*ScanChunk+3, cfg)
	for _, n := range names {
		h.event("update", fakereg.Service(n, "1", "n1", "n2"))
	}
	last, early := names[len(names)-1], names[0]
	h.sleep(time.Minute)
	h.answerList(c, fullList(names, "n1", "n2"), nil, func(chunk int) {
		if chunk == 1 {
			h.event("delete", fakereg.Service(last, "1", "n2"))
			h.event("update", fakereg.Service(early, "1", "n1"))
		}
	})
	assert.Equal(t, []string{"n1"}, h.nodesOf(last), "the delete was undone by the list")
	for _, n := range names {
		s := h.k.Find(n).Data.Load()
		checkPrints(t, s, n)
		assert.False(t, s.ConfirmedAt().After(h.now))
	}
	assert.Empty(t, h.k.work.lists)
}

// A second list starts while the first is being stored, its first out for
// SlowCall; an event lands between; both end their recording, and neither
// older answer undoes the event.
func TestTwoListsOverlap(t *testing.T) {
	h, names, c1 := listed(t, ScanChunk+9, testConfig())
	h.sleep(policy.SlowCall)
	h.k.Resync(h.now)
	h.take()
	var c2 *Call
	for _, c := range h.out {
		if c.List && c != c1 {
			c2 = c
		}
	}
	require.NotNil(t, c2, "a list out for SlowCall does not hold the next back")
	last := names[len(names)-1]
	h.event("update", fakereg.Service(last, "1", "n2"))
	h.answerList(c1, fullList(names, "n1"), nil, nil)
	assert.Equal(t, []string{"n1", "n2"}, h.nodesOf(last))
	h.answerList(c2, fullList(names, "n1"), nil, nil)
	assert.Equal(t, []string{"n1", "n2"}, h.nodesOf(last), "the second list undid the event")
	assert.Empty(t, h.k.work.lists)
	for _, n := range names {
		checkPrints(t, h.k.Find(n).Data.Load(), n)
	}
}
