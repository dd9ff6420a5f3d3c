// Package statstest is the scenario that the tests of regcache's metrics
// modules (prometheus, otel) share: a cache driven through known lookups,
// registry answers and watch events, so that every counter has a known
// value, and a checker of the invariants that every scrape must keep. It
// is a public package, not an internal one, because those modules are
// modules of their own and may import only the cache's public API; an
// exporter of your own can be tested against it too. Its API follows the
// tests' needs and may change in any minor version.
package statstest

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
)

// Scenario drives a cache through a known sequence of lookups, registry
// answers and watch events, so that every counter of Stats has a known
// value; the Prometheus and OpenTelemetry tests check their exports of it.
//
// The cache runs over go-micro's memory registry, wrapped so that the test
// drives the watch stream (the memory registry's own watcher drops an event
// that its reader does not take within 10 ms) and one service fails. TTL and
// retry interval are an hour: nothing expires, and no refresh starts, unless
// the test makes it.
type Scenario struct {
	// C is the cache, and Start when the scenario began.
	C     cache.Cache
	Start time.Time
	// Scrapes counts the collections made while the readers ran, and
	// rounds the readers' rounds.
	Scrapes int
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

// The scenario's totals. Before the readers: 2 cold misses, a not-found
// miss, and, after the reconnect has re-validated it, the not-found
// answered again from its window (counted as throttled). The readers: one
// fresh hit, stale serve, throttled and invalid lookup each per round, and
// their cold misses. After: a failed miss, a stale serve and a fresh hit.
func (s *Scenario) Fresh() float64     { return float64(s.rounds.Load() + 1) }
func (s *Scenario) Stale() float64     { return float64(s.rounds.Load() + 1) }
func (s *Scenario) Throttled() float64 { return float64(s.rounds.Load() + 1) }
func (s *Scenario) Invalid() float64   { return float64(s.rounds.Load()) }
func (s *Scenario) Misses() float64    { return 3 + scenarioReaders*scenarioCold + 1 }
func (s *Scenario) Lookups() float64 {
	return s.Fresh() + s.Stale() + s.Throttled() + s.Invalid() + s.Misses()
}
func (s *Scenario) Entries() float64 { return 4 + scenarioReaders*scenarioCold }

// Refreshes is the registry calls: one per miss, and the re-validation of
// it.greeter, it.payments and it.missing after the reconnect.
func (s *Scenario) Refreshes() float64 { return s.Misses() + 3 }

// Run builds the cache, hands it to register, and runs the scenario. While
// the readers look services up, with every outcome at once, collect is
// called over and over, scenarioScrapes times at least; it should check
// the exported values with a Checker. The cache is stopped when the test
// ends.
//
// Totals: the methods above; refresh errors 1;
// watch events applied 1, ignored 1, invalidating 1; reconnects 1; entries
// 24: it.greeter with 3 nodes, fresh; it.payments with 1 node, stale;
// it.missing, it.flaky and the readers' cold names without data, kept while
// their retry windows are open.
func Run(t *testing.T, register func(cache.Cache), collect func()) *Scenario {
	t.Helper()
	mem := registry.NewMemoryRegistry()
	mustRegister(t, mem, service("it.greeter", "g1", "g2"), 0)
	mustRegister(t, mem, service("it.payments", "p1"), 0)
	reg := &scriptedRegistry{Registry: mem, failing: "it.flaky", streams: make(chan *scriptedStream, 8)}
	sc := &Scenario{Start: time.Now()}
	sc.C = newCache(t, reg, cache.WithTTL(time.Hour), cache.WithMinimumRetryInterval(time.Hour))
	c := sc.C
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
	// The stream breaks and the watcher opens another: a reconnect, after
	// which the cache re-validates the services it holds, with data or
	// without, one registry call each, as the one exception to their retry
	// windows.
	stream.fail(t, errors.New("scripted stream broken"))
	stream = reg.nextStream(t)
	waitFor(t, 10*time.Second, "a reconnect, and it.greeter, it.payments and it.missing re-validated", func() bool {
		if st := c.Stats(); st.WatchReconnects != 1 || st.Refreshes != 6 || st.RegistryDown {
			return false
		}
		for _, s := range c.Services("it.", "", 0) {
			if s.Refreshing {
				return false
			}
		}
		return true
	})
	// The re-validation answered not found again: the next lookup gets
	// that answer from its window, without a call.
	if _, err := c.GetService("it.missing"); err != registry.ErrNotFound || c.Stats().Misses != 3 {
		t.Fatalf("lookup of it.missing after the reconnect: %v, %d misses; want registry.ErrNotFound itself, 3 misses", err, c.Stats().Misses)
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
				// Within the not-found answer's window: that answer
				// again, registry.ErrNotFound itself, counted as
				// throttled.
				if _, err := c.GetService("it.missing"); err != registry.ErrNotFound {
					t.Errorf("GetService it.missing: %v, want registry.ErrNotFound itself", err)
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
		sc.Scrapes++
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
	// cached. The second send returns once the watcher has applied the
	// first.
	stream.send(t, &registry.Result{Action: "update", Service: service("it.greeter", "g3")})
	stream.send(t, &registry.Result{Action: "update", Service: service("it.not-cached", "x1")})
	waitFor(t, 10*time.Second, "the second event ignored", func() bool { return c.Stats().EventsIgnored == 1 })

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

// quiet drops the cache's log lines.
var quiet = logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))

// newCache is a cache of r, stopped when the test ends.
func newCache(t *testing.T, r registry.Registry, opts ...cache.Option) cache.Cache {
	t.Helper()
	c := cache.New(r, append([]cache.Option{cache.WithLogger(quiet)}, opts...)...)
	t.Cleanup(c.Stop)
	return c
}

// service builds a one-version service with nodes of the given ids. Each
// node's address is a dummy loopback address: nothing dials it.
func service(name string, ids ...string) *registry.Service {
	s := &registry.Service{Name: name, Version: "1.0.0"}
	for _, id := range ids {
		s.Nodes = append(s.Nodes, &registry.Node{
			Id:       id,
			Address:  "127.0.0.1:1",
			Metadata: map[string]string{"id": id},
		})
	}
	return s
}

func mustRegister(t *testing.T, r registry.Registry, s *registry.Service, ttl time.Duration) {
	t.Helper()
	if err := r.Register(s, registry.RegisterTTL(ttl)); err != nil {
		t.Fatalf("register %s %v: %v", s.Name, nodeIDs([]*registry.Service{s}), err)
	}
}

// nodeIDs returns the sorted node ids of all versions.
func nodeIDs(svcs []*registry.Service) []string {
	var ids []string
	for _, s := range svcs {
		for _, n := range s.Nodes {
			ids = append(ids, n.Id)
		}
	}
	sort.Strings(ids)
	return ids
}

func joinIDs(svcs []*registry.Service) string { return strings.Join(nodeIDs(svcs), ",") }

// waitFor polls cond every 10 ms until it holds, and fails the test if it
// does not within limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
