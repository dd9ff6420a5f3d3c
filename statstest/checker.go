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
// relates. IsCounter tells the counters, which must never go down.
type Keys struct {
	Lookups                                         string
	Fresh, Stale, Event, Throttled, Misses, Invalid string
	Refreshes, RefreshErrors                        string
	OldestStale                                     string
	IsCounter                                       func(key string) bool
}

// Checker checks the invariants that hold between the values of one
// scrape and from one scrape to the next: lookups are the sum of their six
// outcomes, refresh errors never exceed refreshes, and no counter, nor the
// oldest stale age served, ever goes down.
type Checker struct {
	Keys Keys
	prev map[string]float64
}

// Check returns what is wrong with got, the next scrape.
func (c *Checker) Check(got map[string]float64) []string {
	var bad []string
	k := c.Keys
	need := []string{k.Lookups, k.Fresh, k.Stale, k.Event, k.Throttled, k.Misses, k.Invalid, k.Refreshes, k.RefreshErrors, k.OldestStale}
	for _, key := range need {
		if _, ok := got[key]; !ok {
			bad = append(bad, key+" missing")
		}
	}
	if len(bad) > 0 {
		return bad
	}
	if sum := got[k.Fresh] + got[k.Stale] + got[k.Event] + got[k.Throttled] + got[k.Misses] + got[k.Invalid]; got[k.Lookups] != sum {
		bad = append(bad, fmt.Sprintf("%s = %v, but its outcomes add up to %v (fresh %v, stale %v, event %v, throttled %v, misses %v, invalid %v)",
			k.Lookups, got[k.Lookups], sum, got[k.Fresh], got[k.Stale], got[k.Event], got[k.Throttled], got[k.Misses], got[k.Invalid]))
	}
	if got[k.RefreshErrors] > got[k.Refreshes] {
		bad = append(bad, fmt.Sprintf("%s = %v exceeds %s = %v", k.RefreshErrors, got[k.RefreshErrors], k.Refreshes, got[k.Refreshes]))
	}
	var keys []string
	for key := range got {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if !k.IsCounter(key) && key != k.OldestStale {
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

// A Metric is a row of the table of docs/metrics.md.
type Metric struct {
	// Prometheus and OpenTelemetry are the names, without labels or
	// attributes.
	Prometheus, OpenTelemetry string
	// Counter tells a counter from a gauge.
	Counter bool
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
	name := func(cell string) string {
		cell = strings.TrimSpace(cell)
		if i := strings.IndexByte(cell[1:], '`'); strings.HasPrefix(cell, "`") && i >= 0 {
			cell = cell[1 : i+1]
		}
		if i := strings.IndexByte(cell, '{'); i >= 0 {
			cell = cell[:i]
		}
		return cell
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
		out = append(out, Metric{
			Prometheus:    name(cells[0]),
			OpenTelemetry: name(cells[1]),
			Counter:       strings.TrimSpace(cells[2]) == "counter",
			Help:          strings.TrimSpace(cells[4]),
		})
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md: no table of metrics")
	}
	return out
}
