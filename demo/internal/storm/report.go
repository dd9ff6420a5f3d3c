package storm

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	regcache "github.com/regcache/cache"
)

// width is where the report wraps its prose.
const width = 100

// Write prints the report: what ran, a table per scenario, and a summary
// computed from the tables.
func Write(w io.Writer, r *Report) {
	cfg := r.Config
	ttl, retry := cfg.TTL(), cfg.RetryInterval()
	capacity := "no limit on concurrent calls"
	if cfg.Capacity > 0 {
		capacity = fmt.Sprintf("%d calls at a time per client (the rest queue)", cfg.Capacity)
	}
	regOpts := fmt.Sprintf("cache.WithTTL(%v)", ttl)
	regNote := fmt.Sprintf("every other option at its default (MinimumRetryInterval %v)", retry)
	if retry != regcache.DefaultMinimumRetryInterval {
		regOpts += fmt.Sprintf(", cache.WithMinimumRetryInterval(%v)", retry)
		regNote = "every other option at its default (the retry interval scales with -duration)"
	}
	fmt.Fprintf(w, "regcache demo: the same callers through %d clients of one registry, in %d scenarios\n\n", len(clientNames(r)), len(r.Scenarios))
	fmt.Fprintf(w, "registry:  %s, %d services of one instance each\n", r.Backend, cfg.Services)
	fmt.Fprintf(w, "           %v per call (%v while slow), %s\n", cfg.Latency, cfg.Slow, capacity)
	fmt.Fprintf(w, "callers:   %d per client, each calling GetService for one service after another, %v apart\n", cfg.Concurrency, think)
	nameWidth := 15
	for _, name := range clientNames(r) {
		nameWidth = max(nameWidth, len(name))
	}
	for i, name := range clientNames(r) {
		label := "clients:"
		if i > 0 {
			label = ""
		}
		switch about := r.About[name]; {
		case name == RegCache:
			fmt.Fprintf(w, "%-10s %-*s github.com/regcache/cache: cache.New(reg, %s)\n", label, nameWidth, name, regOpts)
			fmt.Fprintf(w, "%-10s %-*s %s\n", "", nameWidth, "", regNote)
		case about != "":
			fmt.Fprintf(w, "%-10s %-*s %s\n", label, nameWidth, name, wrap(about, strings.Repeat(" ", 12+nameWidth)))
		default:
			fmt.Fprintf(w, "%-10s %s\n", label, name)
		}
	}
	fmt.Fprintln(w, wrap(fmt.Sprintf("The caches have a TTL of %v in the lookup scenarios (their default is %s), so that entries expire during the demo.",
		ttl, strings.TrimSuffix(regcache.DefaultTTL.String(), "0s")), ""))
	fmt.Fprintln(w, wrap("Lookups are GetService calls from callers that do nothing else and never block on anything but the lookup: "+
		"their number shows how fast lookups return, not RPC throughput. A lookup counts in the scenario it started in.", ""))
	fmt.Fprintln(w, wrap("Registry calls are the GetService and ListServices calls that reached the registry (watch streams are not counted), "+
		"calls/s the same per second of the scenario. Failed: lookups that returned an error or no node. "+
		"Old nodes: lookups that returned a node that had left the registry before the lookup started.", ""))
	if len(r.Scenarios) > ClientPath {
		fmt.Fprintln(w, wrap(fmt.Sprintf("The %s scenario makes go-micro RPCs instead, to instances that really serve, through %d selectors: its table counts RPCs and the attempts go-micro's client made for them, each to the node the selector picked.",
			strings.ToLower(r.Scenarios[ClientPath].Title), len(rpcClients(r))), ""))
	}

	for p := range r.Scenarios {
		sc := &r.Scenarios[p]
		fmt.Fprintf(w, "\n%s\n\n", wrap(fmt.Sprintf("%d. %s (%v to %v): %s", p+1, sc.Title, sc.Start, sc.End, script[p].describe(r, sc)), "   "))
		if script[p].rpc {
			rpcTable(w, r, sc)
		} else {
			table(w, sc, script[p].current)
		}
	}
	fmt.Fprintf(w, "\nWhat the numbers say:\n")
	for _, s := range summary(r) {
		fmt.Fprintln(w, wrap("- "+s, "  "))
	}
}

// clientNames are the clients of the run, in the order of their rows.
func clientNames(r *Report) []string {
	var names []string
	seen := map[string]bool{}
	for _, sc := range r.Scenarios {
		for _, row := range sc.Rows {
			if !seen[row.Key.Client] {
				seen[row.Key.Client] = true
				names = append(names, row.Key.Client)
			}
		}
	}
	return names
}

func table(w io.Writer, sc *Scenario, current bool) {
	header := []string{"client", "registry calls", "calls/s", "lookups", "failed", "old nodes"}
	if current {
		header = append(header, "current after")
	}
	header = append(header, "p50", "p99", "max")
	cells := [][]string{header}
	for _, r := range sc.Rows {
		row := []string{r.Key.String(), count(r.RegistryCalls), rate(r.RegistryCalls, sc.Length()), count(r.Lookups),
			share(r.Failed, r.Lookups), count(r.Old)}
		if current {
			row = append(row, currentAfter(r))
		}
		row = append(row, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Max))
		cells = append(cells, row)
	}
	columns(w, cells)
}

// columns prints a table, its first row the header: the first column
// aligned left, the others right.
func columns(w io.Writer, cells [][]string) {
	width := make([]int, len(cells[0]))
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, row := range cells {
		var b strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i == 0 {
				b.WriteString("  " + c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// currentAfter prints a row's "current after": "0" if no lookup failed or
// returned an old node after the origin, "> d" if one did until the end.
func currentAfter(r Row) string {
	if r.Stuck {
		return "> " + fmtDur(r.CurrentAfter)
	}
	return fmtDur(r.CurrentAfter)
}

// share prints n and, if it is not zero, its share of total: 1,234 (5.6%).
func share(n, total int64) string {
	if n == 0 || total == 0 {
		return count(n)
	}
	return fmt.Sprintf("%s (%s)", count(n), percent(float64(n)/float64(total)))
}

// percent prints a fraction with two significant digits: 100%, 56%, 5.6%,
// 0.56%.
func percent(f float64) string {
	p := 100 * f
	switch {
	case p >= 99.5 && p < 100:
		return "99%"
	case p >= 10:
		return strconv.FormatFloat(p, 'f', 0, 64) + "%"
	case p >= 1:
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	default:
		return strconv.FormatFloat(p, 'f', 2, 64) + "%"
	}
}

// rate prints n per second of d: 1,852, 89.9, 4.0.
func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	x := float64(n) / d.Seconds()
	if x >= 100 {
		return count(int64(x + 0.5))
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}

// times prints a ratio: 1.9×, 15.4×, 845×.
func times(x float64) string {
	if x >= 100 {
		return strconv.FormatFloat(x, 'f', 0, 64) + "×"
	}
	return strconv.FormatFloat(x, 'f', 1, 64) + "×"
}

// wrap breaks text into lines of at most width columns, where it can, and
// indents every line but the first.
func wrap(text, indent string) string {
	var (
		b    strings.Builder
		line int
	)
	for i, word := range strings.Fields(text) {
		n := len([]rune(word))
		switch {
		case i == 0:
		case line+1+n > width:
			b.WriteString("\n" + indent)
			line = len(indent)
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += n
	}
	return b.String()
}

// fmtDur prints d with three significant digits.
func fmtDur(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	var (
		v    float64
		unit string
	)
	switch {
	case d < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + "ns"
	case d < time.Millisecond:
		v, unit = float64(d)/float64(time.Microsecond), "µs"
	case d < time.Second:
		v, unit = float64(d)/float64(time.Millisecond), "ms"
	default:
		v, unit = d.Seconds(), "s"
	}
	prec := 0
	switch {
	case v < 10:
		prec = 2
	case v < 100:
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + unit
}

// count prints n with thousands separators.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return s
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
