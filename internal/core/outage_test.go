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
// before back and the service after. The first lookups go apart by
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
	for _, n := range names {
		r := h.lookup(n)
		require.NotNil(t, r.Call)
		due[r.Call] = h.now.Add(20 * time.Millisecond)
		h.sleep(stagger)
		for c, at := range due {
			if !h.now.Before(at) {
				delete(due, c)
				h.answer(c, nil, errDown)
			}
		}
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
			// (A lookup that waits for the probe out, Await, asks again
			// at the next round.)
			if r := h.lookup(n); r.Call == nil && r.Err == nil && r.Await == nil {
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
		back, within time.Duration
	}{
		// The first calls start from 0 to 14 ms and fail 20 ms later:
		// the registry is held down. a's window ends first, at 5.02 s:
		// a is tried at 5.027 s, which stands in for the others' tries,
		// whose windows end while it is out. Any of them is tried a
		// window after that try started, at 10.027 s, where the probes
		// of the interval, a second apart from 5.047 s and 20 ms long, are
		// not due before 10.12 s.
		{10*time.Second + 5*time.Millisecond, 80 * time.Millisecond},
		// And a window later, at 15.027 s, not a call's length later
		// each window.
		{15*time.Second + 30*time.Millisecond, 60 * time.Millisecond},
	} {
		_, served := coldOutage(t, 8, 2*time.Millisecond, c.back)
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
	starts, _ := coldOutage(t, 8, 2*time.Millisecond, back)
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
	// The windows end from 5.02 s to 5.034 s: a's try, out from 5.027 s
	// to 5.047 s, stands in for every other.
	assert.Len(t, first, 1, "calls as the first windows end: %v", fmt.Sprint(starts))
	// From the first window's end at 5 s to the return at 30 s: a probe
	// a second, and a try a window: 25 + 5, with 2 to spare.
	assert.LessOrEqual(t, len(during), 32, "calls during the outage: %v", fmt.Sprint(starts))
	assert.GreaterOrEqual(t, len(during), 20, "the probes went: %v", fmt.Sprint(starts))
}

// A lookup with nothing to serve, refused while the probe is out, waits
// for that probe, SlowCall at most; asked again after it, it waits for no
// other, and is counted once.
func TestARefusedLookupWaitsForTheProbeOut(t *testing.T) {
	h := newHarness(t, testConfig())
	h.open()
	for _, n := range []string{"a", "b"} {
		h.answer(h.lookup(n).Call, nil, errDown)
	}
	require.True(t, h.k.health.Down)
	h.sleep(5 * time.Second)
	probe := h.lookup("a").Call
	require.NotNil(t, probe)
	require.True(t, probe.Probe)
	throttled := h.k.Stats.Throttled.Load()

	r := h.lookup("b")
	assert.Same(t, probe, r.Await, "b waits for a's probe")
	assert.Equal(t, probe.Started.Add(SlowCall), r.Until)
	assert.Nil(t, r.Err)
	assert.Equal(t, throttled, h.k.Stats.Throttled.Load(), "not counted while it waits")

	h.sleep(20 * time.Millisecond)
	h.answer(probe, nil, errDown)
	r = h.k.Lookup("b", AfterProbe, h.now)
	h.take()
	assert.ErrorIs(t, r.Err, ErrThrottled, "still down")
	assert.Nil(t, r.Await)
	assert.Equal(t, throttled+1, h.k.Stats.Throttled.Load(), "counted once")
	r = h.lookup("b")
	assert.Nil(t, r.Await, "no probe out: nothing to wait for")
	assert.ErrorIs(t, r.Err, ErrThrottled)

	// Another probe out: the lookup asked again waits for none.
	h.sleep(5 * time.Second)
	probe = h.lookup("a").Call
	require.NotNil(t, probe)
	r = h.k.Lookup("b", AfterProbe, h.now)
	h.take()
	assert.Nil(t, r.Await)
	assert.ErrorIs(t, r.Err, ErrThrottled)
	h.answer(probe, []*registry.Service{fakereg.Service("a", "1", "a1")}, nil)
	r = h.lookup("b")
	assert.Nil(t, r.Await)
	assert.NotNil(t, r.Call, "back: b's own call")
}
