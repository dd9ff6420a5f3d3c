package storm

import (
	"fmt"
	"strings"
	"time"
)

// summary derives a few sentences from the tables. Every number and every
// comparison in them comes from the report; a sentence whose premise the
// numbers do not show is left out.
func summary(r *Report) []string {
	var out []string
	for p := range r.Scenarios {
		if f, ok := sentences[p]; ok {
			for _, s := range f(r) {
				if s != "" {
					out = append(out, s)
				}
			}
		}
	}
	return append(out, moreCalls(r)...)
}

// sentences has a summary sentence per scenario.
var sentences = map[int]func(*Report) []string{
	ColdStart:     one(sumColdStart),
	RollingDeploy: one(sumRolling),
	Restart:       one(sumRestart),
	Outage:        func(r *Report) []string { return []string{sumOutage(r), sumColdOutage(r)} },
	Recovery:      one(sumRecovery),
	ClientPath:    sumClientPath,
}

func one(f func(*Report) string) func(*Report) []string {
	return func(r *Report) []string { return []string{f(r)} }
}

// row is key's row in scenario p; the zero Row if there is none.
func row(r *Report, p int, client string, cold bool) Row {
	x, _ := r.Row(p, Key{Client: client, Cold: cold})
	return x
}

func sumColdStart(r *Report) string {
	cfg := r.Config
	nc, gm, rc := row(r, ColdStart, NoCache, false), row(r, ColdStart, GoMicro, false), row(r, ColdStart, RegCache, false)
	s := fmt.Sprintf("Cold-start storm: no cache sent all %s lookups to the registry, p50 %s", count(nc.Lookups), fmtDur(nc.P50))
	if cfg.Capacity > 0 && nc.P50 > cfg.Latency*3/2 {
		s += fmt.Sprintf(" (%s of it queueing for the registry)", fmtDur(nc.P50-cfg.Latency))
	}
	return s + fmt.Sprintf(". %s made %s registry calls and regcache %s, for %d services; their slowest lookups took %s and %s.",
		GoMicro, count(gm.RegistryCalls), count(rc.RegistryCalls), cfg.Services, fmtDur(gm.Max), fmtDur(rc.Max))
}

func sumRolling(r *Report) string {
	cfg := r.Config
	sc := &r.Scenarios[RollingDeploy]
	gm, rc := row(r, RollingDeploy, GoMicro, false), row(r, RollingDeploy, RegCache, false)
	share := func(x Row) string {
		// Lookups that started in the scenario may end after it.
		return fmt.Sprintf("%.1f%%", min(100, 100*float64(x.Waiting)/float64(time.Duration(cfg.Concurrency)*sc.Length())))
	}
	s := fmt.Sprintf("Rolling deployment: when every entry expired with the registry at %v per call, %s's callers spent %s of the scenario in lookups, the longest %s, and made %s of them;",
		cfg.Slow, GoMicro, share(gm), fmtDur(gm.Max), count(gm.Lookups))
	s += fmt.Sprintf(" %s's callers spent %s and made %s.", RegCache, share(rc), count(rc.Lookups))
	if rc.RegistryCalls > 0 && rc.Max < cfg.Slow {
		s += fmt.Sprintf(" No regcache caller waited for its %s registry calls: the longest lookup took %s.", count(rc.RegistryCalls), fmtDur(rc.Max))
	}
	if sc.Changes > 0 {
		s += fmt.Sprintf(" Of the %d instances replaced, %s %s, and %s %s.", sc.Changes/2, GoMicro, oldServed(gm), RegCache, oldServed(rc))
	}
	return s
}

func oldServed(x Row) string {
	if x.Old == 0 {
		return "returned no old node"
	}
	return fmt.Sprintf("returned an old node in %s, up to %s after it had left", lookups(x.Old), fmtDur(x.OldLag))
}

func sumRestart(r *Report) string {
	sc := &r.Scenarios[Restart]
	if sc.Registered == 0 {
		return ""
	}
	gap := sc.Registered - sc.Origin
	s := fmt.Sprintf("Restart: %s had no instance for %s. The last lookup that failed or returned the old node started, after the stop:", ServiceName(restartSvc), fmtDur(gap))
	var parts []string
	for _, name := range []string{NoCache, GoMicro, RegCache} {
		x, ok := r.Row(Restart, Key{Client: name})
		if !ok {
			continue
		}
		switch {
		case x.CurrentAfter == 0:
			parts = append(parts, fmt.Sprintf("%s none", name))
		case x.Stuck:
			parts = append(parts, fmt.Sprintf("%s %s, at the end of the scenario", name, fmtDur(x.CurrentAfter)))
		default:
			parts = append(parts, fmt.Sprintf("%s %s", name, fmtDur(x.CurrentAfter)))
		}
	}
	s += " " + strings.Join(parts, "; ") + "."
	if sc.EventSeen > 0 {
		if d := sc.EventSeen - sc.Registered; d > 0 {
			s += fmt.Sprintf(" The new node's event reached a watch stream %s after the registration;", fmtDur(d))
		} else {
			s += " The new node's event reached a watch stream before the registration call returned;"
		}
		rc := row(r, Restart, RegCache, false)
		if late := rc.LastBad - sc.EventSeen; late > 0 {
			s += fmt.Sprintf(" regcache still failed lookups %s after it, so the event alone did not make it serve the new node.", fmtDur(late))
		} else {
			s += " regcache failed no lookup after it."
		}
	}
	return s
}

func sumOutage(r *Report) string {
	cfg := r.Config
	sc := &r.Scenarios[Outage]
	bound := retryBound(r)
	nc, gm, rc := row(r, Outage, NoCache, false), row(r, Outage, GoMicro, false), row(r, Outage, RegCache, false)
	s := fmt.Sprintf("Outage, warm cache: %s failed %s of %s lookups with %s registry calls (%s/s)", RegCache, count(rc.Failed), count(rc.Lookups),
		count(rc.RegistryCalls), rate(rc.RegistryCalls, sc.Length()))
	if probes := int64(sc.Length()/time.Second) + 1; rc.RegistryCalls <= probes+int64(cfg.Services) {
		// Held to be down, the registry gets one probe a second,
		// whatever the number of services, after a first failure or two.
		s += fmt.Sprintf(": about one probe a second while it held the registry down, where one call per service per %v retry interval would have been %s",
			cfg.RetryInterval(), count(bound))
	} else if rc.RegistryCalls <= bound {
		s += fmt.Sprintf(", within one per service per %v retry interval (at most %s)", cfg.RetryInterval(), count(bound))
	} else {
		s += fmt.Sprintf(", more than one per service per %v retry interval (%s)", cfg.RetryInterval(), count(bound))
	}
	s += fmt.Sprintf(", p99 %s. %s failed %s of %s with %s registry calls (%s/s), p99 %s", fmtDur(rc.P99),
		GoMicro, count(gm.Failed), count(gm.Lookups), count(gm.RegistryCalls), rate(gm.RegistryCalls, sc.Length()), fmtDur(gm.P99))
	if gm.P99 >= cfg.Latency && cfg.Latency > 0 {
		s += ": a caller behind an expired entry waits for a registry call that fails"
	}
	s += fmt.Sprintf(". Without a cache, %s of %s lookups failed.", count(nc.Failed), count(nc.Lookups))
	if rc.Failed == 0 && gm.Lookups > 0 && rc.Lookups > gm.Lookups {
		s += fmt.Sprintf(" In the same time regcache's callers made %s the lookups of go-micro's cache's: they never waited for the registry.", times(float64(rc.Lookups)/float64(gm.Lookups)))
	}
	return s
}

func sumColdOutage(r *Report) string {
	sc := &r.Scenarios[Outage]
	gmc, rcc := row(r, Outage, GoMicro, true), row(r, Outage, RegCache, true)
	if gmc.Lookups == 0 || rcc.Lookups == 0 {
		return ""
	}
	s := fmt.Sprintf("Outage, cold cache: with nothing cached, %s failed %s of its lookups and %s %s. The counts differ because a failure took %s with go-micro's cache (p50), a registry call each, and %s with regcache, its throttled error at once: per second, %s failures against %s.",
		GoMicro, percent(float64(gmc.Failed)/float64(gmc.Lookups)), RegCache, percent(float64(rcc.Failed)/float64(rcc.Lookups)),
		fmtDur(gmc.P50), fmtDur(rcc.P50), rate(gmc.Failed, sc.Length()), rate(rcc.Failed, sc.Length()))
	s += fmt.Sprintf(" They sent %s and %s calls per second to the registry", rate(gmc.RegistryCalls, sc.Length()), rate(rcc.RegistryCalls, sc.Length()))
	if rcc.RegistryCalls <= retryBound(r) {
		s += ", regcache at most one per service per retry interval."
	} else {
		s += "."
	}
	return s
}

// retryBound is the most registry calls regcache may make in the outage:
// one per service per retry interval, the first at once.
func retryBound(r *Report) int64 {
	sc := &r.Scenarios[Outage]
	retry := r.Config.RetryInterval()
	return int64(r.Config.Services) * (1 + int64((sc.Length()+retry-1)/retry))
}

func sumRecovery(r *Report) string {
	sc := &r.Scenarios[Recovery]
	var parts []string
	nc := row(r, Recovery, NoCache, false)
	// no cache calls the registry all the time: its first success is when
	// a client could reach the registry again.
	if nc.FirstOK >= time.Second {
		p := fmt.Sprintf("Without a cache, the first registry call to succeed started %s into the recovery", fmtDur(nc.FirstOK))
		if r.UpTook >= time.Millisecond {
			p += fmt.Sprintf(" (the registry took %s to come back)", fmtDur(r.UpTook))
		}
		parts = append(parts, p+".")
	}
	var current []string
	for _, x := range sc.Rows {
		switch {
		case x.CurrentAfter == 0:
			current = append(current, fmt.Sprintf("%s at once", x.Key))
		case x.Stuck:
			current = append(current, fmt.Sprintf("%s not by the end", x.Key))
		default:
			current = append(current, fmt.Sprintf("%s after %s", x.Key, fmtDur(x.CurrentAfter)))
		}
	}
	parts = append(parts, fmt.Sprintf("With every service on a new node, every service was current: %s.", strings.Join(current, "; ")))
	var old []string
	for _, x := range sc.Rows {
		if x.Old > 0 {
			old = append(old, fmt.Sprintf("%s in %s", x.Key, lookups(x.Old)))
		}
	}
	if len(old) > 0 {
		parts = append(parts, fmt.Sprintf("Old nodes were returned by %s.", strings.Join(old, "; ")))
	}
	rc := row(r, Recovery, RegCache, false)
	if wait := rc.FirstOK - sc.Origin; rc.CurrentAfter > 0 && wait >= r.Config.RetryInterval()/2 && (nc.FirstOK == 0 || nc.FirstOK < rc.FirstOK) {
		parts = append(parts, fmt.Sprintf("regcache's first registry call to succeed started %s after the registry was back, and until then it served old nodes (%s lookups): it waits out its %v retry interval before it asks again about a service whose last refresh failed.",
			fmtDur(wait), count(rc.Old), r.Config.RetryInterval()))
	}
	s := strings.Join(parts, " ")
	return "Recovery: " + strings.ToLower(s[:1]) + s[1:]
}

// moreCalls says where regcache made more registry calls than go-micro's
// cache, and why, where the numbers show it.
func moreCalls(r *Report) []string {
	var out []string
	for p := range r.Scenarios {
		sc := &r.Scenarios[p]
		for _, cold := range []bool{false, true} {
			gm, ok1 := r.Row(p, Key{Client: GoMicro, Cold: cold})
			rc, ok2 := r.Row(p, Key{Client: RegCache, Cold: cold})
			if !ok1 || !ok2 || rc.RegistryCalls <= gm.RegistryCalls {
				continue
			}
			s := fmt.Sprintf("More registry calls: in the %s, regcache%s made %s registry calls and go-micro's cache %s (%s and %s per service).",
				strings.ToLower(sc.Title), map[bool]string{true: ", cold,"}[cold], count(rc.RegistryCalls), count(gm.RegistryCalls),
				perService(rc.RegistryCalls, r.Config.Services), perService(gm.RegistryCalls, r.Config.Services))
			if why := whyMore(r, p, gm, rc); why != "" {
				s += " " + why
			}
			out = append(out, s)
		}
	}
	return out
}

// whyMore explains, where the numbers allow, why regcache made more registry
// calls than go-micro's cache in scenario p.
func whyMore(r *Report, p int, gm, rc Row) string {
	sc := &r.Scenarios[p]
	services := int64(r.Config.Services)
	switch {
	case p == RollingDeploy && sc.Changes > 0 && gm.RegistryCalls < services:
		return fmt.Sprintf("The deployment's %d registry changes reached both caches as watch events. go-micro's cache restarts an entry's TTL on every event, so it did not ask about the services replaced before their entry expired; regcache never extends an expiry on an event (a plugin can lose events, so the TTL refresh stays the safety net) and refreshed each entry that expired, in the background.",
			sc.Changes)
	case p == Outage && gm.P99 > 100*rc.P99 && rc.RegistryCalls <= retryBound(r):
		return fmt.Sprintf("go-micro's cache calls the registry in its callers' time: a caller behind an expired entry waited for the failing call (p99 %s), so its callers made only %s lookups, each a chance to call; regcache's callers never waited (p99 %s), and it tried each stale service in the background, at most once per retry interval.",
			fmtDur(gm.P99), count(gm.Lookups), fmtDur(rc.P99))
	case p == Recovery && rc.RegistryCalls >= services:
		return "When the registry is back, regcache re-validates every entry it holds, read or not; go-micro's cache asks about a service only when a caller finds its entry expired."
	}
	return ""
}

// lookups prints "1 lookup", "2 lookups".
func lookups(n int64) string {
	if n == 1 {
		return "1 lookup"
	}
	return count(n) + " lookups"
}

func perService(n int64, services int) string {
	return fmt.Sprintf("%.1f", float64(n)/float64(services))
}
