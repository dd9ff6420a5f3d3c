package main

import (
	"fmt"
	"slices"
	"strings"
)

// The blocks of the mass loss (integration/massloss_test.go): one run
// on go-micro v4 (mass-loss) and one on v5 (mass-loss-v5), each of a
// client through regcache's one-line wiring and one through go-micro's
// default selector, shown side by side.
func init() {
	for name, fn := range map[string]func(*renderer) string{
		// Every lease revoked while the servers serve: the RPCs that
		// failed, in integration/README.md.
		"mass-loss": massLossTable,
		// A server killed during the loss.
		"mass-loss-killed": massLossKilled,
		// A service scaled to zero after the loss.
		"mass-loss-zero": massLossZero,
	} {
		renderers[name] = fn
	}
}

// massRuns are the mass loss's runs, v4's first.
func (r *renderer) massRuns() []*trialRun {
	var out []*trialRun
	for _, id := range []string{"mass-loss", "mass-loss-v5"} {
		run := r.trialRun(id)
		if run.Loss == 0 {
			r.fail(fmt.Errorf("run %q (%s) is not a mass loss", id, run.file))
			return nil
		}
		out = append(out, run)
	}
	return out
}

// massRows are a line per client of every run, its name with the
// go-micro it ran on: regcache, one-line wiring (go-micro v4.11.0).
func massRows(runs []*trialRun, row func(*trialRun, *massLoss) []string) []string {
	var lines []string
	for _, run := range runs {
		for _, c := range run.Clients {
			name := c.Name
			if !strings.Contains(name, run.GoMicro) {
				name += " (go-micro " + run.GoMicro + ")"
			}
			lines = append(lines, joinCells(append([]string{name}, row(run, c.MassLoss)...)...))
		}
	}
	return lines
}

// of is n of m, both measured.
func (r *renderer) nOf(n, m int64) string { return r.count(n) + " of " + r.count(m) }

// orNone is a measured time, or none.
func (r *renderer) orNone(d *duration) string {
	if d == nil {
		return "none"
	}
	return r.time(*d)
}

// massLossTable is the loss: each client's RPCs started in it that
// failed, its first failure, the requests the lost servers served it,
// and its failed RPCs in the whole run.
func massLossTable(r *renderer) string {
	runs := r.massRuns()
	if runs == nil {
		return ""
	}
	lines := []string{
		"| client | RPCs in the loss that failed | first failure, into the loss | requests served by the lost servers in the loss | failed RPCs in the whole run |",
		"| --- | --: | --: | --: | --: |",
	}
	lines = append(lines, massRows(runs, func(_ *trialRun, m *massLoss) []string {
		return []string{r.nOf(int64(m.LossFailed), int64(m.LossRPCs)), r.orNone(m.FirstFailure), r.count(m.Reached), r.nOf(int64(m.Failed), int64(m.RPCs))}
	})...)
	var back []string
	for _, run := range runs {
		back = append(back, r.time(run.Back)+" (go-micro "+run.GoMicro+")")
	}
	v4 := runs[0]
	lines = append(lines, "", fmt.Sprintf("Every lease revoked for %s while the %d servers (%d services) kept serving, %d RPCs a second through each client; "+
		"the servers registered again %s after the loss. %s", setting(dur(v4.Loss)), v4.Nodes, v4.Services, v4.Rate, and(back), massCaption(runs)))
	return strings.Join(lines, "\n")
}

// massLossKilled is the server killed during the loss: the failed
// attempts at it, and its service's failed RPCs.
func massLossKilled(r *renderer) string {
	runs := r.massRuns()
	if runs == nil {
		return ""
	}
	lines := []string{
		"| client | failed attempts at the killed server | RPCs of its service that failed, from the kill to the loss's end |",
		"| --- | --: | --: |",
	}
	lines = append(lines, massRows(runs, func(_ *trialRun, m *massLoss) []string {
		return []string{r.count(int64(m.KilledAttempts)), r.count(int64(m.KilledFailed))}
	})...)
	lines = append(lines, "", "One server killed a third of the way into the loss. "+massCaption(runs))
	return strings.Join(lines, "\n")
}

// massLossZero is the scale to zero after the loss: the attempts at a
// stopped node after its first failure, the RPCs that failed otherwise
// than not found, and when the client first answered not found.
func massLossZero(r *renderer) string {
	runs := r.massRuns()
	if runs == nil {
		return ""
	}
	lines := []string{
		"| client | attempts at a stopped node after its first failure | RPCs failed otherwise than not found | not found after |",
		"| --- | --: | --: | --: |",
	}
	lines = append(lines, massRows(runs, func(_ *trialRun, m *massLoss) []string {
		return []string{r.count(int64(m.ZeroAttempts)), r.count(int64(m.ZeroFailed)), r.orNone(m.NotFound)}
	})...)
	lines = append(lines, "", "After the loss, one service scaled to zero: its servers deregistered and stopped. "+massCaption(runs))
	return strings.Join(lines, "\n")
}

// massCaption says where and when the runs were made: One run each of
// `TestMassLoss` in integration (go-micro v4.11.0) and integration5
// (go-micro v5.30.0) on 2026-12-07 (go1.26.8, linux/amd64, 2 CPUs,
// without the race detector; `docs/figures-integration.json`).
func massCaption(runs []*trialRun) string {
	var where, dates, machines, files []string
	race := false
	add := func(list []string, s string) []string {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
		return list
	}
	for _, run := range runs {
		module, _, _ := strings.Cut(strings.TrimPrefix(run.Command, "cd "), " ")
		where = append(where, module+" (go-micro "+run.GoMicro+")")
		dates = add(dates, run.Date)
		machines = add(machines, run.machine())
		files = add(files, "`"+run.file+"`")
		race = race || run.Race
	}
	detector := "without the race detector"
	if race {
		detector = "with the race detector"
	}
	return fmt.Sprintf("One run each of `%s` in %s on %s (%s, %s; %s).", testOf(runs[0]), and(where), and(dates), strings.Join(machines, "; "), detector, and(files))
}
