package storm

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// The outage ends later by the fraction of the retry interval asked, and
// the scenarios left out take no time.
func TestOutageEndAndOnlyShapeTheTimeline(t *testing.T) {
	cfg := DefaultConfig()
	if got, want := cfg.length(Outage), 10*time.Second; got != want {
		t.Errorf("outage at the default: %v, want %v", got, want)
	}
	cfg.OutageEnd = 0.25
	if got, want := cfg.length(Outage), 10*time.Second+1250*time.Millisecond; got != want {
		t.Errorf("outage ending 0.25 of a retry interval later: %v, want %v", got, want)
	}
	cfg.Only = []int{ColdStart, Outage, Recovery}
	if got, want := cfg.total(), (4+10+8)*time.Second+1250*time.Millisecond; got != want {
		t.Errorf("cold start, outage and recovery alone: %v, want %v", got, want)
	}
	if cfg.length(RollingDeploy) != 0 || cfg.length(ClientPath) != 0 {
		t.Errorf("a scenario left out takes time")
	}
	for _, bad := range []float64{-0.1, 1, 2} {
		cfg.OutageEnd = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "-outage-end") {
			t.Errorf("OutageEnd %v: %v, want an error naming -outage-end", bad, err)
		}
	}
}

// PhaseCalls adds the counts of the slots within the time asked, and no
// more.
func TestPhaseCallsAddsTheSlotsWithin(t *testing.T) {
	rep := &Report{Slot: 250 * time.Millisecond, Scenarios: make([]Scenario, Recovery+1)}
	key := Key{Client: RegCache}
	rep.Scenarios[Recovery].Rows = []Row{{Key: key, CallsPerSlot: []int64{5, 1, 0, 2, 7}}}
	for d, want := range map[time.Duration]int64{0: 0, 250 * time.Millisecond: 5, time.Second: 8, time.Hour: 15} {
		if got := PhaseCalls(rep, Recovery, key, d); got != want {
			t.Errorf("calls within %v: %d, want %d", d, got, want)
		}
	}
	if got := PhaseCalls(rep, Recovery, Key{Client: GoMicro}, time.Hour); got != 0 {
		t.Errorf("calls of a client without a row: %d", got)
	}
}

// RunPhases runs the cold start, the outage and the recovery once per end,
// each outage as long as asked, and the table has a cell for every client
// in every scenario of every end.
func TestRunPhasesShortTimeline(t *testing.T) {
	if testing.Short() {
		t.Skip("two runs of 2.2 s")
	}
	cfg := DefaultConfig()
	cfg.Duration, cfg.Slow, cfg.Concurrency = 4200*time.Millisecond, 50*time.Millisecond, 8
	ph, err := RunPhases(cfg, []float64{0, 0.5}, func() (Backend, error) { return NewMemory(), nil }, io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range ph.Config.Clients {
		if c.Name == NoCache {
			t.Errorf("the registry itself is among the clients compared")
		}
		names = append(names, c.Name)
	}
	if len(ph.Reports) != 2 {
		t.Fatalf("%d reports, want one per end", len(ph.Reports))
	}
	unit := cfg.Unit()
	for i, rep := range ph.Reports {
		sc := rep.Scenarios[Outage]
		if want := 10*unit + time.Duration(ph.Ends[i]*float64(5*unit)); sc.Length() != want {
			t.Errorf("end %v: outage of %v, want %v", ph.Ends[i], sc.Length(), want)
		}
		if rows := rep.Scenarios[RollingDeploy].Rows; len(rows) != 0 {
			t.Errorf("end %v: the rolling deployment, left out, has rows", ph.Ends[i])
		}
		for _, name := range names {
			x, ok := rep.Row(ColdStart, Key{Client: name})
			// With the race detector on, go-micro's caches serve one
			// lookup at a time (oneAtATime): their cold lookups, one
			// registry call each, need more than this short cold start.
			if raceBuild && name != RegCache {
				x.AllServed = max(x.AllServed, 1)
			}
			if !ok || x.AllServed <= 0 || x.AllServed > sc.Length() {
				t.Errorf("end %v: %s served every service of the cold start after %v (row: %v)", ph.Ends[i], name, x.AllServed, ok)
			}
			for _, cold := range []bool{false, true} {
				if _, ok := rep.Row(Recovery, Key{Client: name, Cold: cold}); !ok {
					t.Errorf("end %v: no recovery row for %v", ph.Ends[i], Key{Client: name, Cold: cold})
				}
			}
		}
	}
	var out bytes.Buffer
	WritePhases(&out, ph)
	table := out.String()
	if !strings.Contains(table, "| outage | scenario | "+RegCache+" | ") {
		t.Errorf("the table does not start with regcache's column:\n%s", table)
	}
	for _, want := range []string{"(+0.00) | cold start |", "(+0.50) | cold start |", "| recovery, warm |", "| recovery, cold |"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	for _, line := range strings.Split(table, "\n") {
		if strings.Contains(line, "| recovery") || strings.Contains(line, "| cold start") {
			if n := strings.Count(line, " / "); n != 2*len(names) {
				t.Errorf("row %q has %d cells' parts, want a cell per client", line, n/2)
			}
		}
	}
}
