package main

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// The documents' style: a space between a number and its unit, spaces
// between thousands (12 019), and measured times to three significant
// digits.

// count prints n with a space between thousands: 12 019.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return s
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}

// measured prints a measured time to three significant digits: 5.17 ms,
// 159 ms, 2.96 s; 0 for none.
func measured(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	v, unit := scaled(float64(d))
	prec := 0
	switch {
	case v < 10:
		prec = 2
	case v < 100:
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + unit
}

// setting prints a configured time as short as it goes: 200 ms, 1 s,
// 1.25 s.
func setting(d time.Duration) string {
	if d == 0 {
		return "0 s"
	}
	v, unit := scaled(float64(d))
	return strconv.FormatFloat(v, 'f', -1, 64) + " " + unit
}

// benchTime prints a benchmark's time, given in nanoseconds, to two
// significant digits below 10 of its unit and as a whole number above:
// 18 ns, 909 ns, 1.1 µs, 200 ms.
func benchTime(ns float64) string {
	v, unit := scaled(ns)
	return short(v) + " " + unit
}

// scaled is ns in the largest unit it is at least one of.
func scaled(ns float64) (float64, string) {
	switch {
	case ns < 1e3:
		return ns, "ns"
	case ns < 1e6:
		return ns / 1e3, "µs"
	case ns < 1e9:
		return ns / 1e6, "ms"
	default:
		return ns / 1e9, "s"
	}
}

// short prints x with one decimal below 10, as a whole number above.
func short(x float64) string {
	if math.Round(x*10) < 100 {
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(math.Round(x), 'f', 0, 64)
}

// kilobytes prints a size in bytes as kilobytes: 2.1 KB.
func kilobytes(b float64) string { return short(b/1e3) + " KB" }

// ratio prints a ratio: 1.3×, 49×, 319×.
func ratio(x float64) string { return short(x) + "×" }

// percent prints a share with two significant digits: 56 %, 3.6 %,
// 0.56 %.
func percent(n, of int64) string {
	p := 100 * float64(n) / float64(of)
	var s string
	switch {
	case p >= 99.5 && p < 100:
		s = "99"
	case p >= 10:
		s = strconv.FormatFloat(p, 'f', 0, 64)
	case p >= 1:
		s = strconv.FormatFloat(p, 'f', 1, 64)
	default:
		s = strconv.FormatFloat(p, 'f', 2, 64)
	}
	return s + " %"
}

// plural is n and noun, with an s unless n is 1: 0 allocs, 1 alloc.
func plural(n int64, noun string) string {
	s := count(n) + " " + noun
	if n != 1 {
		s += "s"
	}
	return s
}

// joinCells joins the cells of a Markdown table row.
func joinCells(cells ...string) string {
	var b strings.Builder
	b.WriteString("|")
	for _, c := range cells {
		if c != "" {
			b.WriteString(" " + c)
		}
		b.WriteString(" |")
	}
	return b.String()
}
