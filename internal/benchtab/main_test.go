package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		line, name, impl string
		values           []measure
	}{
		{
			"BenchmarkGetService/nodes=10/impl=regcache-2   \t 338046\t 699.4 ns/op\t 752 B/op\t 6 allocs/op",
			"GetService/nodes=10", "regcache",
			[]measure{{699.4, "ns/op"}, {752, "B/op"}, {6, "allocs/op"}},
		},
		{
			"BenchmarkColdStorm/impl=gomicro-2 3 53934492 ns/op 0 errors/op 51780 p50-us",
			"ColdStorm", "gomicro",
			[]measure{{53934492, "ns/op"}, {0, "errors/op"}, {51780, "p50-us"}},
		},
		{"BenchmarkX/impl=a 10 1.5 ns/op", "X", "a", []measure{{1.5, "ns/op"}}},
	}
	for _, tt := range tests {
		name, impl, values, ok := parse(tt.line)
		if !ok || name != tt.name || impl != tt.impl || len(values) != len(tt.values) {
			t.Fatalf("parse(%q) = %q, %q, %v, %v", tt.line, name, impl, values, ok)
		}
		for i := range values {
			if values[i] != tt.values[i] {
				t.Errorf("parse(%q): value %d = %v, want %v", tt.line, i, values[i], tt.values[i])
			}
		}
	}
	for _, line := range []string{
		"BenchmarkNoImpl-2 10 5 ns/op",
		"goos: linux",
		"--- FAIL: BenchmarkX/impl=a",
		"BenchmarkX/impl=a-2 notanumber 5 ns/op",
		"PASS",
	} {
		if _, _, _, ok := parse(line); ok {
			t.Errorf("parse(%q) accepted it", line)
		}
	}
}

func TestWritePairsAndTakesMedians(t *testing.T) {
	in := `cpu: Test CPU
BenchmarkGet/n=1/impl=new-2 10 100 ns/op 0 allocs/op
BenchmarkGet/n=1/impl=old-2 10 300 ns/op 4 allocs/op
BenchmarkGet/n=1/impl=new-2 10 900 ns/op 0 allocs/op
BenchmarkGet/n=1/impl=old-2 10 500 ns/op 4 allocs/op
BenchmarkGet/n=1/impl=new-2 10 110 ns/op 0 allocs/op
BenchmarkGet/n=1/impl=old-2 10 400 ns/op 4 allocs/op
`
	tab := newTable()
	if err := tab.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := tab.write(&out, "old", "new", nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"cpu: Test CPU",
		"| Get/n=1 | ns/op | 110 | 400 | 3.64× |",
		"| Get/n=1 | allocs/op | 0 | 4 | ∞ |",
		"Medians of up to 3 runs",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// A benchmark that only one implementation runs still gets its rows, with
// no ratio.
func TestWriteKeepsUnpairedRows(t *testing.T) {
	in := `BenchmarkRevalidate/services=3000/impl=new-2 1 5000 ns/op 12.5 cpu-ms/op
BenchmarkGet/impl=new-2 10 100 ns/op
BenchmarkGet/impl=old-2 10 300 ns/op
`
	tab := newTable()
	if err := tab.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := tab.write(&out, "old", "new", nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Revalidate/services=3000 | ns/op | 5000 | – | – |",
		"| Revalidate/services=3000 | cpu-ms/op | 12.5 | – | – |",
		"| Get | ns/op | 100 | 300 | 3× |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// The rows of a second package are named after it, so that the same
// benchmark in two packages gives two rows, each paired within its package.
func TestWriteNamesRowsOfOtherPackages(t *testing.T) {
	in := `pkg: example.com/lib
BenchmarkGet/impl=new-2 10 100 ns/op
BenchmarkGet/impl=old-2 10 300 ns/op
pkg: example.com/lib/flavour
BenchmarkGet/impl=new-2 10 200 ns/op
BenchmarkGet/impl=old-2 10 800 ns/op
pkg: example.com/other
BenchmarkGet/impl=new-2 10 50 ns/op
pkg: example.com/lib
BenchmarkGet/impl=new-2 10 120 ns/op
`
	tab := newTable()
	if err := tab.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := tab.write(&out, "old", "new", nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Get | ns/op | 110 | 300 | 2.73× |",
		"| flavour/Get | ns/op | 200 | 800 | 4× |",
		"| example.com/other/Get | ns/op | 50 | – | – |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// A third implementation, such as a floor that does no caching, gets a
// table of its own after the pair's, with its medians.
func TestWriteKeepsOtherImplementations(t *testing.T) {
	in := `BenchmarkEv/phase=a/impl=new-2 10 100 ns/op 20 cpu-ns/event
BenchmarkEv/phase=a/impl=old-2 10 300 ns/op 60 cpu-ns/event
BenchmarkEv/phase=a/impl=floor-2 10 50 ns/op 8 cpu-ns/event
BenchmarkEv/phase=a/impl=floor-2 10 70 ns/op 12 cpu-ns/event
BenchmarkEv/phase=a/impl=floor-2 10 90 ns/op 90 cpu-ns/event
`
	tab := newTable()
	if err := tab.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := tab.write(&out, "old", "new", []string{"cpu-ns/event"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Ev/phase=a | cpu-ns/event | 20 | 60 | 3× |",
		"| benchmark | metric | floor |",
		"| Ev/phase=a | cpu-ns/event | 12 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "| Ev/phase=a | ns/op | 70 |") {
		t.Errorf("a metric left out by -metrics is shown:\n%s", out.String())
	}
}
