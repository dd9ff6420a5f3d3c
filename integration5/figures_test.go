package integration5

// The figures that the repository's README and docs show of these tests
// (the etcd module against the plugin, the NATS restart) come from one
// run of them that writes what it measured into a file:
// REGCACHE_WRITE_FIGURES names it (`make figures-integration` gives
// docs/figures-integration.json). Each test replaces its own run in the
// file, by id, and keeps the others', so that the tests can run
// separately; the repository's internal/figures renders the documents'
// tables from the file.
//
// integration5/figures_test.go is this file for go-micro v5, with the
// imports changed and nothing else (TestConformanceIsTheTwin checks it).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go-micro.dev/v5/registry"
)

// figuresEnv names the file that the tests write their figures into; unset,
// they write none.
const figuresEnv = "REGCACHE_WRITE_FIGURES"

// figuresAbout heads the file.
const figuresAbout = "The figures of the integration tests that the README and docs show, each run as measured: " +
	"written by `make figures-integration` (REGCACHE_WRITE_FIGURES), rendered into the documents by " +
	"`go run ./internal/figures -write`. Do not edit by hand."

// figuresFile is the file's content: every run, by id.
type figuresFile struct {
	About string      `json:"about"`
	Runs  []figureRun `json:"runs"`
}

// figureRun is one test's run: where and when it ran, its settings, and
// each client's time to serve in each trial.
type figureRun struct {
	ID      string `json:"id"`
	Command string `json:"command"`
	Date    string `json:"date"` // UTC, YYYY-MM-DD
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	CPUs    int    `json:"cpus"`
	Race    bool   `json:"race"`
	// GoMicro is the version of go-micro the test ran on; Server, the
	// registry server's binary (the name make servers gives it).
	GoMicro string         `json:"go_micro"`
	Server  string         `json:"server"`
	Took    figureDuration `json:"took"` // the test's wall time
	// The settings: how long the registry was down, how long after its
	// return the new node registered, how long each client was waited
	// for, and the time to serve that the trials are counted within.
	Outage figureDuration `json:"outage,omitempty"`
	Delay  figureDuration `json:"delay,omitempty"`
	Limit  figureDuration `json:"limit"`
	Bound  figureDuration `json:"bound"`
	// Nodes is how many nodes a client serves once it has them all, where
	// the test counts them.
	Nodes   int            `json:"nodes,omitempty"`
	Clients []figureClient `json:"clients"`
	// Registers are the new node's Register calls, a trial each.
	Registers []figureDuration `json:"registers,omitempty"`
	// The mass loss (massloss_test.go): how long the registry had lost
	// every node, the RPCs a second through each client, the services
	// they were spread over (Nodes: their nodes), and how long after the
	// loss's end the registry held every live server's node again.
	Loss     figureDuration `json:"loss,omitempty"`
	Rate     int            `json:"rate,omitempty"`
	Services int            `json:"services,omitempty"`
	Back     figureDuration `json:"back,omitempty"`
}

// figureClient is one client's times to serve, a trial each; null: not
// within the limit.
type figureClient struct {
	Name string            `json:"name"`
	Took []*figureDuration `json:"took"`
	// Served is how many nodes it served at the end of each trial, where
	// the test counts them.
	Served []int `json:"served,omitempty"`
	// MassLoss is what the client saw through the mass loss, which has
	// no trials.
	MassLoss *figureLoss `json:"mass_loss,omitempty"`
}

// figureLoss is one client's RPCs through the mass loss: in the whole
// run, and in each of its scenarios. A time is null where nothing
// happened.
type figureLoss struct {
	RPCs   int `json:"rpcs"`
	Failed int `json:"failed"`
	// The loss: the RPCs started in it, those that failed, and when the
	// first failure returned, from the loss's start. Reached is the
	// requests that the servers, whose nodes were all lost, served from
	// the client during it; Recovered, from the loss's end to the return
	// of the last failed RPC started after it.
	LossRPCs     int             `json:"loss_rpcs"`
	LossFailed   int             `json:"loss_failed"`
	FirstFailure *figureDuration `json:"first_failure"`
	Reached      int64           `json:"reached"`
	Recovered    figureDuration  `json:"recovered"`
	// The server killed during the loss: the failed attempts at it from
	// its kill on, and the RPCs of its service that failed from the kill
	// to the loss's end.
	KilledAttempts int `json:"killed_attempts"`
	KilledFailed   int `json:"killed_failed"`
	// The scale to zero: the attempts at its nodes after each one's
	// first failed attempt, its RPCs that failed otherwise than with not
	// found, and the time from its servers' stop to the first not found.
	ZeroAttempts int             `json:"zero_attempts"`
	ZeroFailed   int             `json:"zero_failed"`
	NotFound     *figureDuration `json:"not_found"`
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

// figureTimes are times to serve for the file: -1 (not within the limit)
// is null.
func figureTimes(ds []time.Duration) []*figureDuration {
	out := make([]*figureDuration, len(ds))
	for i, d := range ds {
		if d >= 0 {
			v := figureDuration(d)
			out[i] = &v
		}
	}
	return out
}

func figureDurations(ds []time.Duration) []figureDuration {
	out := make([]figureDuration, len(ds))
	for i, d := range ds {
		out[i] = figureDuration(d)
	}
	return out
}

// writeFigures writes run, which the test began at start, into the file
// that REGCACHE_WRITE_FIGURES names, if it does, and fails the test if it
// cannot. It fills in where and when the run was made. A test on go-micro
// v5 writes its run with the id ending in -v5.
func writeFigures(t *testing.T, run figureRun, start time.Time) {
	t.Helper()
	file := os.Getenv(figuresEnv)
	if file == "" {
		return
	}
	if t.Failed() {
		t.Logf("%s: the test failed, so its figures are not written", figuresEnv)
		return
	}
	fillRun(&run, t.Name(), start)
	if err := mergeFigures(file, run); err != nil {
		t.Fatalf("%s: %v", figuresEnv, err)
	}
	t.Logf("%s: run %s written to %s", figuresEnv, run.ID, file)
}

// serverName is the name of the registry server's binary that env
// names: etcd-3.5, nats-server.
func serverName(env string) string { return filepath.Base(os.Getenv(env)) }

// fillRun fills in the run's command, where and when it ran, and its id's
// flavour.
func fillRun(run *figureRun, test string, start time.Time) {
	major := strings.Split(reflect.TypeOf(registry.Service{}).PkgPath(), "/")[1] // go-micro.dev/v4/registry
	if major != "v4" {
		run.ID += "-" + major
	}
	var env []string
	for _, v := range []string{"REGCACHE_IT_OUTAGE", "REGCACHE_IT_TRIALS", "REGCACHE_IT_LOSS"} {
		if s := os.Getenv(v); s != "" {
			env = append(env, v+"="+s)
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" {
				run.Race = s.Value == "true"
			}
		}
	}
	// A test binary records no module versions: go.mod, in the test's
	// folder, gives them.
	module := "integration"
	if mod, err := os.ReadFile("go.mod"); err == nil {
		if m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(mod); m != nil {
			module = path.Base(string(m[1]))
		}
		if m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?go-micro\.dev/` + major + `\s+(v\S+)`).FindSubmatch(mod); m != nil {
			run.GoMicro = string(m[1])
		}
	}
	race := ""
	if run.Race {
		race = "-race "
	}
	run.Command = fmt.Sprintf("cd %s && %sgo test %s-count=1 -run '^%s$' -v .", module, strings.Join(append(env, ""), " "), race, test)
	run.Date = time.Now().UTC().Format(time.DateOnly)
	run.Go, run.OS, run.Arch, run.CPUs = runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU()
	run.Took = figureDuration(time.Since(start).Round(time.Millisecond))
}

// mergeFigures puts run into file in place of the run of its id, keeping
// the others, sorted by id.
func mergeFigures(file string, run figureRun) error {
	var f figuresFile
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	f.About = figuresAbout
	f.Runs = slices.DeleteFunc(f.Runs, func(r figureRun) bool { return r.ID == run.ID })
	f.Runs = append(f.Runs, run)
	slices.SortFunc(f.Runs, func(a, b figureRun) int { return strings.Compare(a.ID, b.ID) })
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // the command's &&
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".figures-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// A run replaces the run of its id and keeps the others, and reads back
// as written; a file that is not the figures' is an error.
func TestWriteFiguresMerges(t *testing.T) {
	file := filepath.Join(t.TempDir(), "figures.json")
	ms := func(n int) *figureDuration { d := figureDuration(time.Duration(n) * time.Millisecond); return &d }
	a := figureRun{ID: "b-run", Limit: figureDuration(time.Second), Clients: []figureClient{{Name: "x", Took: []*figureDuration{ms(3), nil}}}}
	b := figureRun{ID: "a-run", Outage: figureDuration(2 * time.Second), Registers: []figureDuration{*ms(1)}}
	a2 := a
	a2.Clients = []figureClient{{Name: "x", Took: []*figureDuration{ms(4)}, Served: []int{21}}}
	a2.Command = "cd integration && go test"
	for _, r := range []figureRun{a, b, a2} {
		if err := mergeFigures(file, r); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got figuresFile
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if want := (figuresFile{About: figuresAbout, Runs: []figureRun{b, a2}}); !reflect.DeepEqual(got, want) {
		t.Errorf("file:\n%s\nwant the runs a-run, then b-run as written last", raw)
	}
	for _, s := range []string{`"took": [` + "\n" + `            "4ms"`, `"outage": "2s"`, `"served": [`, `"command": "cd integration && go test"`} {
		if !strings.Contains(string(raw), s) {
			t.Errorf("the file lacks %q:\n%s", s, raw)
		}
	}
	if strings.Contains(string(raw), `"nodes"`) || strings.Contains(string(raw), `"delay"`) {
		t.Errorf("unset settings are written:\n%s", raw)
	}
	if err := os.WriteFile(file, []byte("[1]"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mergeFigures(file, a); err == nil {
		t.Error("a file of something else was overwritten")
	}

	var run figureRun
	t.Setenv("REGCACHE_IT_OUTAGE", "10s")
	fillRun(&run, "TestX", time.Now().Add(-time.Second))
	if !strings.HasPrefix(run.Command, "cd integration") || !strings.Contains(run.Command, "&& REGCACHE_IT_OUTAGE=10s go test ") ||
		!strings.HasSuffix(run.Command, "-count=1 -run '^TestX$' -v .") || run.GoMicro == "" || run.CPUs == 0 || run.Took < figureDuration(time.Second) {
		t.Errorf("run %+v", run)
	}
	if times := figureTimes([]time.Duration{-1, 5}); times[0] != nil || *times[1] != 5 {
		t.Errorf("figureTimes: %v", times)
	}
}
