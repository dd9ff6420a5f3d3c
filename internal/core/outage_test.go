package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/fakereg"
)

// coldOutage drives n services (a, b, c...) that callers look up every
// 10 ms, with no data, through an outage that ends at back (from the first
// lookup): every call is answered 20 ms after it starts, with a failure
// before back and the service after. The first calls end apart by
// stagger, so the services' retry windows end apart by stagger too. It
// returns when each call started, and when each service was first served.
func coldOutage(t *testing.T, n int, stagger, back time.Duration) (starts map[string][]time.Duration, served map[string]time.Duration) {
	t.Helper()
	h := newHarness(t, testConfig())
	h.open()
	t0 := h.now
	var names []string
	for i := range n {
		names = append(names, string(rune('a'+i)))
	}
	starts, served = map[string][]time.Duration{}, map[string]time.Duration{}
	due := map[*Call]time.Time{}
	for i, n := range names {
		r := h.lookup(n)
		require.NotNil(t, r.Call)
		due[r.Call] = h.now.Add(20*time.Millisecond + time.Duration(i)*stagger)
	}
	for step := 0; time.Duration(step)*time.Millisecond < back+2*time.Second && len(served) < len(names); step++ {
		h.sleep(time.Millisecond)
		for _, c := range h.out {
			if _, ok := due[c]; !ok && !c.List {
				due[c] = h.now.Add(20 * time.Millisecond)
				starts[c.Name] = append(starts[c.Name], h.now.Sub(t0))
			}
		}
		for c, at := range due {
			if h.now.Before(at) {
				continue
			}
			delete(due, c)
			if h.now.Sub(t0) < back {
				h.answer(c, nil, errDown)
			} else {
				h.answer(c, []*registry.Service{fakereg.Service(c.Name, "1", c.Name+"1")}, nil)
			}
		}
		if step%10 != 0 {
			continue
		}
		for _, n := range names {
			if _, ok := served[n]; ok || h.call(n) != nil {
				continue
			}
			if r := h.lookup(n); r.Call == nil && r.Err == nil {
				served[n] = h.now.Sub(t0)
			} else if r.Call != nil {
				if _, ok := due[r.Call]; !ok {
					due[r.Call] = h.now.Add(20 * time.Millisecond)
					starts[n] = append(starts[n], h.now.Sub(t0))
				}
			}
		}
	}
	require.Len(t, served, len(names), "every service served: %v", starts)
	return starts, served
}

// While the registry is held down, a service that callers ask for and no
// data hold is tried when its own retry window ends, as a throttle of its
// own would try it, and not only at the probe interval: a registry back
// at the end of that window is seen then, not up to a probe interval
// later.
func TestAColdServiceIsTriedAtTheEndOfItsWindow(t *testing.T) {
	for _, c := range []struct {
		n                     int
		stagger, back, within time.Duration
	}{
		// a's first call ends at 20 ms, its probe (the first, due as
		// the windows end) at 5.041 s: its window ends at 10.041 s.
		// The probes of the interval, a second apart and 20 ms long, go
		// to the others, and are not due before 10.12 s.
		{8, 5 * time.Millisecond, 10*time.Second + 35*time.Millisecond, 60 * time.Millisecond},
		// The windows end from 5.02 s to 5.038 s, while a's probe is out
		// (5.021 s to 5.041 s), which stands in for every other try.
		// The probes of the interval go to b, c, d and e; f's to j's
		// tries are next at 10.021 s, a window after a's probe.
		{10, 2 * time.Millisecond, 10*time.Second + 30*time.Millisecond, 50 * time.Millisecond},
	} {
		_, served := coldOutage(t, c.n, c.stagger, c.back)
		for n, at := range served {
			assert.LessOrEqual(t, at, c.back+c.within, "%s served %v after the return at %v", n, at-c.back, c.back)
		}
	}
}

// A probe out as a service's window ends, or started since, stands in for
// the service's own try: services whose windows end together are tried by
// one call, and the probes keep their interval.
func TestAProbeStandsInForTheTriesOfColdServices(t *testing.T) {
	back := 30 * time.Second
	starts, _ := coldOutage(t, 8, 5*time.Millisecond, back)
	var during, first []time.Duration
	for _, s := range starts {
		for _, at := range s {
			if at < back {
				during = append(during, at)
			}
			if at < 6*time.Second {
				first = append(first, at)
			}
		}
	}
	// The windows end from 5.02 s to 5.055 s: a's probe, out from 5.021 s
	// to 5.041 s, stands in for b's, c's, d's and e's tries; f's window
	// ends after it, and f's try stands in for g's and h's.
	assert.Len(t, first, 2, "calls as the first windows end: %v", fmt.Sprint(starts))
	// From the first window's end at 5.02 s to the return at 30 s: a probe
	// a second, and a try at most at the end of each window that no probe
	// stood in for, about one in five seconds: 25 + 5, with 2 to spare.
	assert.LessOrEqual(t, len(during), 32, "calls during the outage: %v", fmt.Sprint(starts))
	assert.GreaterOrEqual(t, len(during), 20, "the probes went: %v", fmt.Sprint(starts))
}
