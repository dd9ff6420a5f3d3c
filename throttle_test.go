package cache_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/internal/fakereg"
)

// callLog wraps a registry and records every GetService call: when each
// started, per service, and how many of one service were out at once.
type callLog struct {
	registry.Registry

	mu       sync.Mutex
	starts   map[string][]time.Time
	inflight map[string]int
	overlaps []string
}

func newCallLog(inner registry.Registry) *callLog {
	return &callLog{Registry: inner, starts: map[string][]time.Time{}, inflight: map[string]int{}}
}

func (l *callLog) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	l.mu.Lock()
	now := time.Now()
	if l.inflight[name] > 0 {
		l.overlaps = append(l.overlaps, fmt.Sprintf("%s at %v", name, now))
	}
	l.inflight[name]++
	l.starts[name] = append(l.starts[name], now)
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inflight[name]--
		l.mu.Unlock()
	}()
	return l.Registry.GetService(name, opts...)
}

// crowded returns, for each service, the first three call starts that fall
// within one interval, if any.
func (l *callLog) crowded(interval time.Duration, since time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	names := make([]string, 0, len(l.starts))
	for name := range l.starts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := l.starts[name]
		for i := 0; i+2 < len(s); i++ {
			if s[i+2].Sub(s[i]) < interval {
				out = append(out, fmt.Sprintf("%s: calls at %v, %v and %v",
					name, s[i].Sub(since), s[i+1].Sub(since), s[i+2].Sub(since)))
				break
			}
		}
	}
	return out
}

// The per-service gate, as a randomized property over fake time. Three
// services; the registry in turn answers, fails, fails slowly, hangs for
// 20 s or panics, for every service or for one key only; the watch stream
// breaks now and then; nodes change, some without an event; six readers
// look the services up throughout. For every seed:
//   - at most one registry call per service at a time;
//   - at most two call starts per service within any one retry interval
//     (its own window, and the one re-validation a resync may add);
//   - a reader that once had data for a service always gets data, at once;
//   - a minute after the faults end, every service serves the registry's
//     nodes.
func TestGateHoldsUnderChaos(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 30; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { chaos(t, seed) })
		})
	}
}

var errChaos = errors.New("chaos: registry fails")

func chaos(t *testing.T, seed uint64) {
	const (
		interval = 2 * time.Second
		faulty   = 2 * time.Minute
		settle   = time.Minute
	)
	rng := rand.New(rand.NewPCG(seed, 28))
	f := fakereg.New()
	names := []string{"svc-0", "svc-1", "svc-2"}
	gen := map[string]int{}
	for _, name := range names {
		if err := f.Register(faultService(name, name+"-0")); err != nil {
			t.Fatal(err)
		}
	}
	calls := newCallLog(f)
	c := cache.New(calls, cache.WithTTL(5*time.Second), cache.WithMinimumRetryInterval(interval),
		cache.WithLogger(&lineLogger{}))
	start := time.Now()

	var (
		mu       sync.Mutex
		failures []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf("%v: ", time.Since(start))+fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	for r := 0; r < 6; r++ {
		readers.Add(1)
		rr := rand.New(rand.NewPCG(seed, uint64(r)))
		go func() {
			defer readers.Done()
			had := map[string]bool{}
			for {
				select {
				case <-done:
					return
				case <-time.After(time.Duration(20+rr.IntN(300)) * time.Millisecond):
				}
				name := names[rr.IntN(len(names))]
				before := time.Now()
				svcs, err := c.Lookup(name)
				waited := time.Since(before)
				switch {
				case had[name] && err != nil:
					fail("%s: a reader that had data got %v", name, err)
				case had[name] && waited > 0:
					fail("%s: a reader that had data waited %v", name, waited)
				case err == nil && len(nodeSetOf(svcs)) > 0:
					had[name] = true
				}
			}
		}()
	}

	// The faults, one phase after another, until faulty has passed.
	for time.Since(start) < faulty {
		phase := time.Duration(500+rng.IntN(6000)) * time.Millisecond
		var g fakereg.Fault
		switch rng.IntN(6) {
		case 0, 1:
		case 2:
			g = fakereg.Fault{Err: errChaos}
		case 3:
			g = fakereg.Fault{Latency: time.Duration(1+rng.IntN(4)) * time.Second, Err: errChaos}
		case 4:
			g = fakereg.Fault{Hang: true, IgnoreCtx: true}
		case 5:
			g = fakereg.Fault{Panic: "chaos: registry panics"}
		}
		if rng.IntN(3) == 0 {
			f.SetFaultFor(names[rng.IntN(len(names))], g)
		} else {
			f.SetFault(g)
		}
		if g.Hang {
			go func() {
				time.Sleep(20 * time.Second)
				f.ReleaseHangs()
			}()
		}
		switch rng.IntN(4) {
		case 0:
			f.Cut()
		case 1:
			f.SetWatchFault(fakereg.WatchFault{BreakErr: errChaos, BreakAfter: rng.IntN(3)})
		default:
			f.SetWatchFault(fakereg.WatchFault{})
		}
		// A change: the new node registers, then the old one goes, with
		// its events or (lost) without.
		name := names[rng.IntN(len(names))]
		old := fmt.Sprintf("%s-%d", name, gen[name])
		gen[name]++
		next := fmt.Sprintf("%s-%d", name, gen[name])
		if rng.IntN(3) == 0 {
			f.Set(name, faultService(name, next))
		} else {
			_ = f.Register(faultService(name, next))
			_ = f.Deregister(faultService(name, old))
		}
		time.Sleep(phase)
		f.SetFault(fakereg.Fault{})
		for _, n := range names {
			f.SetFaultFor(n, fakereg.Fault{})
		}
	}
	f.ClearFaults()
	time.Sleep(settle)
	for _, name := range names {
		svcs, err := c.Lookup(name)
		if err != nil || !slices.Equal(nodeSetOf(svcs), nodeSet(f, name)) {
			fail("%s a minute after the faults ended: %v %v, the registry holds %v", name, nodeSetOf(svcs), err, nodeSet(f, name))
		}
	}
	close(done)
	readers.Wait()
	c.Stop()
	f.ReleaseHangs()

	calls.mu.Lock()
	overlaps := slices.Clone(calls.overlaps)
	n := 0
	for _, s := range calls.starts {
		n += len(s)
	}
	calls.mu.Unlock()
	st := c.Stats()
	t.Logf("%d lookups, %d registry calls, %d watch reconnects, %d outages", st.Lookups, n, st.WatchReconnects, st.Outages)
	for _, o := range overlaps {
		t.Errorf("two calls of one service at once: %s", o)
	}
	for _, c := range calls.crowded(interval, start) {
		t.Errorf("three calls within one retry interval: %s", c)
	}
	for _, f := range failures {
		t.Error(f)
	}
}
