package fakereg

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The record of the calls, and the cache's promise about them, checked as
// the calls happen: for each service, at most one GetService call at a
// time, and at least the bound's interval between the end of one call and
// the start of the next, but for one early call an interval, which a
// resync may make. The cache records an attempt when the registry has
// answered, reading its clock after the call returns, and starts the next
// attempt only once the interval has passed since then, so the gap seen
// here is never shorter, in fake time or in real time.

// callStats is the record of one service's GetService calls.
type callStats struct {
	calls    int
	inflight int
	lastEnd  time.Time
	// lastEarly is when the last call that came within the interval of
	// the one before started: a resync (a stream established, the
	// registry back) lets one such call through, and only one an
	// interval.
	lastEarly time.Time
	// minGap is the shortest time seen between the end of one call and
	// the start of the next; zero until there are two calls.
	minGap time.Duration
}

// SetBound sets the interval of the call bound; 0, the default, checks
// only that the calls for one service never overlap.
func (r *Registry) SetBound(interval time.Duration) {
	r.mu.Lock()
	r.interval = interval
	r.mu.Unlock()
}

// startLocked records the start of a GetService call for name at start,
// and checks it against the bound.
func (r *Registry) startLocked(name string, start time.Time) *callStats {
	st := r.calls[name]
	if st == nil {
		st = &callStats{}
		r.calls[name] = st
	}
	if st.inflight > 0 {
		r.violatedLocked("service %q: a second registry call while one is in flight", name)
	}
	if !st.lastEnd.IsZero() {
		gap := start.Sub(st.lastEnd)
		if st.calls == 1 || gap < st.minGap {
			st.minGap = gap
		}
		if gap < r.interval {
			if !st.lastEarly.IsZero() && start.Sub(st.lastEarly) < r.interval {
				r.violatedLocked("service %q: registry call %d started %v after the previous one ended, within the interval %v, and %v after the last early call",
					name, st.calls+1, gap, r.interval, start.Sub(st.lastEarly))
			}
			st.lastEarly = start
		}
	}
	st.calls++
	st.inflight++
	r.total++
	r.inflight[name]++
	r.starts = append(r.starts, start)
	return st
}

// end records the end of a GetService call for name.
func (r *Registry) end(name string, st *callStats) {
	r.mu.Lock()
	st.inflight--
	st.lastEnd = time.Now()
	r.inflight[name]--
	r.mu.Unlock()
}

func (r *Registry) violatedLocked(format string, args ...any) {
	r.violations++
	if len(r.firstFaults) < 10 {
		r.firstFaults = append(r.firstFaults, fmt.Sprintf(format, args...))
	}
}

// Calls counts the GetService calls for name.
func (r *Registry) Calls(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.calls[name]; st != nil {
		return st.calls
	}
	return 0
}

// TotalCalls counts the GetService calls.
func (r *Registry) TotalCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// InFlight counts the GetService calls for name that have not returned.
func (r *Registry) InFlight(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight[name]
}

// CallTimes returns when each GetService call started, in order.
func (r *Registry) CallTimes() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.starts)
}

// ListCalls counts the ListServices calls.
func (r *Registry) ListCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists
}

// StartsSince returns the start times of the GetService calls, and of the
// Watch calls, made at or after t.
func (r *Registry) StartsSince(t time.Time) (gets, watches []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	after := func(ts []time.Time) []time.Time {
		i, _ := slices.BinarySearchFunc(ts, t, func(a, b time.Time) int { return a.Compare(b) })
		return slices.Clone(ts[i:])
	}
	watchTimes := make([]time.Time, len(r.watchCalls))
	for i, w := range r.watchCalls {
		watchTimes[i] = w.At
	}
	return after(r.starts), after(watchTimes)
}

// Report is a snapshot of what the registry saw.
type Report struct {
	TotalCalls int    // GetService calls
	MaxCalls   int    // the most GetService calls for one service
	MaxService string // that service, the first by name of those with MaxCalls
	// MinGap is the shortest time between the end of one GetService call
	// for a service and the start of the next; -1 if no service had two.
	MinGap   time.Duration
	Watches  int // Watch calls
	Received int // events the streams took from their queues
	Streams  int // streams handed out
	Open     int // streams not yet stopped (a cut or broken stream is open until stopped)
	// MaxOpen is the most streams of every service read at once: the
	// cache reads one at a time. (A stream that a Watch call given up on
	// opens late is stopped unread.)
	MaxOpen    int
	Violations int      // of the call bound, and of MaxOpen
	First      []string // the first few violations, for a failure message
}

// Report returns what the registry saw so far.
func (r *Registry) Report() Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{
		TotalCalls: r.total, MinGap: -1, Watches: len(r.watchCalls), Received: r.received, Streams: len(r.streams),
		MaxOpen: r.maxOpen, Open: r.open, Violations: r.violations, First: slices.Clone(r.firstFaults),
	}
	for name, st := range r.calls {
		if st.calls > rep.MaxCalls || (st.calls == rep.MaxCalls && name < rep.MaxService) {
			rep.MaxCalls, rep.MaxService = st.calls, name
		}
		if st.calls > 1 && (rep.MinGap < 0 || st.minGap < rep.MinGap) {
			rep.MinGap = st.minGap
		}
	}
	return rep
}

// CheckBound fails t unless every service saw at most
// 2·(1 + elapsed/interval) GetService calls, never two at once and never
// two within the interval but for one early call an interval, and the
// cache never read two streams of every service at once.
func (r *Registry) CheckBound(t testing.TB, elapsed time.Duration) {
	t.Helper()
	rep := r.Report()
	r.mu.Lock()
	interval := r.interval
	r.mu.Unlock()
	if rep.Violations > 0 {
		t.Errorf("%d registry-call violations; the first: %q", rep.Violations, rep.First)
	}
	if interval > 0 {
		bound := 2 * (1 + int(elapsed/interval))
		if rep.MaxCalls > bound {
			t.Errorf("service %q: %d registry calls in %v, over the bound 2·(1 + elapsed/interval) = %d",
				rep.MaxService, rep.MaxCalls, elapsed, bound)
		}
	}
	if rep.MaxOpen > 1 {
		t.Errorf("%d watch streams were open at once", rep.MaxOpen)
	}
}
