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
	fmt.Fprintf(w, "regcache demo: the same callers through three clients of one registry, in %d scenarios\n\n", numPhases)
	fmt.Fprintf(w, "registry:  %s, %d services of one node each\n", r.Backend, cfg.Services)
	fmt.Fprintf(w, "           %v per call (%v while slow), %s\n", cfg.Latency, cfg.Slow, capacity)
	fmt.Fprintf(w, "callers:   %d per client, each calling GetService for one service after another, %v apart\n", cfg.Concurrency, think)
	fmt.Fprintf(w, "clients:   %-15s the registry itself\n", NoCache)
	fmt.Fprintf(w, "           %-15s go-micro.dev/v4/registry/cache: cache.New(reg, cache.WithTTL(%v))\n", GoMicro, ttl)
	fmt.Fprintf(w, "           %-15s github.com/regcache/cache: cache.New(reg, %s)\n", RegCache, regOpts)
	fmt.Fprintf(w, "           %-15s %s\n", "", regNote)
	fmt.Fprintf(w, "Both caches have a TTL of %v (their default is %s), so that entries expire during the demo.\n", ttl, strings.TrimSuffix(regcache.DefaultTTL.String(), "0s"))
	fmt.Fprintf(w, "Registry calls are the GetService calls that reached the registry (watch streams are not counted).\n")
	fmt.Fprintf(w, "A lookup counts in the scenario it started in.\n")

	for p := 0; p < numPhases; p++ {
		sc := r.Scenarios[p]
		fmt.Fprintf(w, "\n%s\n\n", wrap(fmt.Sprintf("%d. %s (%v to %v): %s", p+1, sc.Title, sc.Start, sc.End, describe(r, p)), "   "))
		table(w, sc.Rows)
	}
	fmt.Fprintf(w, "\nWhat the numbers say:\n")
	for _, s := range summary(r) {
		fmt.Fprintln(w, wrap("- "+s, "  "))
	}
}

func describe(r *Report, p int) string {
	cfg := r.Config
	switch p {
	case ColdStart:
		return "every caller starts at the same moment, with nothing cached."
	case RollingDeploy:
		return fmt.Sprintf("the registry slows to %v per call, and every cached entry, filled together at the start with a TTL of %v, expires at once at %v.",
			cfg.Slow, cfg.TTL(), cfg.TTL())
	case Outage:
		return fmt.Sprintf("the registry is down for %v: %s. Warm: the clients above. Cold: a new instance of each cache, started with the outage, nothing cached.",
			r.Scenarios[p].End-r.Scenarios[p].Start, r.Outage)
	case Recovery:
		took := ""
		if r.UpTook >= time.Millisecond {
			took = fmt.Sprintf(" (after %v)", fmtDur(r.UpTook))
		}
		return fmt.Sprintf("the registry is back%s, and every service has a new node: its instances restarted during the outage.", took)
	}
	return ""
}

func table(w io.Writer, rows []Row) {
	header := []string{"client", "registry calls", "lookups", "failed", "p50", "p99", "max"}
	cells := [][]string{header}
	for _, r := range rows {
		cells = append(cells, []string{r.Key.String(), count(r.RegistryCalls), count(r.Lookups), count(r.Failed),
			fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Max)})
	}
	width := make([]int, len(header))
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

// summary derives a few sentences from the tables. Every number and every
// comparison in them comes from the report.
func summary(r *Report) []string {
	cfg := r.Config
	var out []string
	row := func(p int, client string, cold bool) Row {
		x, _ := r.Row(p, Key{Client: client, Cold: cold})
		return x
	}

	// Cold start.
	nc, gm, rc := row(ColdStart, NoCache, false), row(ColdStart, GoMicro, false), row(ColdStart, RegCache, false)
	s := fmt.Sprintf("Cold-start storm: no cache sent all %s lookups to the registry, p50 %s", count(nc.Lookups), fmtDur(nc.P50))
	if cfg.Capacity > 0 && nc.P50 > cfg.Latency*3/2 {
		s += fmt.Sprintf(" (%s of it queueing for the registry)", fmtDur(nc.P50-cfg.Latency))
	}
	s += fmt.Sprintf(". go-micro cache made %s registry calls and regcache %s, for %d services; their slowest lookups took %s and %s.",
		count(gm.RegistryCalls), count(rc.RegistryCalls), cfg.Services, fmtDur(gm.Max), fmtDur(rc.Max))
	out = append(out, s)

	// Rolling deployment.
	gm, rc = row(RollingDeploy, GoMicro, false), row(RollingDeploy, RegCache, false)
	phase := r.Scenarios[RollingDeploy].End - r.Scenarios[RollingDeploy].Start
	share := func(x Row) string {
		// Lookups that started in the phase may end after it.
		return fmt.Sprintf("%.1f%%", min(100, 100*float64(x.Waiting)/float64(time.Duration(cfg.Concurrency)*phase)))
	}
	s = fmt.Sprintf("Rolling deployment: when every entry expired with the registry at %v per call, %s's callers spent %s of the phase in lookups, the longest %s, and made %s of them;",
		cfg.Slow, GoMicro, share(gm), fmtDur(gm.Max), count(gm.Lookups))
	s += fmt.Sprintf(" %s's callers spent %s and made %s.", RegCache, share(rc), count(rc.Lookups))
	if rc.RegistryCalls > 0 && rc.Max < cfg.Slow {
		s += fmt.Sprintf(" No regcache caller waited for its %s registry calls: the longest lookup took %s.", count(rc.RegistryCalls), fmtDur(rc.Max))
	}
	out = append(out, s)

	// Outage.
	outage := r.Scenarios[Outage].End - r.Scenarios[Outage].Start
	retry := cfg.RetryInterval()
	bound := int64(cfg.Services) * (1 + int64((outage+retry-1)/retry))
	nc, gm, rc = row(Outage, NoCache, false), row(Outage, GoMicro, false), row(Outage, RegCache, false)
	s = fmt.Sprintf("Outage, warm cache: %s failed %s of %s lookups with %s registry calls", RegCache, count(rc.Failed), count(rc.Lookups), count(rc.RegistryCalls))
	if rc.RegistryCalls <= bound {
		s += fmt.Sprintf(" (within one per service per %v retry interval: at most %s)", retry, count(bound))
	} else {
		s += fmt.Sprintf(" (more than one per service per %v retry interval, %s)", retry, count(bound))
	}
	s += fmt.Sprintf(", p99 %s. %s failed %s of %s with %s registry calls, p99 %s", fmtDur(rc.P99),
		GoMicro, count(gm.Failed), count(gm.Lookups), count(gm.RegistryCalls), fmtDur(gm.P99))
	if gm.P99 >= cfg.Latency && cfg.Latency > 0 {
		s += ": a caller behind an expired entry waits for a registry call that fails"
	}
	s += fmt.Sprintf(". Without a cache, %s of %s lookups failed.", count(nc.Failed), count(nc.Lookups))
	if rc.Failed == 0 && gm.Lookups > 0 && rc.Lookups > gm.Lookups {
		s += fmt.Sprintf(" In the same time regcache served %s the lookups of go-micro's cache.", times(float64(rc.Lookups)/float64(gm.Lookups)))
	}
	out = append(out, s)

	gmc, rcc := row(Outage, GoMicro, true), row(Outage, RegCache, true)
	s = fmt.Sprintf("Outage, cold cache: with nothing cached, %s failed %s of %s lookups and %s %s of %s.",
		GoMicro, count(gmc.Failed), count(gmc.Lookups), RegCache, count(rcc.Failed), count(rcc.Lookups))
	s += fmt.Sprintf(" go-micro's cache sent %s calls to the registry and a failure took %s (p50); regcache sent %s",
		count(gmc.RegistryCalls), fmtDur(gmc.P50), count(rcc.RegistryCalls))
	if rcc.RegistryCalls <= bound {
		s += fmt.Sprintf(" (at most one per service per retry interval) and answered the rest at once with its throttled error, p50 %s.", fmtDur(rcc.P50))
	} else {
		s += fmt.Sprintf(", p50 %s.", fmtDur(rcc.P50))
	}
	out = append(out, s)

	// Recovery.
	nc, gm, rc = row(Recovery, NoCache, false), row(Recovery, GoMicro, false), row(Recovery, RegCache, false)
	gmc, rcc = row(Recovery, GoMicro, true), row(Recovery, RegCache, true)
	var parts []string
	// no cache calls the registry all the time: its first success is when
	// a client could reach the registry again.
	if nc.FirstOK >= time.Second {
		p := fmt.Sprintf("Without a cache, the first registry call to succeed started %s into the recovery", fmtDur(nc.FirstOK))
		if r.UpTook >= time.Millisecond {
			p += fmt.Sprintf(" (the registry took %s to come back)", fmtDur(r.UpTook))
		}
		parts = append(parts, p+".")
	}
	parts = append(parts, fmt.Sprintf("With every service on a new node, %s %s, %s %s, and %s %s.",
		NoCache, oldNodes(nc), GoMicro, oldNodes(gm), RegCache, oldNodes(rc)))
	if rc.Old > 0 && rc.LastOld > retry/2 {
		parts = append(parts, fmt.Sprintf("regcache waits out its %v retry interval before it asks again about a service whose last refresh failed, unless its watch stream reports the change first.", retry))
	}
	if rcc.Failed > 0 || gmc.Failed > 0 {
		parts = append(parts, fmt.Sprintf("Of the cold instances, %s %s, and %s %s.", GoMicro, failedUntil(gmc), RegCache, failedUntil(rcc)))
	}
	s = strings.Join(parts, " ")
	s = "Recovery: " + strings.ToLower(s[:1]) + s[1:]
	out = append(out, s)
	return out
}

func oldNodes(r Row) string {
	if r.Old == 0 {
		return "returned no old node"
	}
	return fmt.Sprintf("returned old nodes in %s lookups, the last %s into the recovery", count(r.Old), fmtDur(r.LastOld))
}

func failedUntil(r Row) string {
	if r.Failed == 0 {
		return "failed no lookup"
	}
	return fmt.Sprintf("failed %s lookups, the last %s into the recovery", count(r.Failed), fmtDur(r.LastFailed))
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
