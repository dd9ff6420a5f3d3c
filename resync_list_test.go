//go:build go1.25

package cache

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// TestAListKeepsTheEventsThatLandWhileItIsStored: a resync by list reads
// its answer, and stores it entry by entry, releasing the lock between
// chunks. An event applied in between, to an entry the list has not
// stored yet, is replayed onto the list's older answer rather than undone
// by it until the TTL, whether it lands before the first chunk or after
// some of them are stored.
func TestAListKeepsTheEventsThatLandWhileItIsStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		var names []string
		for i := 0; i < 2*scanChunk+3; i++ {
			names = append(names, "svc-"+string(rune('A'+i/26))+string(rune('a'+i%26)))
		}
		for _, n := range names {
			f.SetNodes(n, "n1")
		}
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		var all []*entry
		var list []*registry.Service
		for _, n := range names {
			warm(t, c, n)
			all = append(all, c.entryOf0(n))
			list = append(list, svc(n, "1", "n1")) // read before the events below
		}
		c.mu.Lock()
		c.calls++
		rec := &bulkRecord{seq: c.calls, started: c.now()}
		c.work.lists = append(c.work.lists, rec)
		epoch := c.epoch
		c.mu.Unlock()

		listed := c.takeList(rec, list, nil)
		require.NotNil(t, listed)
		// Lands after the answer is taken, before any of it is stored: the
		// last service is in the last chunk.
		last := names[len(names)-1]
		c.apply(&registry.Result{Action: "update", Service: svc(last, "1", "n2")})
		rest := c.storeList(epoch, rec, all, listed)
		assert.Empty(t, rest)
		got, err := c.Lookup(last)
		require.NoError(t, err)
		assert.Equal(t, []string{"n1", "n2"}, nodeIDs(got), "the event was undone by the list's older answer")
		c.mu.Lock()
		assert.False(t, c.work.recording(), "the list stopped recording once stored")
		c.mu.Unlock()
	})
}
