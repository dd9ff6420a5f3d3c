package cache_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// These tests hold the cache to how fast it converges, and to what a
// registry outage costs the registry, with the default options unless
// said otherwise. They run in fake time (testing/synctest).

var errOutage = errors.New("registry unreachable")

// lineLogger records log lines.
type lineLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLogger) Init(...logger.Option) error                 { return nil }
func (l *lineLogger) Options() logger.Options                     { return logger.Options{} }
func (l *lineLogger) Fields(map[string]interface{}) logger.Logger { return l }
func (l *lineLogger) String() string                              { return "lines" }
func (l *lineLogger) Log(level logger.Level, v ...interface{})    { l.add(level, fmt.Sprint(v...)) }
func (l *lineLogger) Logf(level logger.Level, format string, v ...interface{}) {
	l.add(level, fmt.Sprintf(format, v...))
}
func (l *lineLogger) add(level logger.Level, s string) {
	l.mu.Lock()
	l.lines = append(l.lines, level.String()+" "+s)
	l.mu.Unlock()
}

// since returns the lines logged after the first n.
func (l *lineLogger) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[n:]...)
}

func (l *lineLogger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// eventLog records observer events.
type eventLog struct {
	mu     sync.Mutex
	events []cache.Event
}

func (r *eventLog) add(ev cache.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *eventLog) count(kind cache.EventKind, service string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.events {
		if ev.Kind == kind && ev.Service == service {
			n++
		}
	}
	return n
}

// convEnv is a cache over the fake registry (internal/fakereg), with services
// svc-0 … svc-(n-1), each of one node "old", all looked up once.
type convEnv struct {
	t      *testing.T
	reg    *fakereg.Registry
	c      cache.Cache
	log    *lineLogger
	events *eventLog
	names  []string
	filled time.Time // when every service was looked up
}

func newConvEnv(t *testing.T, services int, listNodes bool, opts ...cache.Option) *convEnv {
	t.Helper()
	e := &convEnv{t: t, reg: fakereg.New(), log: &lineLogger{}, events: &eventLog{}}
	e.reg.SetListNodes(listNodes)
	e.reg.SetBound(cache.DefaultMinimumRetryInterval)
	for i := 0; i < services; i++ {
		name := fmt.Sprintf("svc-%d", i)
		e.names = append(e.names, name)
		require.NoError(t, e.reg.Register(faultService(name, "old")))
	}
	base := []cache.Option{cache.WithLogger(e.log), cache.WithObserver(e.events.add)}
	e.c = cache.New(e.reg, append(base, opts...)...)
	t.Cleanup(e.c.Stop)
	for _, name := range e.names {
		_, err := e.c.Lookup(name)
		require.NoError(t, err)
	}
	e.filled = time.Now()
	// The first lookup's data predates the stream it started: let its
	// re-validation, due after the retry interval, be done with.
	time.Sleep(cache.DefaultMinimumRetryInterval)
	synctest.Wait()
	return e
}

// down makes every registry call fail and cuts the watch stream, which
// cannot be reopened until the faults are cleared; with hang, the stream
// instead blocks through the outage and tells nothing of it afterwards, as
// go-micro's etcd plugin does.
func (e *convEnv) down(hang bool) {
	e.reg.SetFault(fakereg.Fault{Err: errOutage})
	if hang {
		e.reg.SetWatchFault(fakereg.WatchFault{NextHang: true})
	} else {
		e.reg.SetWatchFault(fakereg.WatchFault{WatchErr: errOutage, BreakErr: errOutage})
		e.reg.Cut()
	}
	synctest.Wait() // the cache sees a lost stream at once
}

// readAll looks every service up every period for d, and returns the
// lookups that failed.
func (e *convEnv) readAll(d, period time.Duration) (failed int) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(period) {
		for _, name := range e.names {
			if _, err := e.c.Lookup(name); err != nil {
				failed++
			}
		}
	}
	return failed
}

// outageCost runs a 60 s outage that starts a second before the data,
// filled together, expires, while every service is read every period. It
// returns the GetService calls made during the outage and the lines logged
// from its start to 10 s after.
func outageCost(t *testing.T, services int, period time.Duration, hang bool) (calls int, lines []string, e *convEnv) {
	e = newConvEnv(t, services, true)
	time.Sleep(time.Until(e.filled.Add(cache.DefaultTTL - time.Second)))
	base, logged := e.reg.Report().TotalCalls, e.log.count()
	e.down(hang)
	failed := e.readAll(time.Minute, period)
	calls = e.reg.Report().TotalCalls - base
	e.reg.ClearFaults()
	failed += e.readAll(10*time.Second, period)
	assert.Zero(t, failed, "lookups of services with data failed")
	r := e.reg.Report()
	assert.Zero(t, r.Violations, "per-service bound: %v", r.First)
	return calls, e.log.since(logged), e
}

// A 60 s outage costs about one registry call a second, however many
// services are cached, and one log line and one event each way.
func TestOutageCostsAboutOneProbeASecond(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		services int
		period   time.Duration
		hang     bool
		want     int
	}{
		// A lost stream is the first sign: one refresh fails, then probes.
		{100, 100 * time.Millisecond, false, 60},
		{cache.RaceScale(10_000), time.Second, false, 60},
		// A stream that blocks gives none: up to four refreshes in flight
		// fail before the cache knows.
		{100, 100 * time.Millisecond, true, 64},
		{cache.RaceScale(10_000), time.Second, true, 64},
	} {
		t.Run(fmt.Sprintf("%d services, stream hangs %v", tc.services, tc.hang), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				calls, lines, e := outageCost(t, tc.services, tc.period, tc.hang)
				t.Logf("%d services, 60 s outage, stream hangs %v: %d registry calls, %d log lines:\n%s",
					tc.services, tc.hang, calls, len(lines), strings.Join(lines, "\n"))
				assert.LessOrEqual(t, calls, tc.want)
				assert.LessOrEqual(t, len(lines), 6)
				down, up := 0, 0
				for _, line := range lines {
					assert.NotContains(t, line, "refresh of service", "no per-service line for a registry-wide outage")
					if strings.Contains(line, "unreachable") {
						down++
					}
					if strings.Contains(line, "reachable again") {
						up++
					}
				}
				assert.Equal(t, 1, down)
				assert.Equal(t, 1, up)
				assert.False(t, e.c.Stats().RegistryDown)
				if tc.services <= 100 {
					assert.Equal(t, 1, e.events.count(cache.RegistryDown, ""))
					assert.Equal(t, 1, e.events.count(cache.RegistryUp, ""))
					assert.Zero(t, e.c.Stats().ObserverDropped)
				}
			})
		})
	}
}

// A failure of one service while the registry answers the others is that
// service's own: the registry is not held down, the other services refresh
// as usual, and the failing one is retried on its own interval and logged
// once.
func TestOneFailingServiceKeepsPerServiceBehaviour(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Second))
		e.reg.SetFaultFor("svc-0", fakereg.Fault{Err: errOutage})
		logged := e.log.count()
		assert.Zero(t, e.readAll(time.Minute, 100*time.Millisecond))
		assert.Zero(t, e.events.count(cache.RegistryDown, ""), "the registry answers the others")
		assert.LessOrEqual(t, e.reg.Calls("svc-0"), 1+1+int(time.Minute/cache.DefaultMinimumRetryInterval))
		assert.GreaterOrEqual(t, e.reg.Calls("svc-0"), int(time.Minute/cache.DefaultMinimumRetryInterval)-1,
			"retried on its own interval")
		for _, name := range e.names[1:] {
			assert.GreaterOrEqual(t, e.reg.Calls(name), 1+int(time.Minute/(10*time.Second))-1, "%s refreshed every TTL", name)
		}
		lines := e.log.since(logged)
		require.Len(t, lines, 1, "%v", lines)
		assert.Contains(t, lines[0], `"svc-0" failing`)
		assert.Equal(t, 1, e.events.count(cache.RefreshFailed, "svc-0"))
	})
}

// coldThroughOutage looks a service with nothing cached up every second
// through a minute of outage (see convEnv.down for hang), and checks that
// its calls kept to its retry interval.
func coldThroughOutage(t *testing.T, hang bool) *convEnv {
	t.Helper()
	e := newConvEnv(t, 1, true)
	require.NoError(t, e.reg.Register(faultService("cold", "c1")))
	e.down(hang)
	for i := 0; i < 60; i++ {
		_, err := e.c.Lookup("cold")
		require.Error(t, err)
		time.Sleep(time.Second)
	}
	assert.LessOrEqual(t, e.reg.Calls("cold"), 1+int(time.Minute/cache.DefaultMinimumRetryInterval))
	return e
}

// A cold service looked up all through an outage that only its own
// refreshes see (the stream blocks, nothing else is refreshed) is told
// failing once, not once per retry window: its entry keeps the record of
// the failure between attempts.
func TestColdServiceFailingAloneIsToldOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := coldThroughOutage(t, true)
		assert.Zero(t, e.events.count(cache.RegistryDown, ""), "one service failing is not the registry")
		assert.Equal(t, 1, e.events.count(cache.RefreshFailed, "cold"), "told once, not once a window")
		e.reg.ClearFaults()
		time.Sleep(cache.DefaultMinimumRetryInterval)
		_, err := e.c.Lookup("cold")
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, 1, e.events.count(cache.RefreshRecovered, "cold"))
	})
}

// A cold service looked up all through an outage is not told failing once
// per retry window: the outage is told once, as the registry's. When its
// refresh is the one that finds the registry back, every entry is
// re-validated.
func TestColdServiceInAnOutageIsToldOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := coldThroughOutage(t, false)
		assert.Zero(t, e.events.count(cache.RefreshFailed, "cold"), "the registry's failure, not the service's")
		assert.Equal(t, 1, e.events.count(cache.RegistryDown, ""))
		before := e.reg.Calls("svc-0")
		e.reg.ClearFaults()
		time.Sleep(cache.DefaultMinimumRetryInterval)
		got, err := e.c.Lookup("cold")
		require.NoError(t, err)
		assert.Equal(t, []string{"c1"}, nodeSetOf(got))
		synctest.Wait()
		assert.Equal(t, 1, e.events.count(cache.RegistryUp, ""))
		got, err = e.c.Lookup("svc-0")
		require.NoError(t, err)
		// Re-validated once the stream is back; perhaps also probed
		// before, as a cached service while the stream was down.
		calls := e.reg.Calls("svc-0") - before
		assert.GreaterOrEqual(t, calls, 1, "the recovery re-validated the others")
		assert.LessOrEqual(t, calls, 2)
		assert.Equal(t, []string{"old"}, nodeSetOf(got))
	})
}

// convergence runs a 60 s outage during which every service's node is
// replaced with no event, and returns how long after the registry's return
// the last service was first served its new node, checking that no old
// node is served after that. It also checks the registry calls of the 10 s
// after the return.
func convergence(t *testing.T, services int, listNodes, hang bool) time.Duration {
	e := newConvEnv(t, services, listNodes)
	time.Sleep(time.Until(e.filled.Add(cache.DefaultTTL))) // every entry is stale when the outage starts
	e.down(hang)
	e.readAll(time.Minute, 100*time.Millisecond)
	for _, name := range e.names {
		e.reg.Set(name, faultService(name, "new"))
	}
	// Back at a moment unrelated to the cache's probes.
	time.Sleep(370 * time.Millisecond)
	callsBefore := map[string]int{}
	for _, name := range e.names {
		callsBefore[name] = e.reg.Calls(name)
	}
	lists := e.reg.ListCalls()
	e.reg.ClearFaults()
	back := time.Now()
	e.reg.SetFault(fakereg.Fault{Latency: time.Millisecond})
	current := map[string]time.Duration{}
	for time.Since(back) < 10*time.Second {
		for _, name := range e.names {
			got, err := e.c.Lookup(name)
			require.NoError(t, err)
			ids := nodeSetOf(got)
			if _, ok := current[name]; ok {
				require.Equal(t, []string{"new"}, ids, "%s: an old node served after the new one", name)
				continue
			}
			if ids[0] == "new" {
				current[name] = time.Since(back)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Len(t, current, services, "every service converged")
	var last time.Duration
	for _, d := range current {
		last = max(last, d)
	}
	maxCalls := 0
	for _, name := range e.names {
		maxCalls = max(maxCalls, e.reg.Calls(name)-callsBefore[name])
	}
	t.Logf("%d services, ListServices with nodes %v, stream hangs %v: every service current %v after the registry's return; at most %d GetService calls for one service and %d ListServices calls in the 10 s after",
		services, listNodes, hang, last, maxCalls, e.reg.ListCalls()-lists)
	if listNodes {
		assert.Equal(t, 1, e.reg.ListCalls()-lists, "one ListServices call")
		assert.LessOrEqual(t, maxCalls, 1, "the probe's service, at most")
	} else {
		assert.LessOrEqual(t, maxCalls, 2)
	}
	return last
}

func TestRecoveryConvergesWithinASecond(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ listNodes, hang bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		t.Run(fmt.Sprintf("list nodes %v, stream hangs %v", tc.listNodes, tc.hang), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				last := convergence(t, 100, tc.listNodes, tc.hang)
				assert.LessOrEqual(t, last, time.Second+100*time.Millisecond, "within the probe interval and the resync")
			})
		})
	}
}

// A stream lost early in a long outage backs off to 30 s between attempts;
// the first answer of the registry cuts that short.
func TestStreamIsBackWithinASecondOfRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true)
		e.down(false)
		e.readAll(5*time.Minute, time.Second)
		streams := e.reg.Report().Streams
		e.reg.ClearFaults()
		back := time.Now()
		for e.reg.Report().Streams == streams && time.Since(back) < time.Minute {
			e.readAll(10*time.Millisecond, 10*time.Millisecond)
		}
		assert.LessOrEqual(t, time.Since(back), time.Second+20*time.Millisecond, "the stream is back with the first probe")
	})
}

// A service that starts after it was first looked up, and one whose single
// instance restarts, are served from the watch stream's create event: no
// lookup fails once the event has arrived, however recent the not-found.
func TestLateStartAndRestartAreServedFromTheCreateEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true)
		_, err := e.c.Lookup("late")
		require.Equal(t, registry.ErrNotFound, err)
		_, err = e.c.Lookup("late")
		require.Equal(t, registry.ErrNotFound, err, "not found, inside its window: no call")
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, e.reg.Register(faultService("late", "l1")))
		synctest.Wait()
		got, err := e.c.Lookup("late")
		require.NoError(t, err, "served from the create event, inside the retry window")
		assert.Equal(t, []string{"l1"}, nodeSetOf(got))
		assert.Equal(t, 1, e.reg.Calls("late"))

		// A single instance restarts: delete, then a new node 200 ms later.
		time.Sleep(time.Minute)
		require.NoError(t, e.reg.Deregister(faultService("svc-0", "old")))
		synctest.Wait()
		got, err = e.c.Lookup("svc-0")
		require.NoError(t, err, "the last node, until a create replaces it or the registry confirms that none is left")
		require.Equal(t, []string{"old"}, nodeSetOf(got))
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, e.reg.Register(faultService("svc-0", "restarted")))
		synctest.Wait()
		for i := 0; i < 100; i++ {
			got, err = e.c.Lookup("svc-0")
			require.NoError(t, err)
			require.Equal(t, []string{"restarted"}, nodeSetOf(got))
			time.Sleep(100 * time.Millisecond)
		}
		assert.Zero(t, e.events.count(cache.ServiceStale, "svc-0"), "data announced by an event did not turn stale")

		// Again, with no lookup between the two: the entry outlives the
		// delete of its last node, so the create still finds it; the
		// delete is confirmed with the registry first.
		calls := e.reg.Calls("svc-0")
		require.NoError(t, e.reg.Deregister(faultService("svc-0", "restarted")))
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, e.reg.Register(faultService("svc-0", "again")))
		synctest.Wait()
		assert.Equal(t, calls, e.reg.Calls("svc-0"), "the confirmation waits for the replacement's create")
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, calls+1, e.reg.Calls("svc-0"), "one call, to confirm what the delete and the create told")
		// The key now fails: only the event can answer. The lookup may
		// start a refresh to confirm the nodes; it does not wait for it.
		e.reg.SetFaultFor("svc-0", fakereg.Fault{Err: errOutage})
		got, err = e.c.Lookup("svc-0")
		require.NoError(t, err, "served from the event")
		assert.Equal(t, []string{"again"}, nodeSetOf(got))
	})
}

// With the registry-wide state off, the first answer after failures still
// cuts the stream's reconnect backoff.
func TestAnswerAfterFailuresCutsTheStreamBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true, cache.WithProbeInterval(0), cache.WithTTL(time.Second))
		e.down(false)
		e.readAll(5*time.Minute, time.Second)
		streams := e.reg.Report().Streams
		e.reg.ClearFaults()
		back := time.Now()
		for e.reg.Report().Streams == streams && time.Since(back) < time.Minute {
			e.readAll(10*time.Millisecond, 10*time.Millisecond)
		}
		assert.LessOrEqual(t, time.Since(back), cache.DefaultMinimumRetryInterval+20*time.Millisecond,
			"back with the first refresh answered")
	})
}

// Events for names nobody looked up are not kept, and the stream is open
// from the first lookup, even one that found nothing.
func TestStreamOpensWithTheFirstLookup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := fakereg.New()
		c := cache.New(reg, cache.WithLogger(benchLogger))
		defer c.Stop()
		_, err := c.Lookup("nothing")
		require.ErrorIs(t, err, registry.ErrNotFound)
		synctest.Wait()
		assert.Equal(t, 1, reg.Report().Open)
		require.NoError(t, reg.Register(faultService("other", "o1")))
		synctest.Wait()
		st := c.Stats()
		assert.Equal(t, uint64(1), st.EventsIgnored)
		assert.Equal(t, 1, st.Entries)
	})
}

// Under WithMaximumStale, nodes that an event has just announced are served,
// however old the rest of the data.
func TestMaxStaleServesNodesAnEventJustAnnounced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 1, true, cache.WithTTL(10*time.Second), cache.WithMaximumStale(time.Minute))
		e.reg.SetFault(fakereg.Fault{Err: errOutage})
		time.Sleep(2 * time.Minute)
		_, err := e.c.Lookup("svc-0")
		require.ErrorIs(t, err, cache.ErrTooStale)
		require.NoError(t, e.reg.Register(faultService("svc-0", "fresh")))
		synctest.Wait()
		got, err := e.c.Lookup("svc-0")
		require.NoError(t, err, "just announced")
		assert.Equal(t, []string{"fresh", "old"}, nodeSetOf(got))
		time.Sleep(time.Minute + time.Second)
		_, err = e.c.Lookup("svc-0")
		assert.ErrorIs(t, err, cache.ErrTooStale, "until the limit passes again")
	})
}

// Refreshes of services whose calls hang, while the registry answers the
// others, do not hold the background slots for long: the other services
// keep refreshing on their TTL.
func TestHangingServicesDoNotStarveTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, true, cache.WithTTL(10*time.Second))
		for _, name := range e.names[:4] { // as many as there are slots
			e.reg.SetFaultFor(name, fakereg.Fault{Hang: true, IgnoreCtx: true})
		}
		before := map[string]int{}
		for _, name := range e.names {
			before[name] = e.reg.Calls(name)
		}
		assert.Zero(t, e.readAll(time.Minute, 100*time.Millisecond))
		for _, name := range e.names[4:] {
			assert.GreaterOrEqual(t, e.reg.Calls(name)-before[name], 5, "%s refreshed every TTL", name)
		}
		for _, name := range e.names[:4] {
			assert.Equal(t, 1, e.reg.Calls(name)-before[name], "%s: one call, hanging", name)
		}
		assert.Zero(t, e.events.count(cache.RegistryDown, ""), "the registry answers the others")
		e.reg.ClearFaults() // the hung calls return
	})
}

// With every slot held by a hanging call, a resync that no reader drives
// still goes on: the maintainer wakes when the slots have been held for
// long enough to let one more refresh start.
//
// The test acts only at instants when the cache has nothing due: a resync
// started at the very moment the entries' retry windows close would race
// the maintainer over which of them start first.
func TestResyncGoesOnPastHangingCallsWithNoReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 10, false)
		for _, name := range e.names[:4] {
			e.reg.SetFaultFor(name, fakereg.Fault{Hang: true, IgnoreCtx: true})
		}
		resync := func() {
			streams := e.reg.Report().Streams
			e.reg.Cut()
			for e.reg.Report().Streams == streams {
				time.Sleep(10 * time.Millisecond)
			}
		}
		// Every window is open: the first resync starts all ten, and the
		// four hang, holding every slot.
		time.Sleep(cache.DefaultMinimumRetryInterval + 500*time.Millisecond)
		resync()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		for _, name := range e.names[:4] {
			require.Positive(t, e.reg.Calls(name), "%s: its call hangs", name)
		}
		// Past the windows of the six that answered.
		time.Sleep(cache.DefaultMinimumRetryInterval)
		synctest.Wait()
		before := map[string]int{}
		for _, name := range e.names {
			before[name] = e.reg.Calls(name)
		}
		resync()
		start := time.Now()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		for _, name := range e.names[4:] {
			assert.Equal(t, 1, e.reg.Calls(name)-before[name], "%s re-validated within %v", name, time.Since(start))
		}
		for _, name := range e.names[:4] {
			assert.Equal(t, before[name], e.reg.Calls(name), "%s: still the one call, hanging", name)
		}
		e.reg.ClearFaults() // the hung calls return
	})
}

// After an outage, every cached service is re-validated at once, whatever
// the number of services and however long the retry interval: the
// re-validation is the one call a resync lets through ahead of a
// service's window. With fewer services than a list pays for, each is
// asked for on its own; with more, those that a list answer no longer
// names (every node gone during the cut) are asked for on their own.
func TestAResyncCoversEveryEntryAtOnce(t *testing.T) {
	for _, n := range []int{4, 12} {
		t.Run(fmt.Sprint(n, " services"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newConvEnv(t, n, true, cache.WithMinimumRetryInterval(time.Hour), cache.WithTTL(2*time.Hour))
				e.down(false)
				for time.Since(e.filled) < 2*time.Second+cache.DefaultMinimumRetryInterval {
					e.readAll(100*time.Millisecond, 100*time.Millisecond)
				}
				// During the cut, every service changes with no event, and
				// two lose every node.
				for i, name := range e.names {
					if i < 2 {
						e.reg.Delete(name)
						continue
					}
					e.reg.Set(name, faultService(name, "new"))
				}
				e.reg.ClearFaults()
				back := time.Now()
				for {
					current := 0
					for i, name := range e.names {
						svcs, err := e.c.Lookup(name)
						switch {
						case i < 2 && err == registry.ErrNotFound:
							current++
						case i >= 2 && err == nil && slices.Equal(nodeSetOf(svcs), []string{"new"}):
							current++
						}
					}
					if current == n {
						break
					}
					require.Less(t, time.Since(back), 3*time.Second, "every service current within a probe interval and the registry's answer")
					time.Sleep(10 * time.Millisecond)
				}
				t.Logf("%d services current %v after the registry came back", n, time.Since(back))
				e.reg.ClearFaults()
			})
		})
	}
}

// A recovery lists the registry once: the list of the resync that the
// stream's return starts is what brings the registry back up, and its
// return starts no second list.
func TestARecoveryListsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newConvEnv(t, 12, true, cache.WithTTL(time.Hour))
		e.down(false)
		e.readAll(3*time.Second, 100*time.Millisecond)
		require.True(t, e.c.Stats().RegistryDown)
		lists := e.reg.ListCalls()
		e.reg.ClearFaults()
		e.readAll(3*time.Second, 100*time.Millisecond)
		require.False(t, e.c.Stats().RegistryDown)
		assert.Equal(t, lists+1, e.reg.ListCalls(), "one ListServices for the recovery")
		e.reg.ClearFaults()
	})
}
