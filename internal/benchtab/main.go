// Command benchtab turns `go test -bench` output into a table that sets two
// implementations side by side.
//
// Sub-benchmarks that differ only in one path element, impl=<name>, are
// paired: BenchmarkGetService/nodes=10/impl=regcache with
// BenchmarkGetService/nodes=10/impl=gomicro. For every metric of every pair
// it prints the median over all runs (run the benchmarks with -count) of
// each side, and the ratio base ÷ new. Every metric the benchmarks report is
// lower-is-better, so a ratio above 1 means the new implementation wins by
// that factor. A benchmark that only one implementation runs (it still
// names itself impl=<name>) gets its rows with no ratio. An implementation
// that is neither of the pair (a floor under both, say) gets a table of
// its own after theirs.
//
// When the input holds the benchmarks of several packages (go test's
// "pkg:" lines), the rows of every package but the first are named after
// it, by its path below the first one's: gomicro5/GetService/nodes=10 is
// the benchmark of package github.com/regcache/cache/gomicro5 when the
// first package is github.com/regcache/cache.
//
// Usage:
//
//	go test -run '^$' -bench . -count 5 | go run ./internal/benchtab -tee
//	go run ./internal/benchtab [-base gomicro] [-new regcache] [-metrics ns/op,allocs/op] bench.txt
//
// With -tee the input is copied to stdout as it arrives, before the table.
// benchtab exits with status 1 if the input reports a failure, so that a
// pipeline from go test still fails when a benchmark does.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

func main() {
	base := flag.String("base", "gomicro", "the impl= value to compare against")
	cand := flag.String("new", "regcache", "the impl= value being measured")
	metrics := flag.String("metrics", "", "comma-separated units to show, in that order (default: all, as they appear)")
	tee := flag.Bool("tee", false, "copy the input to stdout before the table")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: benchtab [flags] [file ...]\n\nReads `go test -bench` output from the files, or from stdin.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	t := newTable()
	if *tee {
		t.echo = os.Stdout
	}
	if flag.NArg() == 0 {
		if err := t.read(os.Stdin); err != nil {
			fatal(err)
		}
	}
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fatal(err)
		}
		err = t.read(f)
		f.Close()
		if err != nil {
			fatal(err)
		}
	}
	var units []string
	if *metrics != "" {
		units = strings.Split(*metrics, ",")
	}
	if *tee {
		fmt.Println()
	}
	if err := t.write(os.Stdout, *base, *cand, units); err != nil {
		fatal(err)
	}
	if t.failed {
		fatal(fmt.Errorf("the benchmark run reported a failure"))
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchtab:", err)
	os.Exit(1)
}

// table holds every sample, by benchmark (with its impl= element removed),
// implementation and unit, and remembers the order of first appearance.
type table struct {
	names   []string
	impls   []string                        // every impl seen, in order
	units   map[string][]string             // name → units, in order
	samples map[string]map[string][]float64 // name + "\x00" + unit → impl → values
	header  []string                        // goos:, goarch:, cpu: lines
	pkg     string                          // the package of the lines being read
	first   string                          // the first package seen
	echo    io.Writer                       // if set, gets every input line
	failed  bool                            // the input reported a failure
}

func newTable() *table {
	return &table{units: map[string][]string{}, samples: map[string]map[string][]float64{}}
}

func (t *table) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if t.echo != nil {
			fmt.Fprintln(t.echo, line)
		}
		if strings.HasPrefix(line, "FAIL") || strings.HasPrefix(strings.TrimSpace(line), "--- FAIL") {
			t.failed = true
		}
		for _, p := range []string{"goos:", "goarch:", "cpu:"} {
			if strings.HasPrefix(line, p) && !contains(t.header, line) {
				t.header = append(t.header, line)
			}
		}
		if p, found := strings.CutPrefix(line, "pkg: "); found {
			t.pkg = strings.TrimSpace(p)
			if t.first == "" {
				t.first = t.pkg
			}
		}
		name, impl, values, ok := parse(line)
		if !ok {
			continue
		}
		if t.pkg != t.first {
			name = strings.TrimPrefix(t.pkg, t.first+"/") + "/" + name
		}
		if _, seen := t.units[name]; !seen {
			t.names = append(t.names, name)
			t.units[name] = nil
		}
		for _, v := range values {
			if !contains(t.units[name], v.unit) {
				t.units[name] = append(t.units[name], v.unit)
			}
			k := name + "\x00" + v.unit
			if t.samples[k] == nil {
				t.samples[k] = map[string][]float64{}
			}
			t.samples[k][impl] = append(t.samples[k][impl], v.value)
			if !contains(t.impls, impl) {
				t.impls = append(t.impls, impl)
			}
		}
	}
	return sc.Err()
}

type measure struct {
	value float64
	unit  string
}

// parse reads one result line:
//
//	BenchmarkX/a=1/impl=regcache-2   1000   123 ns/op   4 B/op   1.5 p99-ms
//
// It returns the name without the impl element and the -GOMAXPROCS suffix,
// and the impl value.
func parse(line string) (name, impl string, values []measure, ok bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
		return "", "", nil, false
	}
	if _, err := strconv.Atoi(f[1]); err != nil {
		return "", "", nil, false
	}
	full := f[0]
	if i := strings.LastIndexByte(full, '-'); i > 0 {
		if _, err := strconv.Atoi(full[i+1:]); err == nil {
			full = full[:i]
		}
	}
	var rest []string
	for _, el := range strings.Split(full, "/") {
		if v, found := strings.CutPrefix(el, "impl="); found {
			impl = v
			continue
		}
		rest = append(rest, el)
	}
	if impl == "" {
		return "", "", nil, false
	}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return "", "", nil, false
		}
		values = append(values, measure{v, f[i+1]})
	}
	return strings.TrimPrefix(strings.Join(rest, "/"), "Benchmark"), impl, values, true
}

func (t *table) write(w io.Writer, base, cand string, only []string) error {
	if len(t.names) == 0 {
		return fmt.Errorf("no benchmark result with an impl= element in the input")
	}
	for _, h := range t.header {
		fmt.Fprintf(w, "%s  \n", h)
	}
	if len(t.header) > 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "| benchmark | metric | %s | %s | %s ÷ %s |\n", cand, base, base, cand)
	fmt.Fprintln(w, "|---|---|--:|--:|--:|")
	runs := 0
	for _, name := range t.names {
		units := t.units[name]
		if only != nil {
			units = intersect(only, units)
		}
		for _, unit := range units {
			s := t.samples[name+"\x00"+unit]
			c, b := s[cand], s[base]
			if len(c) == 0 && len(b) == 0 {
				continue
			}
			runs = max(runs, len(c), len(b))
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n",
				name, unit, format(c), format(b), ratio(c, b))
		}
	}
	fmt.Fprintf(w, "\nMedians of up to %d runs. Every metric is lower-is-better: a ratio above 1 means %s wins by that factor.\n", runs, cand)
	for _, impl := range t.impls {
		if impl != base && impl != cand {
			t.writeOther(w, impl, only)
		}
	}
	return nil
}

// writeOther writes the medians of impl, neither of the pair, in a table
// of their own.
func (t *table) writeOther(w io.Writer, impl string, only []string) {
	fmt.Fprintf(w, "\n| benchmark | metric | %s |\n", impl)
	fmt.Fprintln(w, "|---|---|--:|")
	for _, name := range t.names {
		units := t.units[name]
		if only != nil {
			units = intersect(only, units)
		}
		for _, unit := range units {
			if v := t.samples[name+"\x00"+unit][impl]; len(v) > 0 {
				fmt.Fprintf(w, "| %s | %s | %s |\n", name, unit, format(v))
			}
		}
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func format(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	return number(median(v))
}

// number prints whole numbers as they are, and others with about three
// significant digits.
func number(x float64) string {
	ax := math.Abs(x)
	switch {
	case x == math.Trunc(x) && ax < 1e15:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case ax >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case ax >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	case ax >= 1:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

func ratio(cand, base []float64) string {
	if len(cand) == 0 || len(base) == 0 {
		return "–"
	}
	c, b := median(cand), median(base)
	switch {
	case c == b:
		return "="
	case c == 0:
		return "∞"
	}
	return number(b/c) + "×"
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func intersect(order, have []string) []string {
	var out []string
	for _, u := range order {
		if contains(have, u) {
			out = append(out, u)
		}
	}
	return out
}
