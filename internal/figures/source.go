package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// figuresFile is the demo's figures, relative to the repository's root.
const figuresFile = "docs/figures.json"

// demoFigures is docs/figures.json as the demo writes it
// (demo/internal/storm/figures.go): the tables of one run at the defaults
// and of the -phases runs, numbers unformatted.
type demoFigures struct {
	About string `json:"about"`
	Run   struct {
		Command    string   `json:"command"`
		Date       string   `json:"date"`
		Go         string   `json:"go"`
		OS         string   `json:"os"`
		Arch       string   `json:"arch"`
		CPUs       int      `json:"cpus"`
		Took       duration `json:"took"`
		PhasesTook duration `json:"phases_took"`
	} `json:"run"`
	Config struct {
		Duration      duration `json:"duration"`
		Unit          duration `json:"unit"`
		Services      int      `json:"services"`
		Concurrency   int      `json:"concurrency"`
		Latency       duration `json:"latency"`
		Slow          duration `json:"slow"`
		Capacity      int      `json:"capacity"`
		RPCRate       int      `json:"rpc_rate"`
		TTL           duration `json:"ttl"`
		RetryInterval duration `json:"retry_interval"`
		RestartGap    duration `json:"restart_gap"`
		RPCInstances  int      `json:"rpc_instances"`
		GoMicro       string   `json:"go_micro"`
	} `json:"config"`
	Scenarios []section `json:"scenarios"`
	Phases    []struct {
		OutageEnd float64   `json:"outage_end"`
		Scenarios []section `json:"scenarios"`
	} `json:"phases"`
}

type section struct {
	ID     string   `json:"id"`
	Title  string   `json:"title"`
	Length duration `json:"length"`
	Rows   []row    `json:"rows"`
	RPC    []rpcRow `json:"rpc"`
}

type row struct {
	Client        string   `json:"client"`
	Cold          bool     `json:"cold"`
	RegistryCalls int64    `json:"registry_calls"`
	Lookups       int64    `json:"lookups"`
	Failed        int64    `json:"failed"`
	Old           int64    `json:"old"`
	P50           duration `json:"p50"`
	P99           duration `json:"p99"`
	Max           duration `json:"max"`
	AllServed     duration `json:"all_served"`
	CurrentAfter  duration `json:"current_after"`
	Stuck         bool     `json:"stuck"`
}

type rpcRow struct {
	Client       string   `json:"client"`
	RPCs         int64    `json:"rpcs"`
	Failed       int64    `json:"failed"`
	Attempts     int64    `json:"attempts"`
	DeadAttempts int64    `json:"dead_attempts"`
	Settled      int64    `json:"settled"`
	SettledDead  int64    `json:"settled_dead"`
	P50          duration `json:"p50"`
	P99          duration `json:"p99"`
	Max          duration `json:"max"`
}

// duration is a time.Duration written as its String.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = duration(v)
	return err
}

// The names the demo gives its clients (demo/internal/storm).
const (
	regcache         = "regcache"
	goMicroSelector  = "go-micro selector"
	regcacheSelector = "regcache selector"
)

func loadFigures(path string) (*demoFigures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f demoFigures
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields() // a field the demo added that this reader would ignore
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}

// scenario returns the section of the run with id.
func (f *demoFigures) scenario(id string) (*section, error) {
	return findSection(f.Scenarios, id, "the run")
}

func findSection(ss []section, id, of string) (*section, error) {
	for i := range ss {
		if ss[i].ID == id {
			return &ss[i], nil
		}
	}
	return nil, fmt.Errorf("%s has no scenario %q", of, id)
}

// row returns the row of client, warm or cold.
func (s *section) row(client string, cold bool) (row, error) {
	for _, r := range s.Rows {
		if r.Client == client && r.Cold == cold {
			return r, nil
		}
	}
	what := client
	if cold {
		what += ", cold"
	}
	return row{}, fmt.Errorf("scenario %q has no row for %s", s.ID, what)
}

func (s *section) rpc(client string) (rpcRow, error) {
	for _, r := range s.RPC {
		if r.Client == client {
			return r, nil
		}
	}
	return rpcRow{}, fmt.Errorf("scenario %q has no RPC row for %s", s.ID, client)
}

// goMicroCaches are the go-micro caches of the run ("go-micro v5.30.0
// cache"), the newest version first.
func (f *demoFigures) goMicroCaches() []string {
	var names []string
	for _, s := range f.Scenarios {
		for _, r := range s.Rows {
			if isGoMicroCache(r.Client) && !slices.Contains(names, r.Client) {
				names = append(names, r.Client)
			}
		}
	}
	slices.SortFunc(names, func(a, b string) int { return -compareVersions(goMicroVersion(a), goMicroVersion(b)) })
	return names
}

func isGoMicroCache(name string) bool {
	return strings.HasPrefix(name, "go-micro v") && strings.HasSuffix(name, " cache")
}

// goMicroVersion is the version in a go-micro cache's name: v5.30.0.
func goMicroVersion(name string) string {
	return strings.TrimSuffix(strings.TrimPrefix(name, "go-micro "), " cache")
}

// compareVersions orders vMAJOR.MINOR.PATCH versions by their numbers.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(strings.TrimPrefix(a, "v"), "."), strings.Split(strings.TrimPrefix(b, "v"), ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x - y
		}
	}
	return len(pa) - len(pb)
}
