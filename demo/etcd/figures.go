package main

import (
	"bytes"
	"encoding/json"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/regcache/cache/demo/internal/storm"
)

// The restart scenario's figures, for the documents: with -figures, a run
// at the defaults writes what it measured to a JSON file
// (`make figures-demo-etcd` writes docs/figures-demo-etcd.json), and the
// repository's internal/figures renders demo/README.md's table from it.
// The file has the form of the integration tests' figures
// (integration/figures_test.go): a list of runs, here one.

// figuresFile is the file's content.
type figuresFile struct {
	About string      `json:"about"`
	Runs  []figureRun `json:"runs"`
}

// figureRun is the restart scenario's run: where and when it ran, its
// settings, and each client's time to serve the new instance in each
// trial.
type figureRun struct {
	ID      string `json:"id"`
	Command string `json:"command"`
	Date    string `json:"date"` // UTC, YYYY-MM-DD
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	CPUs    int    `json:"cpus"`
	Race    bool   `json:"race"`
	GoMicro string `json:"go_micro"`
	Server  string `json:"server"`
	// Took is the whole command's wall time, the storm and the restart
	// scenario; StormTook, the storm's.
	Took      figureDuration   `json:"took"`
	StormTook figureDuration   `json:"storm_took"`
	Outage    figureDuration   `json:"outage"`
	Delay     figureDuration   `json:"delay"`
	Limit     figureDuration   `json:"limit"`
	Bound     figureDuration   `json:"bound"`
	Clients   []figureClient   `json:"clients"`
	Registers []figureDuration `json:"registers"` // the new instance's Register, a trial each
}

// figureClient is one client's times to serve, a trial each; null: not
// within the limit.
type figureClient struct {
	Name string            `json:"name"`
	Took []*figureDuration `json:"took"`
}

// figureDuration is a time.Duration written as its String.
type figureDuration time.Duration

func (d figureDuration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

func (d *figureDuration) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = figureDuration(v)
	return err
}

// restartFigures are the figures of r, made by command, which took took
// in all and stormTook for the storm.
func restartFigures(command string, r *restartReport, took, stormTook time.Duration) figuresFile {
	cfg := r.Config
	run := figureRun{
		ID:      "demo-etcd-restart",
		Command: command,
		Date:    time.Now().UTC().Format(time.DateOnly),
		Go:      runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
		GoMicro: strings.TrimSuffix(strings.TrimPrefix(storm.GoMicro, "go-micro "), " cache"),
		Server:  "embedded etcd",
		Took:    figureDuration(took.Round(100 * time.Millisecond)), StormTook: figureDuration(stormTook.Round(100 * time.Millisecond)),
		Outage: figureDuration(cfg.Outage), Delay: figureDuration(cfg.Delay),
		Limit: figureDuration(cfg.Limit), Bound: figureDuration(cfg.Bound),
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" {
				run.Race = s.Value == "true"
			}
		}
		for _, d := range bi.Deps {
			if d.Path == "go.etcd.io/etcd/server/v3" {
				run.Server += " " + d.Version
			}
		}
	}
	for i, name := range r.Clients {
		c := figureClient{Name: name}
		for _, d := range r.Took[i] {
			var p *figureDuration
			if d >= 0 {
				v := figureDuration(d)
				p = &v
			}
			c.Took = append(c.Took, p)
		}
		run.Clients = append(run.Clients, c)
	}
	for _, d := range r.Registers {
		run.Registers = append(run.Registers, figureDuration(d))
	}
	return figuresFile{
		About: "The figures of `make demo-etcd`'s restart scenario, from one run: written by `make figures-demo-etcd` " +
			"(demo/etcd, -figures), rendered into demo/README.md by `go run ./internal/figures -write`. Do not edit by hand.",
		Runs: []figureRun{run},
	}
}

// writeFigures writes f to path, through a temporary file, so that a run
// that fails leaves the old figures whole.
func writeFigures(path string, f figuresFile) error {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // the command's &&
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
