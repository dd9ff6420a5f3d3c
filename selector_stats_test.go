package cache_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cache "github.com/regcache/cache"
)

// What the selector's Stats count and show.

// Refused counts the nodes that the share keeps in rotation, once per node
// and run of failures, so that an alert on it (the share is exhausted: more
// nodes dead than the cap) tells one dead node from many, as the log does.
//
// Regression: it counted every failure of a node kept in by the share, 28
// for 30 failures, thousands a minute under load.
func TestRefusedCountsEjectionsNotFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 4, cache.WithEjectionTime(time.Hour, time.Hour))
		failN(t, s.sel, listedNode("n1"), 3)
		failN(t, s.sel, listedNode("n2"), 3)
		require.Len(t, selStats(t, s.sel).Ejected, 2)
		failN(t, s.sel, listedNode("n3"), 30) // dead, kept in by the share
		st := selStats(t, s.sel)
		assert.EqualValues(t, 1, st.Refused, "Refused after one node kept in by the share failed 30 times (Failures %d)", st.Failures)
	})
}

// Stats().Ejected shows the nodes of the list the cache holds now, also
// with no traffic to the service (its callers gave up, or the admin page is
// read during an incident).
//
// Regression: it showed the list as the state last matched it, at the
// service's last Select or failure Mark: a node ejected and then
// deregistered was still shown, and counted in the share, until the
// service's next call.
func TestStatsEjectedFollowsTheCachedList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 4, cache.WithEjectionTime(time.Hour, time.Hour))
		failN(t, s.sel, listedNode("n3"), 3)
		require.Equal(t, []string{"n3"}, ejectedIDs(selStats(t, s.sel)))
		s.event("delete", selService("1", "n3")) // n3 deregistered
		svcs, err := s.c.Lookup("svc")
		require.NoError(t, err)
		require.Len(t, svcs[0].Nodes, 3, "the cache no longer lists n3")
		st := selStats(t, s.sel)
		assert.Empty(t, st.Ejected, "Stats().Ejected after n3 left the cached list: %s", ejectedRows(st))
	})
}

// Failures of client.WithAddress calls count in Failures, but neither in
// Ejections nor in Readmitted: go-micro's client never calls Select for
// such a call, so passive health cannot change where it goes, and
// Stats().Ejected never shows the address.
//
// Regression: a client making WithAddress calls to a flaky address (a
// sidecar, a static dependency) showed a stream of ejections and
// readmissions that no row explained and that changed no pick, and an
// alert on Ejections fired for nothing.
func TestWithAddressFailuresDoNotCountAsEjections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newHealthSim(t, 3)
		_, err := s.sel.Select("svc")
		require.NoError(t, err)
		direct := withAddressNode("10.9.9.9:8080")
		for round := 0; round < 5; round++ {
			for i := 0; i < 3; i++ {
				s.sel.Mark("svc", direct, errRefused)
			}
			time.Sleep(3 * time.Minute)
			s.sel.Mark("svc", direct, nil)
		}
		st := selStats(t, s.sel)
		assert.Zero(t, st.Ejections+st.Readmitted, "Ejections %d and Readmitted %d from WithAddress calls alone, which no pick ever skipped (Ejected %s)", st.Ejections, st.Readmitted, ejectedRows(st))
	})
}
