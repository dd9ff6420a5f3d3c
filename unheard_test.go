package cache_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// natsDown makes the registry behave as the NATS plugin does while its
// server is down: every GetService answers no service and no error once
// its query times out, and the watch stream neither fails nor delivers.
func (e *convEnv) natsDown() {
	e.reg.SetFault(fakereg.Fault{Unheard: true})
	e.reg.SetWatchFault(fakereg.WatchFault{NextHang: true})
	synctest.Wait()
}

// An empty answer with no error, the way NATS and mdns say that nobody
// answered in time, never empties a service that holds nodes: through a
// 10 s outage with a 1 s TTL every lookup is served, the registry is held
// down after two services (about one call a second), and nodes replaced
// during the outage are served soon after it ends, although the stream
// never told of them.
func TestUnheardAnswerKeepsNodesThroughOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, false, cache.WithTTL(time.Second))
		base := e.reg.Report().TotalCalls
		e.natsDown()
		failed := e.readAll(10*time.Second, 100*time.Millisecond)
		calls := e.reg.Report().TotalCalls - base
		assert.Zero(t, failed, "lookups of services that held nodes failed during the outage")
		assert.LessOrEqual(t, calls, 20, "about one probe a second, not one call per service per second")
		assert.Equal(t, 1, e.events.count(cache.RegistryDown, ""), "the outage is told once")
		for _, name := range e.names {
			e.reg.Set(name, faultService(name, "new"))
		}
		e.reg.ClearFaults()
		took := e.untilCurrent("new", 5*time.Second)
		t.Logf("10 s NATS-like outage: %d registry calls, 0 failed lookups; nodes replaced meanwhile served %v after its end", calls, took)
		assert.LessOrEqual(t, took, 2*time.Second, "resynced on recovery, not after a TTL")
		assert.Equal(t, 1, e.events.count(cache.RegistryUp, ""))
	})
}

// While the registry is otherwise answering, a service that stays empty is
// gone: its nodes are dropped once two empty answers in a row came each
// after the registry was heard from, two retry windows after the first
// empty answer, and a lookup then gets ErrNotFound.
func TestUnheardAnswerConfirmedWhileRegistryAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 3, false, cache.WithTTL(time.Second))
		gone := e.names[0]
		e.reg.SetFaultFor(gone, fakereg.Fault{Unheard: true})
		time.Sleep(cache.DefaultMinimumRetryInterval) // every entry expired, its retry window closed
		got, err := e.c.Lookup(gone)
		require.NoError(t, err, "the first empty answer is doubted")
		assert.Equal(t, []string{"old"}, nodeSetOf(got))
		synctest.Wait()
		got, err = e.c.Lookup(gone)
		require.NoError(t, err, "kept while the answer is unconfirmed")
		assert.Equal(t, []string{"old"}, nodeSetOf(got))
		// The other services are read from a second later, so that their
		// answers (the registry heard from) fall between the empty ones
		// rather than at the same instants, in an order left to the
		// scheduler.
		time.Sleep(time.Second)

		var dropped time.Duration
		start := time.Now()
		for time.Since(start) < 30*time.Second {
			e.readAll(100*time.Millisecond, 100*time.Millisecond)
			if _, err := e.c.Lookup(gone); err != nil {
				assert.True(t, errors.Is(err, registry.ErrNotFound), "%v", err)
				dropped = time.Since(start)
				break
			}
		}
		require.NotZero(t, dropped, "a service that stays empty while others answer is dropped")
		assert.Greater(t, dropped, cache.DefaultMinimumRetryInterval, "not at the second empty answer")
		assert.LessOrEqual(t, dropped, 2*cache.DefaultMinimumRetryInterval+time.Second, "at the third")
		for _, name := range e.names[1:] {
			_, err := e.c.Lookup(name)
			assert.NoError(t, err)
		}
		assert.Zero(t, e.events.count(cache.RegistryDown, ""), "one empty service is no outage")
	})
}

// ErrNotFound is the registry saying no, not failing to hear: it drops the
// nodes at once, as before.
func TestNotFoundStillDropsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 2, false, cache.WithTTL(time.Second))
		gone := e.names[0]
		e.reg.SetFaultFor(gone, fakereg.Fault{Err: registry.ErrNotFound})
		time.Sleep(cache.DefaultMinimumRetryInterval)
		_, err := e.c.Lookup(gone) // stale, served while the refresh runs
		require.NoError(t, err)
		synctest.Wait()
		_, err = e.c.Lookup(gone)
		assert.True(t, errors.Is(err, registry.ErrNotFound), "%v", err)
	})
}

// Right after an outage, one query that misses its timeout does not drop a
// service that was doubted through the outage: the registry being heard
// from again is not enough, the empty answers must repeat after it.
func TestUnheardAnswerAfterOutageNeedsRepeating(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, false, cache.WithTTL(time.Second))
		e.natsDown()
		assert.Zero(t, e.readAll(10*time.Second, 100*time.Millisecond))
		// Back, except that svc-0's queries still miss their timeout.
		e.reg.ClearFaults()
		e.reg.SetFaultFor("svc-0", fakereg.Fault{Unheard: true})
		failed := e.readAll(4*time.Second, 100*time.Millisecond)
		assert.Zero(t, failed, "a service held through the outage was dropped on one miss after it")
		assert.Equal(t, 1, e.events.count(cache.RegistryUp, ""))
	})
}
