package cache_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// A stream re-established while the registry is held down resyncs at
// once, but a service whose retry window a probe during the outage opened
// cannot be asked then: the registry is not back yet, so that probe's
// failure still counts as the service's own. Once the stream has proven
// the registry back (policy.SlowCall later), the resync that follows must
// re-validate that service too, as the one early call a resync allows,
// rather than leave it waiting for its window.
//
// It holds off the NATS outage of issue 29 (integration's
// TestNodeRegisteredAfterANATSRestart): the probe during the outage is
// answered "nobody heard", the stream comes back 1 s after the restart,
// and a node registered while it was away reached regcache only when the
// probe's window closed, 5 s after the probe.
func TestAResyncAfterTheRegistryIsBackReachesAServiceWaitingForItsWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, false) // a registry that lists names only, as NATS
		const name = "svc-0"

		// The outage: the stream is lost, and its redial waits for the
		// registry, as the nats module's Watch waits for nats.go to
		// re-establish the connection; GetService is answered "nobody
		// heard", as the NATS plugin answers while its connection is
		// down. The cache probes, which opens the service's window.
		e.reg.SetFault(fakereg.Fault{Unheard: true})
		e.reg.SetWatchFault(fakereg.WatchFault{WatchHang: true, BreakErr: errOutage})
		e.reg.Cut()
		outage := time.Now()
		var probes []time.Time
		for len(probes) == 0 {
			time.Sleep(10 * time.Millisecond)
			probes, _ = e.reg.StartsSince(outage)
		}
		require.True(t, e.c.Stats().RegistryDown, "the registry is held down")
		lastProbe := probes[len(probes)-1]
		time.Sleep(200 * time.Millisecond)

		// A node registered while the stream is away: its event is lost.
		require.NoError(t, e.reg.Register(faultService(name, "new")))
		// The registry is back.
		e.reg.ClearFaults()
		back := time.Now()

		deadline := back.Add(2 * time.Second) // the redial, then policy.SlowCall
		for time.Now().Before(deadline) && !servesNode(e.c, name, "new") {
			time.Sleep(10 * time.Millisecond)
		}
		assert.True(t, servesNode(e.c, name, "new"),
			"the node registered during the outage is not served %v after the registry is back (the last probe was %v before it; its window closes %v after it)",
			time.Since(back), back.Sub(lastProbe), cache.DefaultMinimumRetryInterval)
		// The stream established after the probe's failure may be the
		// registry back: the service is the next probe, which need not
		// wait for the stream to prove itself (policy.SlowCall).
		assert.Less(t, time.Since(back), time.Second, "served before the stream has proven itself")
	})
}

// servesNode reports whether c serves the node id of name.
func servesNode(c cache.Cache, name, id string) bool {
	svcs, err := c.Lookup(name)
	if err != nil {
		return false
	}
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if n.Id == id {
				return true
			}
		}
	}
	return false
}
