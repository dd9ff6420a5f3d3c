package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"
)

// The runs of the tests and of the demo against etcd, each file written
// by what measured it: the integration tests with REGCACHE_WRITE_FIGURES
// (integration/figures_test.go, `make figures-integration`), the demo's
// restart scenario against etcd with -figures (demo/etcd/figures.go,
// `make figures-demo-etcd`).
const (
	integrationFile = "docs/figures-integration.json"
	demoEtcdFile    = "docs/figures-demo-etcd.json"
)

// runsFile is such a file: runs, each of trials in which clients are
// timed until they serve a change.
type runsFile struct {
	About string     `json:"about"`
	Runs  []trialRun `json:"runs"`
}

// trialRun is one run: where and when it was made, its settings, and
// each client's time to serve in each trial.
type trialRun struct {
	ID        string   `json:"id"`
	Command   string   `json:"command"`
	Date      string   `json:"date"`
	Go        string   `json:"go"`
	OS        string   `json:"os"`
	Arch      string   `json:"arch"`
	CPUs      int      `json:"cpus"`
	Race      bool     `json:"race"`
	GoMicro   string   `json:"go_micro"`
	Server    string   `json:"server"`
	Took      duration `json:"took"`
	StormTook duration `json:"storm_took"` // the demo against etcd: its storm, before the restart scenario
	// The settings: the registry down for Outage; the change Delay after
	// its return; each client waited for up to Limit; Bound, the time to
	// serve that the trials are counted within.
	Outage duration `json:"outage"`
	Delay  duration `json:"delay"`
	Limit  duration `json:"limit"`
	Bound  duration `json:"bound"`
	// Nodes is how many nodes a client serves once it has them all, where
	// the run counts them.
	Nodes     int           `json:"nodes"`
	Clients   []trialClient `json:"clients"`
	Registers []duration    `json:"registers"` // the new node's Register, a trial each
	// The mass loss, a run without trials: the registry without any node
	// for Loss while the servers serve, Rate RPCs a second through each
	// client over Services services, and the servers' nodes all back
	// Back after the loss's end.
	Loss     duration `json:"loss"`
	Rate     int      `json:"rate"`
	Services int      `json:"services"`
	Back     duration `json:"back"`

	file string // the file it came from
}

// trialClient is one client's times to serve, a trial each: nil, not
// within the limit. Served, where the run counts them, is the nodes it
// served at the end of each trial.
type trialClient struct {
	Name   string      `json:"name"`
	Took   []*duration `json:"took"`
	Served []int       `json:"served"`
	// MassLoss is the client's RPCs through the mass loss, in a run
	// without trials.
	MassLoss *massLoss `json:"mass_loss"`
}

// massLoss is one client's RPCs through the mass loss
// (integration/massloss_test.go): in the whole run; started in the loss,
// failed, the first failure from its start (nil: none), the requests the
// lost servers served, the last failure from its end; the failed attempts
// at the server killed in it and its service's failed RPCs; after the
// scale to zero, the attempts at a stopped node after its first failure,
// the RPCs failed otherwise than not found, and the first not found (nil:
// none).
type massLoss struct {
	RPCs           int       `json:"rpcs"`
	Failed         int       `json:"failed"`
	LossRPCs       int       `json:"loss_rpcs"`
	LossFailed     int       `json:"loss_failed"`
	FirstFailure   *duration `json:"first_failure"`
	Reached        int64     `json:"reached"`
	Recovered      duration  `json:"recovered"`
	KilledAttempts int       `json:"killed_attempts"`
	KilledFailed   int       `json:"killed_failed"`
	ZeroAttempts   int       `json:"zero_attempts"`
	ZeroFailed     int       `json:"zero_failed"`
	NotFound       *duration `json:"not_found"`
}

// runs are the runs of every such file, by id.
type runs map[string]*trialRun

// loadRuns reads the files at paths (relative to root) into one set of
// runs. A run must name its clients, each with a time for every trial,
// or, in a run without trials, with its mass loss.
func loadRuns(root string, paths ...string) (runs, error) {
	rs := runs{}
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return nil, err
		}
		var f runsFile
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields() // a field a writer added that this reader would ignore
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for i := range f.Runs {
			r := &f.Runs[i]
			r.file = p
			if old, ok := rs[r.ID]; ok {
				return nil, fmt.Errorf("%s: run %q is in %s too", p, r.ID, old.file)
			}
			if len(r.Clients) == 0 {
				return nil, fmt.Errorf("%s: run %q has no clients", p, r.ID)
			}
			for _, c := range r.Clients {
				if r.Loss > 0 {
					if c.MassLoss == nil || len(c.Took) > 0 {
						return nil, fmt.Errorf("%s: run %q of a mass loss: client %q has %d trials and no mass loss figures", p, r.ID, c.Name, len(c.Took))
					}
					continue
				}
				if c.MassLoss != nil || len(c.Took) == 0 || len(c.Took) != len(r.Clients[0].Took) || (c.Served != nil && len(c.Served) != len(c.Took)) {
					return nil, fmt.Errorf("%s: run %q: client %q has %d trials, %d nodes served; %q has %d trials",
						p, r.ID, c.Name, len(c.Took), len(c.Served), r.Clients[0].Name, len(r.Clients[0].Took))
				}
			}
			rs[r.ID] = r
		}
	}
	return rs, nil
}

// run returns the run of id.
func (rs runs) run(id string) (*trialRun, error) {
	if r, ok := rs[id]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("no run %q in %s or %s", id, integrationFile, demoEtcdFile)
}

// longest returns, of the runs whose ids start with prefix, the one with
// the longest outage.
func (rs runs) longest(prefix string) (*trialRun, error) {
	all := rs.withPrefix(prefix)
	if len(all) == 0 {
		return nil, fmt.Errorf("no run %s* in %s", prefix, integrationFile)
	}
	return all[len(all)-1], nil
}

// withPrefix are the runs whose ids start with prefix, the shortest
// outage first.
func (rs runs) withPrefix(prefix string) []*trialRun {
	var out []*trialRun
	for id, r := range rs {
		if len(id) > len(prefix) && id[:len(prefix)] == prefix {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *trialRun) int { return int(a.Outage - b.Outage) })
	return out
}

// client returns the client of the run named name.
func (r *trialRun) client(name string) (trialClient, error) {
	for _, c := range r.Clients {
		if c.Name == name {
			return c, nil
		}
	}
	return trialClient{}, fmt.Errorf("run %q (%s) has no client %q", r.ID, r.file, name)
}

func (r *trialRun) trials() int { return len(r.Clients[0].Took) }

// within is how many trials the client served within the run's bound.
func (r *trialRun) within(c trialClient) int {
	n := 0
	for _, d := range c.Took {
		if d != nil && *d <= r.Bound {
			n++
		}
	}
	return n
}

// sorted are the client's times, those not within the limit (nil) last.
func sorted(c trialClient) []*duration {
	ds := slices.Clone(c.Took)
	slices.SortStableFunc(ds, func(a, b *duration) int {
		switch {
		case a == nil && b == nil:
			return 0
		case a == nil:
			return 1
		case b == nil:
			return -1
		}
		return int(*a - *b)
	})
	return ds
}

// testOf is the test that a run's command runs, if it names one:
// TestNodeRegisteredAfterANATSRestart.
func testOf(r *trialRun) string {
	if m := testInCommand.FindStringSubmatch(r.Command); m != nil {
		return m[1]
	}
	return ""
}

var testInCommand = regexp.MustCompile(`-run '\^?(Test\w+)\$?'`)

// machine says where a run was made: go1.26.8, linux/amd64, 2 CPUs.
func (r *trialRun) machine() string {
	return fmt.Sprintf("%s, %s/%s, %d CPUs", r.Go, r.OS, r.Arch, r.CPUs)
}

// dur is a duration of the file as a time.Duration.
func dur(d duration) time.Duration { return time.Duration(d) }
