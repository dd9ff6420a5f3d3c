package cache

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/regcache/cache/internal/core"
	"github.com/regcache/cache/internal/fakereg"
)

// A cold lookup whose call is raced by updates of the nodes the registry
// holds gets the registry's whole answer, with the updates replayed onto
// it: not only the nodes the updates named. Beyond the events kept for a
// replay, the answer with those kept is served and asked for again at
// once. (Held off a bug: on etcd through the etcd module, a first lookup
// raced by 300 updates returned 300 nodes where the registry answered
// 400: the data the updates had built was taken over the answer.)
func TestAColdLookupRacedByUpdatesGetsTheWholeAnswer(t *testing.T) {
	for _, updates := range []int{300, core.MaxCallEvents + 100} {
		t.Run(fmt.Sprint(updates, " updates"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeRegistry()
				var all []string
				for i := 0; i < max(400, updates+1); i++ {
					all = append(all, fmt.Sprintf("n%04d", i))
				}
				f.SetNodes("svc", all...)
				f.SetNodes("warm", "w")
				c, _ := newTestCache(t, f)
				defer c.Stop()
				warm(t, c, "warm") // the stream is up
				gate := f.HoldAnswers("svc")
				got := make(chan []string, 1)
				go func() {
					svcs, err := c.GetService("svc")
					require.NoError(t, err)
					got <- nodeIDs(svcs)
				}()
				synctest.Wait()
				for _, id := range all[:updates] {
					deliver(f.Stream(), "update", svc("svc", "1", id))
				}
				gate.Open()
				ids := <-got
				slices.Sort(ids)
				assert.Equal(t, all, ids, "the answer, with the updates replayed onto it")
			})
		})
	}
}

// stringPanics is a registry whose String panics.
type stringPanics struct{ *fakereg.Registry }

func (stringPanics) String() string { panic("String") }

// A registry whose String panics takes nothing down: the names of the
// registry in log lines and errors are guarded, on the watcher's goroutine
// (a Watch overdue) and in Stop (a call that ignores cancellation) alike.
// (Held off a bug: both called it unguarded, on a goroutine without
// recover, and the process crashed.)
func TestARegistryWhoseStringPanicsCrashesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "n")
		hang := f.HoldWatch() // overdue, and ignores cancellation
		c, l := newTestCache(t, stringPanics{f})
		_, err := c.Lookup("svc")
		require.NoError(t, err)
		time.Sleep(2 * time.Second) // the Watch is overdue
		synctest.Wait()
		c.Stop() // gives up on the Watch call
		logs := strings.Join(l.all(), "\n")
		assert.Contains(t, logs, "Stop gave up")
		assert.Contains(t, logs, "registry ?", "the name it could not tell")
		hang.Open()
		synctest.Wait()
		assert.Zero(t, cacheGoroutines())
	})
}
