package storm

import (
	"encoding/json"
	"io"
	"runtime"
	"strconv"
	"time"
)

// Figures is what a run and a -phases run measured, for the documents:
// `make figures` writes it to docs/figures.json, and the repository's
// internal/figures renders the README's and the docs' tables from it. It
// holds the tables' numbers as measured, unformatted; the documents
// format them.
type Figures struct {
	About     string          `json:"about"`
	Run       FiguresRun      `json:"run"`
	Config    FiguresConfig   `json:"config"`
	Scenarios []FigureSection `json:"scenarios"`
	// Phases are the -phases runs: one per end of the outage, each with
	// the cold start, the outage and the recovery.
	Phases []FiguresPhase `json:"phases"`
}

// FiguresRun says where and when the figures were measured.
type FiguresRun struct {
	Command string `json:"command"`
	Date    string `json:"date"` // UTC, YYYY-MM-DD
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	CPUs    int    `json:"cpus"`
	// Took and PhasesTook are the wall time of the run and of the -phases
	// runs.
	Took       Duration `json:"took"`
	PhasesTook Duration `json:"phases_took"`
}

// FiguresConfig is the run's configuration, and what follows from it.
type FiguresConfig struct {
	Duration      Duration `json:"duration"`
	Unit          Duration `json:"unit"`
	Services      int      `json:"services"`
	Concurrency   int      `json:"concurrency"`
	Latency       Duration `json:"latency"`
	Slow          Duration `json:"slow"`
	Capacity      int      `json:"capacity"`
	RPCRate       int      `json:"rpc_rate"`
	TTL           Duration `json:"ttl"`
	RetryInterval Duration `json:"retry_interval"`
	RestartGap    Duration `json:"restart_gap"`
	RPCInstances  int      `json:"rpc_instances"`
	// GoMicro is the version of the go-micro that the demo is built on,
	// whose selector, client and servers the client path runs.
	GoMicro string `json:"go_micro"`
}

// FigureSection is one scenario's table.
type FigureSection struct {
	ID     string      `json:"id"`
	Title  string      `json:"title"`
	Length Duration    `json:"length"`
	Rows   []FigureRow `json:"rows,omitempty"`
	RPC    []FigureRPC `json:"rpc,omitempty"`
}

// FigureRow is a Row without its counts per slot.
type FigureRow struct {
	Client        string   `json:"client"`
	Cold          bool     `json:"cold"`
	RegistryCalls int64    `json:"registry_calls"`
	Lookups       int64    `json:"lookups"`
	Failed        int64    `json:"failed"`
	Old           int64    `json:"old"`
	P50           Duration `json:"p50"`
	P99           Duration `json:"p99"`
	Max           Duration `json:"max"`
	AllServed     Duration `json:"all_served"`
	CurrentAfter  Duration `json:"current_after"`
	Stuck         bool     `json:"stuck"`
}

// FigureRPC is an RPCRow without its counts per slot.
type FigureRPC struct {
	Client       string   `json:"client"`
	RPCs         int64    `json:"rpcs"`
	Failed       int64    `json:"failed"`
	Attempts     int64    `json:"attempts"`
	DeadAttempts int64    `json:"dead_attempts"`
	Settled      int64    `json:"settled"`
	SettledDead  int64    `json:"settled_dead"`
	P50          Duration `json:"p50"`
	P99          Duration `json:"p99"`
	Max          Duration `json:"max"`
}

// FiguresPhase is one -phases run.
type FiguresPhase struct {
	// OutageEnd is the end of the outage, as a fraction of the retry
	// interval after its 10 units (Config.OutageEnd).
	OutageEnd float64         `json:"outage_end"`
	Scenarios []FigureSection `json:"scenarios"`
}

// Duration is a time.Duration that encodes to JSON as its String, for a
// reader of the file.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// scenarioIDs name the scenarios in Figures, where the documents look them
// up.
var scenarioIDs = []string{
	ColdStart:     "cold_start",
	RollingDeploy: "rolling_deployment",
	Restart:       "restart",
	Outage:        "outage",
	Recovery:      "recovery",
	ClientPath:    "client_path",
}

// NewFigures gathers the figures of rep, a run at the defaults, and ph,
// the -phases runs, which took took and phasesTook; command is how they
// were made.
func NewFigures(command string, rep *Report, took time.Duration, ph *Phases, phasesTook time.Duration) *Figures {
	cfg := rep.Config
	f := &Figures{
		About: "The demo's figures, from one run: written by `make figures` (demo/main.go, -figures), " +
			"rendered into the README and docs by `go run ./internal/figures -write`. Do not edit by hand.",
		Run: FiguresRun{
			Command: command,
			Date:    time.Now().UTC().Format(time.DateOnly),
			Go:      runtime.Version(),
			OS:      runtime.GOOS,
			Arch:    runtime.GOARCH,
			CPUs:    runtime.NumCPU(),
			Took:    Duration(took), PhasesTook: Duration(phasesTook),
		},
		Config: FiguresConfig{
			Duration: Duration(cfg.Duration), Unit: Duration(cfg.Unit()),
			Services: cfg.Services, Concurrency: cfg.Concurrency,
			Latency: Duration(cfg.Latency), Slow: Duration(cfg.Slow),
			Capacity: cfg.Capacity, RPCRate: cfg.RPCRate,
			TTL: Duration(cfg.TTL()), RetryInterval: Duration(cfg.RetryInterval()),
			RestartGap: Duration(cfg.RestartGap()), RPCInstances: rpcInstances,
			GoMicro: goMicroVersion,
		},
		Scenarios: sections(rep),
	}
	if ph != nil {
		for i, r := range ph.Reports {
			f.Phases = append(f.Phases, FiguresPhase{OutageEnd: ph.Ends[i], Scenarios: sections(r)})
		}
	}
	return f
}

// sections are the tables of the scenarios that ran in rep.
func sections(rep *Report) []FigureSection {
	var out []FigureSection
	for p := range rep.Scenarios {
		sc := &rep.Scenarios[p]
		if !rep.Config.runs(p) {
			continue
		}
		s := FigureSection{ID: scenarioIDs[p], Title: sc.Title, Length: Duration(sc.Length())}
		for _, r := range sc.Rows {
			s.Rows = append(s.Rows, FigureRow{
				Client: r.Key.Client, Cold: r.Key.Cold,
				RegistryCalls: r.RegistryCalls, Lookups: r.Lookups, Failed: r.Failed, Old: r.Old,
				P50: Duration(r.P50), P99: Duration(r.P99), Max: Duration(r.Max),
				AllServed: Duration(r.AllServed), CurrentAfter: Duration(r.CurrentAfter), Stuck: r.Stuck,
			})
		}
		for _, x := range sc.RPC {
			s.RPC = append(s.RPC, FigureRPC{
				Client: x.Client, RPCs: x.RPCs, Failed: x.Failed,
				Attempts: x.Attempts, DeadAttempts: x.DeadAttempts,
				Settled: x.Settled, SettledDead: x.SettledDead,
				P50: Duration(x.P50), P99: Duration(x.P99), Max: Duration(x.Max),
			})
		}
		out = append(out, s)
	}
	return out
}

// WriteFigures writes f as indented JSON.
func WriteFigures(w io.Writer, f *Figures) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(f)
}
