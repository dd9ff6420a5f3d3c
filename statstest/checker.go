package statstest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Keys names, in one exporter's flattened series, the values that Checker
// relates: the lookups of each result, the refreshes and their errors, and
// the series of the stream's states. IsCounter tells the counters, which
// must never go down.
type Keys struct {
	Fresh, Stale, Event, Throttled, Misses, Invalid string
	Refreshes, RefreshErrors                        string
	StreamStates                                    []string
	IsCounter                                       func(key string) bool
}

// Checker checks the invariants that hold between the values of one
// scrape and from one scrape to the next: every result of a lookup has its
// series, refresh errors never exceed refreshes, the stream is in exactly
// one state, and no counter ever goes down.
type Checker struct {
	Keys Keys
	prev map[string]float64
}

// Check returns what is wrong with got, the next scrape.
func (c *Checker) Check(got map[string]float64) []string {
	var bad []string
	k := c.Keys
	need := append([]string{k.Fresh, k.Stale, k.Event, k.Throttled, k.Misses, k.Invalid, k.Refreshes, k.RefreshErrors}, k.StreamStates...)
	for _, key := range need {
		if _, ok := got[key]; !ok {
			bad = append(bad, key+" missing")
		}
	}
	if len(bad) > 0 {
		return bad
	}
	if got[k.RefreshErrors] > got[k.Refreshes] {
		bad = append(bad, fmt.Sprintf("%s = %v exceeds %s = %v", k.RefreshErrors, got[k.RefreshErrors], k.Refreshes, got[k.Refreshes]))
	}
	var states []string
	for _, key := range k.StreamStates {
		switch got[key] {
		case 1:
			states = append(states, key)
		case 0:
		default:
			bad = append(bad, fmt.Sprintf("%s = %v, want 0 or 1", key, got[key]))
		}
	}
	if len(states) != 1 {
		bad = append(bad, fmt.Sprintf("the stream is in %d states (%s), want one", len(states), strings.Join(states, ", ")))
	}
	var keys []string
	for key := range got {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if !k.IsCounter(key) {
			continue
		}
		if p, ok := c.prev[key]; ok && got[key] < p {
			bad = append(bad, fmt.Sprintf("%s went down from %v to %v", key, p, got[key]))
		}
	}
	c.prev = got
	return bad
}

// CompareSeries fails the test for every series that is missing, extra or
// different.
func CompareSeries(t *testing.T, got, want map[string]float64) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			t.Errorf("%s: missing, want %v", k, w)
		case !wok:
			t.Errorf("%s = %v: not expected", k, g)
		case g != w:
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}
}

// TargetLabels are the labels that Prometheus, and the Prometheus
// Operator's service and pod monitors, give every series of a target:
// a label of an exporter's own named so is renamed exported_<name>, so no
// series of regcache's may have one.
var TargetLabels = []string{"job", "instance", "service", "namespace", "pod", "container", "endpoint"}

// A Metric is a row of the table of docs/metrics.md.
type Metric struct {
	// Prometheus and OpenTelemetry are the names, without labels or
	// attributes.
	Prometheus, OpenTelemetry string
	// Labels and Attributes are the names of the labels and of the
	// attributes, in braces after the names in the table.
	Labels, Attributes []string
	// Counter tells a counter from a gauge.
	Counter bool
	// From says where the values come from, and names each value of a
	// label other than the service's in double quotes.
	From string
	// Help is the help text, and the OpenTelemetry description.
	Help string
}

// DocumentedMetrics returns the rows of the table of metrics in
// docs/metrics.md, found from the working directory up.
func DocumentedMetrics(t *testing.T) []Metric {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var doc []byte
	for {
		doc, err = os.ReadFile(filepath.Join(dir, "docs", "metrics.md"))
		if err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("docs/metrics.md: not found from the working directory up")
		}
		dir = parent
	}
	// name splits `name{a,b}` (and what follows) into the name and a, b.
	name := func(cell string) (string, []string) {
		cell = strings.TrimSpace(cell)
		if i := strings.IndexByte(cell[1:], '`'); strings.HasPrefix(cell, "`") && i >= 0 {
			cell = cell[1 : i+1]
		}
		name, labels, ok := strings.Cut(cell, "{")
		if !ok {
			return name, nil
		}
		var out []string
		for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			out = append(out, strings.TrimSpace(l))
		}
		return name, out
	}
	var out []Metric
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `regcache_") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 5 {
			t.Fatalf("docs/metrics.md: %d cells, want 5: %s", len(cells), line)
		}
		m := Metric{
			Counter: strings.TrimSpace(cells[2]) == "counter",
			From:    strings.TrimSpace(cells[3]),
			Help:    strings.TrimSpace(cells[4]),
		}
		m.Prometheus, m.Labels = name(cells[0])
		m.OpenTelemetry, m.Attributes = name(cells[1])
		out = append(out, m)
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md: no table of metrics")
	}
	return out
}
