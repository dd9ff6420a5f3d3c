//go:build go1.25

package cache_test

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	cache "github.com/regcache/cache"
)

// These tests hold the cache to re-validating every entry after every
// resync, however many fall within one retry window, and to asking again
// when the answer of a re-validation cannot be used. Both are the early
// call that a resync allows (docs/decisions.md, D40): today one a retry
// interval, so that the second in one window waits for the window.
//
// Found on embedded etcd through the etcd module (integration's
// etcdconverge_test.go holds the three holes of issue 29, which main
// closes): a second 2 s outage within an hour-long retry interval, a blip
// with a compaction after an outage's resync, and a resync's
// re-validation raced by 300 events, each left services stale for the
// whole retry interval (an hour).

// resyncProbeLimit is how soon after the registry is back every service
// must be served as the registry holds it: the stream's redial, one a
// probe interval while the registry is held down, then the re-validation,
// which the fake registry answers at once.
const resyncProbeLimit = cache.DefaultProbeInterval + 200*time.Millisecond

// servesAsHeld reports whether c serves every one of names with the nodes
// that reg holds.
func servesAsHeld(c cache.Cache, reg *memReg, names []string) bool {
	for _, name := range names {
		svcs, err := c.Lookup(name)
		if err != nil || !slices.Equal(nodeSetOf(svcs), reg.nodeSet(name)) {
			return false
		}
	}
	return true
}

// outageWithChange cuts the registry off for 2 s, during which every
// service gets the node id in place of its nodes, with no event, and
// returns when the registry is back.
func outageWithChange(e *convEnv, id string) time.Time {
	e.down(false)
	e.readAll(2*time.Second, 100*time.Millisecond)
	for _, name := range e.names {
		e.reg.replaceSilently(name, id)
	}
	e.f.clear()
	return time.Now()
}

// Two outages within one retry interval: the resync after each must
// re-validate every service, the second too. Today the first resync's
// re-validation is each service's early call of the interval, and the
// second finds it spent: the change made during the second outage is
// served only when the window closes, an hour later here.
func TestASecondResyncWithinARetryWindowReValidatesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 4, true, cache.WithMinimumRetryInterval(time.Hour), cache.WithTTL(2*time.Hour))
		for round, id := range []string{"b", "c"} {
			back := outageWithChange(e, id)
			for !servesAsHeld(e.c, e.reg, e.names) {
				svcs, _ := e.c.Lookup(e.names[0])
				require.Less(t, time.Since(back), resyncProbeLimit,
					"outage %d: every service must be served as the registry holds it within a probe interval of its return; %s serves %v, the registry holds %v",
					round+1, e.names[0], nodeSetOf(svcs), e.reg.nodeSet(e.names[0]))
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("outage %d: every service current %v after the registry came back", round+1, time.Since(back))
		}
	})
}

// The re-validation of a resync raced by more events than the cache keeps
// for replay (256): its answer is dropped, and what is held (the data from
// before the outage, with the events applied) misses the change made
// during the outage. The service must be asked again at once; today it is
// not, its early call spent, and the dead node is served, and the new one
// missed, for the whole retry interval.
func TestAnEarlyReValidationRacedByManyEventsIsAskedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true, cache.WithMinimumRetryInterval(time.Hour), cache.WithTTL(2*time.Hour))
		name := e.names[0]
		const late = 100 * time.Millisecond
		back := outageWithChange(e, "new")
		// The re-validation's answer is read when the call starts, and
		// reaches the cache late, after 300 events.
		e.f.setGetFor(name, getFault{late: late})
		for {
			if gets, _ := e.f.startsSince(back); len(gets) > 0 {
				break
			}
			require.Less(t, time.Since(back), resyncProbeLimit, "no re-validation")
			time.Sleep(time.Millisecond)
		}
		for i := 0; i < 300; i++ {
			require.NoError(t, e.reg.Register(faultService(name, fmt.Sprintf("x%03d", i))))
		}
		synctest.Wait()
		time.Sleep(late) // the answer is in
		answered := time.Now()
		for !servesAsHeld(e.c, e.reg, e.names) {
			svcs, _ := e.c.Lookup(name)
			served := nodeSetOf(svcs)
			require.Less(t, time.Since(answered), resyncProbeLimit,
				"the change made during the outage must be served within a probe interval of the raced answer: serving %d nodes, new: %v, old: %v",
				len(served), slices.Contains(served, "new"), slices.Contains(served, "old"))
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("current %v after the raced answer", time.Since(answered))
	})
}
