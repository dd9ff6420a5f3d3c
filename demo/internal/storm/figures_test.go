package storm

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// NewFigures carries every number of the tables of the run and of the
// -phases runs, leaves out the scenarios that did not run, and the JSON
// reads back as it was written.
func TestFiguresCarryTheTables(t *testing.T) {
	cfg := DefaultConfig()
	rep := &Report{Config: cfg, Scenarios: make([]Scenario, len(script))}
	for p := range rep.Scenarios {
		rep.Scenarios[p] = Scenario{Title: script[p].title, End: cfg.length(p)}
	}
	warm := Row{Key: Key{Client: GoMicro}, RegistryCalls: 427, Lookups: 90_000, Failed: 3, Old: 2,
		P50: 19 * time.Microsecond, P99: 3 * time.Millisecond, Max: 1003 * time.Millisecond,
		AllServed: 40 * time.Millisecond, CurrentAfter: 159 * time.Millisecond, Stuck: true}
	rep.Scenarios[Outage].Rows = []Row{warm, {Key: Key{Client: RegCache, Cold: true}, RegistryCalls: 25}}
	rep.Scenarios[ClientPath].RPC = []RPCRow{{Client: GoMicroSelector, RPCs: 1199, Failed: 35, Attempts: 1300,
		DeadAttempts: 420, Settled: 1200, SettledDead: 400, P99: 700 * time.Millisecond}}

	pcfg := cfg
	pcfg.Only = []int{ColdStart, Outage, Recovery}
	prep := &Report{Config: pcfg, Scenarios: make([]Scenario, len(script))}
	prep.Scenarios[Recovery].Rows = []Row{{Key: Key{Client: RegCache, Cold: true}, Failed: 1110, CurrentAfter: 26 * time.Millisecond}}
	ph := &Phases{Config: pcfg, Ends: []float64{0.25}, Reports: []*Report{prep}}

	f := NewFigures("cd demo && go run . -figures x.json", rep, 43*time.Second, ph, 100*time.Second)
	var b bytes.Buffer
	if err := WriteFigures(&b, f); err != nil {
		t.Fatal(err)
	}
	var back Figures
	dec := json.NewDecoder(&b)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, f) {
		t.Errorf("the JSON reads back as\n%+v\nnot\n%+v", back, *f)
	}

	if len(f.Scenarios) != len(script) {
		t.Fatalf("%d scenarios, want %d", len(f.Scenarios), len(script))
	}
	out := f.Scenarios[Outage]
	if out.ID != "outage" || out.Title != "Registry outage" || time.Duration(out.Length) != 10*time.Second {
		t.Errorf("outage: %q %q %v", out.ID, out.Title, time.Duration(out.Length))
	}
	want := FigureRow{Client: GoMicro, RegistryCalls: 427, Lookups: 90_000, Failed: 3, Old: 2,
		P50: Duration(19 * time.Microsecond), P99: Duration(3 * time.Millisecond), Max: Duration(1003 * time.Millisecond),
		AllServed: Duration(40 * time.Millisecond), CurrentAfter: Duration(159 * time.Millisecond), Stuck: true}
	if len(out.Rows) != 2 || out.Rows[0] != want || !out.Rows[1].Cold || out.Rows[1].RegistryCalls != 25 {
		t.Errorf("outage rows: %+v", out.Rows)
	}
	if rpc := f.Scenarios[ClientPath].RPC; len(rpc) != 1 || rpc[0].RPCs != 1199 || rpc[0].Failed != 35 || rpc[0].SettledDead != 400 {
		t.Errorf("client path: %+v", rpc)
	}
	if f.Config.RPCInstances != rpcInstances || time.Duration(f.Config.RestartGap) != 200*time.Millisecond || f.Config.Services != 20 || f.Config.GoMicro != goMicroVersion {
		t.Errorf("config: %+v", f.Config)
	}
	if time.Duration(f.Run.Took) != 43*time.Second || f.Run.CPUs < 1 || f.Run.Go == "" || len(f.Run.Date) != 10 {
		t.Errorf("run: %+v", f.Run)
	}

	if len(f.Phases) != 1 || f.Phases[0].OutageEnd != 0.25 {
		t.Fatalf("phases: %+v", f.Phases)
	}
	var ids []string
	for _, s := range f.Phases[0].Scenarios {
		ids = append(ids, s.ID)
	}
	if !reflect.DeepEqual(ids, []string{"cold_start", "outage", "recovery"}) {
		t.Errorf("the -phases runs' scenarios: %q", ids)
	}
	if r := f.Phases[0].Scenarios[2].Rows; len(r) != 1 || r[0].Failed != 1110 || time.Duration(r[0].CurrentAfter) != 26*time.Millisecond {
		t.Errorf("the -phases recovery: %+v", r)
	}
}
