package integration

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// statsScenario drives a cache through a known sequence of lookups, registry
// answers and watch events, so that every counter of Stats has a known
// value; the Prometheus and OpenTelemetry tests check their exports of it.
//
// The cache runs over go-micro's memory registry, wrapped so that the test
// drives the watch stream (the memory registry's own watcher drops an event
// that its reader does not take within 10 ms) and one service fails. TTL and
// retry interval are an hour: nothing expires, and no refresh starts, unless
// the test makes it.
type statsScenario struct {
	c     cache.Cache
	start time.Time
	// scrapes counts the collections made while the readers ran, and
	// rounds the readers' rounds.
	scrapes int
	rounds  atomic.Int64
}

const (
	scenarioReaders = 4
	// Each reader makes at least scenarioRounds rounds, each with one
	// lookup of every outcome but a miss, and goes on until the caller
	// has collected scenarioScrapes times.
	scenarioRounds  = 50
	scenarioScrapes = 20
	scenarioCold    = 5 // per reader: lookups of names never looked up, each a miss
)

// The scenario's totals. Before the readers: 2 cold misses and a not-found
// miss. The readers: one fresh hit, stale serve, throttled and invalid
// lookup each per round, and their cold misses. After: a failed miss, a
// stale serve and a fresh hit.
func (s *statsScenario) Fresh() float64     { return float64(s.rounds.Load() + 1) }
func (s *statsScenario) Stale() float64     { return float64(s.rounds.Load() + 1) }
func (s *statsScenario) Throttled() float64 { return float64(s.rounds.Load()) }
func (s *statsScenario) Invalid() float64   { return float64(s.rounds.Load()) }
func (s *statsScenario) Misses() float64    { return 3 + scenarioReaders*scenarioCold + 1 }
func (s *statsScenario) Lookups() float64 {
	return s.Fresh() + s.Stale() + s.Throttled() + s.Invalid() + s.Misses()
}
func (s *statsScenario) Entries() float64 { return 4 + scenarioReaders*scenarioCold }

// runStatsScenario builds the cache, hands it to register, and runs the
// scenario. While the readers look services up, with every outcome at once,
// collect is called over and over, scenarioScrapes times at least; it
// should check the exported values with a scrapeChecker. The cache is
// stopped when the test ends.
//
// Totals: the methods above; refreshes 24 (the misses), refresh errors 1;
// watch events applied 1, ignored 1, invalidating 1; reconnects 1; entries
// 24: it.greeter with 3 nodes, fresh; it.payments with 1 node, stale;
// it.missing, it.flaky and the readers' cold names without data, kept while
// their retry windows are open.
func runStatsScenario(t *testing.T, register func(cache.Cache), collect func()) *statsScenario {
	t.Helper()
	mem := registry.NewMemoryRegistry()
	mustRegister(t, mem, service("it.greeter", "g1", "g2"), 0)
	mustRegister(t, mem, service("it.payments", "p1"), 0)
	reg := &scriptedRegistry{Registry: mem, failing: "it.flaky", streams: make(chan *scriptedStream, 8)}
	sc := &statsScenario{start: time.Now()}
	sc.c = newCache(t, reg, cache.WithTTL(time.Hour), cache.WithMinimumRetryInterval(time.Hour))
	c := sc.c
	register(c)

	// Two cold lookups: misses, one registry call each. The first lookup
	// starts the watcher, which opens a stream.
	for _, name := range []string{"it.greeter", "it.payments"} {
		if _, err := c.GetService(name); err != nil {
			t.Fatalf("cold lookup of %s: %v", name, err)
		}
	}
	stream := reg.nextStream(t)
	// A service the registry does not know: a miss answered with
	// ErrNotFound; its retry window is open from now on.
	if _, err := c.GetService("it.missing"); !errors.Is(err, registry.ErrNotFound) || errors.Is(err, cache.ErrThrottled) {
		t.Fatalf("first lookup of it.missing: %v, want registry.ErrNotFound", err)
	}
	// An event that names no node invalidates it.payments: it is stale,
	// and served without a registry call while its window is open.
	stream.send(t, &registry.Result{Action: "update", Service: service("it.payments")})
	waitFor(t, 10*time.Second, "it.payments invalidated", func() bool {
		for _, s := range c.Services("it.payments", "", 1) {
			if s.Name == "it.payments" {
				return !s.Fresh
			}
		}
		return false
	})

	// Readers with every outcome at once, while the caller collects.
	var wg sync.WaitGroup
	done := make(chan struct{})
	var collected atomic.Int64
	for r := 0; r < scenarioReaders; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < scenarioRounds || collected.Load() < scenarioScrapes; j++ {
				sc.rounds.Add(1)
				if svcs, err := c.Lookup("it.greeter"); err != nil || len(nodeIDs(svcs)) != 2 {
					t.Errorf("Lookup it.greeter: %v %v", nodeIDs(svcs), err)
					return
				}
				if _, err := c.GetService("it.payments"); err != nil {
					t.Errorf("GetService it.payments: %v", err)
					return
				}
				if _, err := c.GetService("it.missing"); !errors.Is(err, cache.ErrThrottled) {
					t.Errorf("GetService it.missing: %v, want cache.ErrThrottled", err)
					return
				}
				if _, err := c.Lookup(""); !errors.Is(err, cache.ErrEmptyName) {
					t.Errorf("Lookup of the empty name: %v, want cache.ErrEmptyName", err)
					return
				}
				if j < scenarioCold {
					name := fmt.Sprintf("it.cold.%d.%d", r, j)
					if _, err := c.GetService(name); !errors.Is(err, registry.ErrNotFound) || errors.Is(err, cache.ErrThrottled) {
						t.Errorf("GetService %s: %v, want registry.ErrNotFound", name, err)
						return
					}
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		collect()
		sc.scrapes++
		collected.Add(1)
	}
	if t.Failed() {
		t.FailNow()
	}

	// A service whose registry call fails: a miss and a refresh error.
	if _, err := c.GetService("it.flaky"); err == nil || errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("lookup of it.flaky: %v, want the registry's error", err)
	}

	// Two watch events: one applied, one for a service that is not
	// cached. Then the stream fails; the send returns once the watcher is
	// back in Next, after applying both.
	stream.send(t, &registry.Result{Action: "update", Service: service("it.greeter", "g3")})
	stream.send(t, &registry.Result{Action: "update", Service: service("it.not-cached", "x1")})
	stream.fail(t, errors.New("scripted stream broken"))
	reg.nextStream(t)
	waitFor(t, 10*time.Second, "WatchReconnects = 1", func() bool { return c.Stats().WatchReconnects == 1 })
	waitFor(t, 10*time.Second, "registry up", func() bool { return !c.Stats().RegistryDown })

	// it.payments is still served stale, without a registry call;
	// it.greeter has the event's node.
	if _, err := c.GetService("it.payments"); err != nil {
		t.Fatalf("stale lookup of it.payments: %v", err)
	}
	if svcs, err := c.Lookup("it.greeter"); err != nil || joinIDs(svcs) != "g1,g2,g3" {
		t.Fatalf("Lookup it.greeter after the event: %v %v, want g1,g2,g3", nodeIDs(svcs), err)
	}
	return sc
}

// scrapeKeys names, in one exporter's flattened series, the values that
// scrapeChecker relates.
type scrapeKeys struct {
	lookups                                         string
	fresh, stale, event, throttled, misses, invalid string
	refreshes, refreshErrors                        string
	oldestStale                                     string
	isCounter                                       func(key string) bool
}

// scrapeChecker checks the invariants that hold between the values of one
// scrape and from one scrape to the next: lookups are the sum of their six
// outcomes, refresh errors never exceed refreshes, and no counter, nor the
// oldest stale age served, ever goes down.
type scrapeChecker struct {
	keys scrapeKeys
	prev map[string]float64
}

// check returns what is wrong with got, the next scrape.
func (c *scrapeChecker) check(got map[string]float64) []string {
	var bad []string
	k := c.keys
	need := []string{k.lookups, k.fresh, k.stale, k.event, k.throttled, k.misses, k.invalid, k.refreshes, k.refreshErrors, k.oldestStale}
	for _, key := range need {
		if _, ok := got[key]; !ok {
			bad = append(bad, key+" missing")
		}
	}
	if len(bad) > 0 {
		return bad
	}
	if sum := got[k.fresh] + got[k.stale] + got[k.event] + got[k.throttled] + got[k.misses] + got[k.invalid]; got[k.lookups] != sum {
		bad = append(bad, fmt.Sprintf("%s = %v, but its outcomes add up to %v (fresh %v, stale %v, event %v, throttled %v, misses %v, invalid %v)",
			k.lookups, got[k.lookups], sum, got[k.fresh], got[k.stale], got[k.event], got[k.throttled], got[k.misses], got[k.invalid]))
	}
	if got[k.refreshErrors] > got[k.refreshes] {
		bad = append(bad, fmt.Sprintf("%s = %v exceeds %s = %v", k.refreshErrors, got[k.refreshErrors], k.refreshes, got[k.refreshes]))
	}
	var keys []string
	for key := range got {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if !k.isCounter(key) && key != k.oldestStale {
			continue
		}
		if p, ok := c.prev[key]; ok && got[key] < p {
			bad = append(bad, fmt.Sprintf("%s went down from %v to %v", key, p, got[key]))
		}
	}
	c.prev = got
	return bad
}

// scriptedRegistry is a registry whose watch streams the test drives, and
// whose GetService fails for one name. Everything else goes to the wrapped
// registry.
type scriptedRegistry struct {
	registry.Registry
	failing string
	streams chan *scriptedStream
}

func (r *scriptedRegistry) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	if name == r.failing {
		return nil, errors.New("scripted registry failure")
	}
	return r.Registry.GetService(name, opts...)
}

func (r *scriptedRegistry) Watch(...registry.WatchOption) (registry.Watcher, error) {
	s := &scriptedStream{
		events:  make(chan *registry.Result),
		errs:    make(chan error),
		stopped: make(chan struct{}),
	}
	select {
	case r.streams <- s:
	default:
		return nil, errors.New("scripted registry: too many watch streams")
	}
	return s, nil
}

// nextStream returns the next stream the cache opens.
func (r *scriptedRegistry) nextStream(t *testing.T) *scriptedStream {
	t.Helper()
	select {
	case s := <-r.streams:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the cache opened no watch stream within 10 s")
		return nil
	}
}

// scriptedStream is a registry.Watcher fed by the test over unbuffered
// channels: a send returns when the cache's watcher has taken the event.
type scriptedStream struct {
	events  chan *registry.Result
	errs    chan error
	stopped chan struct{}
	once    sync.Once
}

func (s *scriptedStream) Next() (*registry.Result, error) {
	select {
	case r := <-s.events:
		return r, nil
	case err := <-s.errs:
		return nil, err
	case <-s.stopped:
		return nil, registry.ErrWatcherStopped
	}
}

func (s *scriptedStream) Stop() { s.once.Do(func() { close(s.stopped) }) }

func (s *scriptedStream) send(t *testing.T, r *registry.Result) {
	t.Helper()
	select {
	case s.events <- r:
	case <-time.After(10 * time.Second):
		t.Fatalf("the cache's watcher took no event within 10 s")
	}
}

func (s *scriptedStream) fail(t *testing.T, err error) {
	t.Helper()
	select {
	case s.errs <- err:
	case <-time.After(10 * time.Second):
		t.Fatalf("the cache's watcher did not call Next within 10 s")
	}
}

// TestScrapeChecker shows that the checker the exporter tests rely on
// catches what it claims to: a torn snapshot, a counter going down, the
// oldest stale age going down, and more errors than refreshes.
func TestScrapeChecker(t *testing.T) {
	good := map[string]float64{
		"regcache_lookups_total": 10, "regcache_fresh_hits_total": 4, "regcache_stale_serves_total": 3, "regcache_event_serves_total": 0,
		"regcache_throttled_total": 1, "regcache_misses_total": 1, "regcache_invalid_lookups_total": 1,
		"regcache_refreshes_total": 2, "regcache_refresh_errors_total": 1,
		"regcache_oldest_stale_served_seconds": 5, "regcache_entries": 7,
	}
	with := func(changes map[string]float64) map[string]float64 {
		m := map[string]float64{}
		for k, v := range good {
			m[k] = v
		}
		for k, v := range changes {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name string
		next map[string]float64
		want string
	}{
		{"consistent, entries down", with(map[string]float64{"regcache_lookups_total": 11, "regcache_fresh_hits_total": 5, "regcache_entries": 3}), ""},
		{"lookups loaded before an outcome", with(map[string]float64{"regcache_fresh_hits_total": 5}), "outcomes add up to 11"},
		{"a counter went down", with(map[string]float64{"regcache_lookups_total": 9, "regcache_fresh_hits_total": 3}), "regcache_fresh_hits_total went down"},
		{"oldest stale age went down", with(map[string]float64{"regcache_oldest_stale_served_seconds": 4}), "regcache_oldest_stale_served_seconds went down"},
		{"more errors than refreshes", with(map[string]float64{"regcache_refresh_errors_total": 3}), "exceeds"},
		{"a series missing", func() map[string]float64 { m := with(nil); delete(m, "regcache_invalid_lookups_total"); return m }(), "regcache_invalid_lookups_total missing"},
	} {
		c := &scrapeChecker{keys: promKeys}
		if bad := c.check(good); len(bad) > 0 {
			t.Fatalf("%s: the first scrape is consistent, but: %v", tc.name, bad)
		}
		bad := fmt.Sprint(c.check(tc.next))
		switch {
		case tc.want == "" && bad != "[]":
			t.Errorf("%s: reported %s", tc.name, bad)
		case tc.want != "" && !strings.Contains(bad, tc.want):
			t.Errorf("%s: reported %s, want %q", tc.name, bad, tc.want)
		}
	}
}
