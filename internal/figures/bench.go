package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// benchFile holds the benchmarks' figures: the tables of internal/benchtab
// that `make bench` prints, pasted whole, are its source of record, and
// the figures the documents show are read from them.
const benchFile = "BENCHMARKS.md"

// benchHeader starts a table of benchtab's, regcache against go-micro.
const benchHeader = "| benchmark | metric | regcache | gomicro |"

// benchRow is one row of such a table: the medians of both sides, and
// their ratio, go-micro ÷ regcache, as benchtab printed it.
type benchRow struct {
	reg, gm, ratio float64
}

// benches are the rows of BENCHMARKS.md's tables, by "benchmark metric":
// "Lookup/nodes=10 ns/op".
type benches map[string]benchRow

func loadBenches(path string) (benches, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	bs := benches{}
	in := false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, benchHeader):
			in = true
		case !strings.HasPrefix(line, "|"):
			in = false
		case in && !strings.HasPrefix(line, "|---"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			if len(cells) != 5 {
				return nil, fmt.Errorf("%s:%d: %d cells, want 5", path, i+1, len(cells))
			}
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			var r benchRow
			r.reg, _ = strconv.ParseFloat(cells[2], 64) // "–" (no counterpart) reads as 0
			r.gm, _ = strconv.ParseFloat(cells[3], 64)
			r.ratio, _ = strconv.ParseFloat(strings.TrimSuffix(cells[4], "×"), 64)
			bs[cells[0]+" "+cells[1]] = r
		}
	}
	if len(bs) == 0 {
		return nil, fmt.Errorf("%s: no table starting %q", path, benchHeader)
	}
	return bs, nil
}

// get returns the row of a benchmark's metric.
func (bs benches) get(name, metric string) (benchRow, error) {
	r, ok := bs[name+" "+metric]
	if !ok {
		return r, fmt.Errorf("%s has no row %s %s", benchFile, name, metric)
	}
	return r, nil
}
