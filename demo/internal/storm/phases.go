package storm

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// PhaseEnds are the ends of the outage that RunPhases compares, as
// fractions of the retry interval after the outage's 10 units: 0 ends it
// exactly two intervals after the cold caches started, as they may retry,
// which favours a cache that retries on a fixed interval; the others end
// it a quarter, a half and three quarters of an interval later.
var PhaseEnds = []float64{0, 0.25, 0.5, 0.75}

// Phases is what RunPhases measured: a report of the cold start, the
// outage and the recovery for each end of the outage.
type Phases struct {
	Config  Config
	Ends    []float64
	Reports []*Report
}

// RunPhases runs the cold start, the outage and the recovery once for
// each end of the outage in ends (Config.OutageEnd), one run after
// another, each against a new backend from newBackend, which it closes.
// cfg's Clients default to DefaultClients without the registry itself,
// which the comparison does not need.
func RunPhases(cfg Config, ends []float64, newBackend func() (Backend, error), progress io.Writer, tty bool) (*Phases, error) {
	if cfg.Clients == nil {
		for _, c := range DefaultClients() {
			if c.Name != NoCache {
				cfg.Clients = append(cfg.Clients, c)
			}
		}
	}
	cfg.Only = []int{ColdStart, Outage, Recovery}
	ph := &Phases{Config: cfg, Ends: ends}
	for i, end := range ends {
		cfg.OutageEnd = end
		fmt.Fprintf(progress, "== outage end %d of %d: %s\n", i+1, len(ends), outageEnd(cfg))
		b, err := newBackend()
		if err != nil {
			return nil, err
		}
		rep, err := Run(cfg, b, progress, tty)
		b.Close()
		if err != nil {
			return nil, err
		}
		ph.Reports = append(ph.Reports, rep)
	}
	return ph, nil
}

// outageEnd says how long cfg's outage lasts, and where it ends in the
// retry interval.
func outageEnd(cfg Config) string {
	d := cfg.length(Outage)
	if cfg.OutageEnd == 0 {
		return fmt.Sprintf("%v, two retry intervals: the end aligned with the cold caches' interval", fmtDur(d))
	}
	return fmt.Sprintf("%v, %.2f of a retry interval after the aligned end", fmtDur(d), cfg.OutageEnd)
}

// WritePhases writes ph as a table: a row per end of the outage and
// scenario, a column per client, regcache first.
func WritePhases(w io.Writer, ph *Phases) {
	cfg := ph.Config
	var names []string
	for _, c := range cfg.Clients {
		if c.Name != RegCache {
			names = append(names, c.Name)
		}
	}
	slices.Reverse(names) // the newer go-micro next to regcache
	names = append([]string{RegCache}, names...)

	fmt.Fprintf(w, "Recovery at %d ends of the outage: %d services, %d callers per client, the registry %v a call, %d calls at a time per client; the caches' TTL %v and retry interval %v. The cold caches start with the outage, which lasts 10 units (%v) plus the fraction of the retry interval given.\n\n",
		len(ph.Ends), cfg.Services, cfg.Concurrency, cfg.Latency, cfg.Capacity, cfg.TTL(), cfg.RetryInterval(), 10*cfg.Unit())
	fmt.Fprintf(w, "Each cell: failed lookups / registry calls / time. Cold start: the calls of its %v, and the time until every service had been served. Recovery: the calls in the %v after the registry's return, and the time until current (from the return to the last lookup that failed or returned an old node; \"> t\": one did at the end).\n\n",
		cfg.length(ColdStart), cfg.RetryInterval())
	fmt.Fprintf(w, "| outage | scenario | %s |\n", strings.Join(names, " | "))
	fmt.Fprintf(w, "| --- | --- |%s\n", strings.Repeat(" --: |", len(names)))
	for i, rep := range ph.Reports {
		c := cfg
		c.OutageEnd = ph.Ends[i]
		outage := fmt.Sprintf("%v (+%.2f)", fmtDur(c.length(Outage)), ph.Ends[i])
		for _, cell := range []struct {
			what string
			p    int
			cold bool
		}{{"cold start", ColdStart, false}, {"recovery, warm", Recovery, false}, {"recovery, cold", Recovery, true}} {
			var cells []string
			for _, name := range names {
				cells = append(cells, phaseCell(rep, cell.p, Key{Client: name, Cold: cell.cold}))
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", outage, cell.what, strings.Join(cells, " | "))
			outage = ""
		}
	}
}

// phaseCell is key's failed lookups, registry calls and time in scenario
// p of rep, as WritePhases explains them.
func phaseCell(rep *Report, p int, key Key) string {
	x, ok := rep.Row(p, key)
	if !ok {
		return "-"
	}
	if p == ColdStart {
		served := "never all"
		if x.AllServed > 0 {
			served = fmtDur(x.AllServed)
		}
		return fmt.Sprintf("%s / %s / %s", count(x.Failed), count(x.RegistryCalls), served)
	}
	calls := PhaseCalls(rep, p, key, rep.Config.RetryInterval())
	current := fmtDur(x.CurrentAfter)
	if x.Stuck {
		current = "> " + current
	}
	return fmt.Sprintf("%s / %s / %s", count(x.Failed), count(calls), current)
}

// PhaseCalls is key's registry calls in scenario p of rep within d of the
// scenario's start, from its counts per slot.
func PhaseCalls(rep *Report, p int, key Key, d time.Duration) int64 {
	x, ok := rep.Row(p, key)
	if !ok {
		return 0
	}
	var calls int64
	for _, c := range x.CallsPerSlot[:min(int(d/rep.Slot), len(x.CallsPerSlot))] {
		calls += c
	}
	return calls
}
