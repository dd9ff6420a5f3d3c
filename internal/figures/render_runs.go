package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// The blocks of the runs of runs.go: the integration tests' and the
// demo's against etcd.
func init() {
	for name, fn := range map[string]func(*renderer) string{
		// The etcd module against go-micro's plugin, in the README.
		"etcd-comparison": etcdComparison,
		// go-micro's cache over the etcd module, in a sentence of the
		// README: the 20 nodes, and the trials within the bound after the
		// longest outage.
		"etcd-gomicro-over-module": func(r *renderer) string {
			txn, restart := r.trialRun("etcd-twenty-nodes"), r.longestRun("etcd-restart-")
			return r.served(txn, r.client(txn, gmModule), 0) + "; " + r.of(restart, r.client(restart, gmModule))
		},
		// The etcd module's table in integration/README.md: every client,
		// the 20 nodes and each outage.
		"etcd-module-table": etcdModuleTable,
		// The new instance's Register after etcd's restart, in
		// integration/README.md.
		"etcd-restart-registers": func(r *renderer) string {
			var all []duration
			for _, run := range r.runs.withPrefix("etcd-restart-") {
				all = append(all, run.Registers...)
			}
			if len(all) == 0 {
				r.fail(fmt.Errorf("no run etcd-restart-* in %s with the new instance's Register", integrationFile))
				return ""
			}
			return r.span(slices.Min(all), slices.Max(all), " to ")
		},
		// The NATS module against go-micro's plugin, in the README.
		"nats-comparison": natsComparison,
		// The same in a sentence of docs/streams.md.
		"nats-restart-summary": natsSummary,
		// The NATS restart's table in integration/README.md.
		"nats-restart-table": natsTable,
		// The demo's restart scenario against etcd, in demo/README.md.
		"demo-etcd-restart": demoEtcdRestart,
		// How long `make demo-etcd` takes, and its storm, in whole seconds.
		"demo-etcd-took": func(r *renderer) string {
			return r.count(int64(math.Round(dur(r.trialRun("demo-etcd-restart").Took).Seconds())))
		},
		"demo-etcd-storm-took": func(r *renderer) string {
			return r.count(int64(math.Round(dur(r.trialRun("demo-etcd-restart").StormTook).Seconds())))
		},
		// The trials in which each plugin client was late, in a sentence.
		"demo-etcd-plugin-late": func(r *renderer) string {
			run := r.trialRun("demo-etcd-restart")
			rc, gm := r.client(run, rcPlugin), r.client(run, gmPlugin)
			late := func(c trialClient) int64 { return int64(run.trials() - run.within(c)) }
			return r.count(late(rc)) + " of " + r.count(int64(run.trials())) + " trials and go-micro's in " + r.count(late(gm))
		},
		// The times of regcache over the etcd module, in a sentence.
		"demo-etcd-module-range": func(r *renderer) string {
			run := r.trialRun("demo-etcd-restart")
			ds := sorted(r.client(run, rcModule))
			if ds[len(ds)-1] == nil {
				return r.span(*ds[0], *ds[0], "") + " to more than " + setting(dur(run.Limit))
			}
			return r.span(*ds[0], *ds[len(ds)-1], " to ")
		},
	} {
		renderers[name] = fn
	}
}

// The clients of the runs, by the names the tests and the demo give them.
const (
	rcModule = "regcache, etcd module"
	rcPlugin = "regcache, plugin"
	gmPlugin = "go-micro cache, plugin"
	gmModule = "go-micro cache, etcd module"

	natsRCModule = "regcache, nats module"
	natsRCPlugin = "regcache, nats plugin"
	natsGMPlugin = "go-micro cache, nats plugin"
	natsGMModule = "go-micro cache, nats module"
)

// trialRun is the run of id; or, with the error kept, a run of one
// client and one trial to go on with.
func (r *renderer) trialRun(id string) *trialRun { return r.orRun(r.runs.run(id)) }

func (r *renderer) longestRun(prefix string) *trialRun { return r.orRun(r.runs.longest(prefix)) }

func (r *renderer) orRun(run *trialRun, err error) *trialRun {
	if err != nil {
		r.fail(err)
		return &trialRun{ID: "?", Clients: []trialClient{{Took: []*duration{nil}}}}
	}
	return run
}

// client is the run's client of name; or, with the error kept, a client
// that served nothing.
func (r *renderer) client(run *trialRun, name string) trialClient {
	c, err := run.client(name)
	if err != nil {
		r.fail(err)
		return trialClient{Name: name, Took: make([]*duration, run.trials())}
	}
	return c
}

// took is a time to serve: "> 5 s" if not within the run's limit.
func (r *renderer) took(run *trialRun, d *duration) string {
	if d == nil {
		return "> " + setting(dur(run.Limit))
	}
	return r.time(*d)
}

// served is the client's time to serve every node in trial i: "> 5 s
// (2 of 21)" if not within the limit.
func (r *renderer) served(run *trialRun, c trialClient, i int) string {
	s := r.took(run, c.Took[i])
	if c.Took[i] == nil && c.Served != nil {
		s += " (" + r.count(int64(c.Served[i])) + " of " + r.count(int64(run.Nodes)) + ")"
	}
	return s
}

// of is the trials the client served within the bound: 20 of 20.
func (r *renderer) of(run *trialRun, c trialClient) string {
	return r.count(int64(run.within(c))) + " of " + r.count(int64(run.trials()))
}

// span is two measured times joined by sep, the unit once if they share
// it: 192–348 ms, 2.20 to 32.7 ms, 5.40 ms to 1.20 s.
func (r *renderer) span(a, b duration, sep string) string {
	sa, sb := r.time(a), r.time(b)
	na, ua, _ := strings.Cut(sa, " ")
	if _, ub, _ := strings.Cut(sb, " "); ua == ub {
		return na + sep + sb
	}
	return sa + sep + sb
}

// minMedianMax is the client's times to serve: 2 µs / 3 µs / 7.5 ms, the
// median the middle trial's, or the later of the two middle ones.
func (r *renderer) minMedianMax(run *trialRun, c trialClient) string {
	ds := sorted(c)
	return r.took(run, ds[0]) + " / " + r.took(run, ds[len(ds)/2]) + " / " + r.took(run, ds[len(ds)-1])
}

// runsCaption says which runs a block shows, when and where they were
// made, and their file: One run each of `TestA` and `TestB` (outages of
// 2 s and 10 s) on 2026-12-07 (go1.26.8, linux/amd64, 2 CPUs, without the
// race detector; `docs/figures-integration.json`).
func runsCaption(runs ...*trialRun) string {
	var names, dates, machines, files []string
	outages := map[string][]string{} // of a test run several times
	race := false
	add := func(list []string, s string) []string {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
		return list
	}
	for _, run := range runs {
		name := "`" + run.Command + "`"
		if t := testOf(run); t != "" {
			name = "`" + t + "`"
		}
		names = add(names, name)
		outages[name] = append(outages[name], setting(dur(run.Outage)))
		dates = add(dates, run.Date)
		machines = add(machines, run.machine())
		files = add(files, "`"+run.file+"`")
		race = race || run.Race
	}
	for i, name := range names {
		if len(outages[name]) > 1 {
			names[i] += " (outages of " + and(outages[name]) + ")"
		}
	}
	what := "One run of " + and(names)
	if len(runs) > 1 {
		what = "One run each of " + and(names)
	}
	detector := "without the race detector"
	if race {
		detector = "with the race detector"
	}
	return fmt.Sprintf("%s on %s (%s, %s; %s).", what, and(dates), strings.Join(machines, "; "), detector, and(files))
}

// and joins words as a sentence does: a, b and c.
func and(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// etcdComparison is the README's table: regcache over the etcd module and
// over go-micro's plugin, and go-micro's cache over the plugin, through
// the 20 nodes of one transaction and the longest outage.
func etcdComparison(r *renderer) string {
	txn, restart := r.trialRun("etcd-twenty-nodes"), r.longestRun("etcd-restart-")
	lines := []string{
		"| | regcache, `etcd` module | regcache, etcd plugin | go-micro's cache, etcd plugin |",
		"| --- | --: | --: | --: |",
	}
	clients := []string{rcModule, rcPlugin, gmPlugin}
	cells := []string{fmt.Sprintf("%d nodes written in one etcd transaction: all served after", txn.Nodes-1)}
	for _, name := range clients {
		cells = append(cells, r.served(txn, r.client(txn, name), 0))
	}
	lines = append(lines, joinCells(cells...))

	cells = []string{fmt.Sprintf("a new instance registered %s after a %s etcd outage: served within %s",
		setting(dur(restart.Delay)), setting(dur(restart.Outage)), setting(dur(restart.Bound)))}
	for i, name := range clients {
		c := r.client(restart, name)
		cell := r.of(restart, c)
		if i == 0 {
			cell += " trials"
			if ds := sorted(c); ds[len(ds)-1] != nil {
				cell += ", at most " + r.time(*ds[len(ds)-1])
			}
		}
		cells = append(cells, cell)
	}
	lines = append(lines, joinCells(cells...), "", runsCaption(txn, restart))
	return strings.Join(lines, "\n")
}

// etcdModuleTable is integration/README.md's table of the four clients:
// the 20 nodes, then each outage's times to serve (min / median / max)
// and trials within the bound.
func etcdModuleTable(r *renderer) string {
	txn := r.trialRun("etcd-twenty-nodes")
	restarts := r.runs.withPrefix("etcd-restart-")
	if len(restarts) == 0 {
		r.fail(fmt.Errorf("no run etcd-restart-* in %s", integrationFile))
		return ""
	}
	head := []string{"client", fmt.Sprintf("%d nodes in one transaction", txn.Nodes-1)}
	for _, run := range restarts {
		head = append(head, "restart after "+setting(dur(run.Outage)), "within "+setting(dur(run.Bound)))
	}
	lines := []string{joinCells(head...), "| --- |" + strings.Repeat(" --: |", len(head)-1)}
	for i, c := range txn.Clients {
		name := c.Name
		if i == 0 {
			name += " (asserted)"
		}
		cells := []string{name, r.served(txn, c, 0)}
		for _, run := range restarts {
			rc := r.client(run, c.Name)
			cells = append(cells, r.minMedianMax(run, rc), r.of(run, rc))
		}
		lines = append(lines, joinCells(cells...))
	}
	lines = append(lines, "", runsCaption(append([]*trialRun{txn}, restarts...)...))
	return strings.Join(lines, "\n")
}

// natsComparison is the README's table of the NATS restart: the trials
// within the bound of each client, and the times of regcache over the
// module.
func natsComparison(r *renderer) string {
	run := r.trialRun("nats-restart")
	lines := []string{
		"| regcache, `nats` module | regcache, NATS plugin | go-micro's cache, NATS plugin | go-micro's cache, `nats` module |",
		"| --: | --: | --: | --: |",
	}
	var cells []string
	for i, name := range []string{natsRCModule, natsRCPlugin, natsGMPlugin, natsGMModule} {
		c := r.client(run, name)
		cell := r.of(run, c)
		if i == 0 {
			cell += " trials"
			if ds := sorted(c); ds[len(ds)-1] != nil {
				cell += ", " + r.span(*ds[0], *ds[len(ds)-1], "–")
			}
		}
		cells = append(cells, cell)
	}
	lines = append(lines, joinCells(cells...), "", runsCaption(run))
	return strings.Join(lines, "\n")
}

// natsSummary is the NATS restart in a sentence: regcache over the
// module's trials within the bound, against the plugin's clients'.
func natsSummary(r *renderer) string {
	run := r.trialRun("nats-restart")
	module := r.of(run, r.client(run, natsRCModule))
	rc, gm := r.client(run, natsRCPlugin), r.client(run, natsGMPlugin)
	if run.within(rc) == run.within(gm) {
		return module + " trials, against " + r.of(run, rc) + " over the plugin, through regcache or go-micro's cache"
	}
	return module + " trials, against " + r.of(run, rc) + " over the plugin through regcache and " + r.of(run, gm) + " through go-micro's cache"
}

// natsTable is integration/README.md's table of the NATS restart.
func natsTable(r *renderer) string {
	run := r.trialRun("nats-restart")
	lines := []string{
		joinCells("client", "min", "median", "max", "within "+setting(dur(run.Bound))),
		"| --- | --: | --: | --: | --: |",
	}
	for i, c := range run.Clients {
		name := c.Name
		if i == 0 {
			name += " (asserted)"
		}
		ds := sorted(c)
		lines = append(lines, joinCells(name, r.took(run, ds[0]), r.took(run, ds[len(ds)/2]), r.took(run, ds[len(ds)-1]), r.of(run, c)))
	}
	lines = append(lines, "", runsCaption(run))
	return strings.Join(lines, "\n")
}

// demoEtcdRestart is demo/README.md's table of the restart scenario: each
// client's time to serve in each trial, the median and the trials within
// the bound.
func demoEtcdRestart(r *renderer) string {
	run := r.trialRun("demo-etcd-restart")
	head := []string{"client"}
	for i := range run.trials() {
		head = append(head, fmt.Sprintf("trial %d", i+1))
	}
	head = append(head, "median", "within "+setting(dur(run.Bound)))
	lines := []string{joinCells(head...), "| --- |" + strings.Repeat(" --: |", len(head)-1)}
	for _, c := range run.Clients {
		cells := []string{c.Name}
		for _, d := range c.Took {
			cells = append(cells, r.took(run, d))
		}
		cells = append(cells, r.took(run, sorted(c)[run.trials()/2]), r.of(run, c))
		lines = append(lines, joinCells(cells...))
	}
	caption := runsCaption(run)
	if len(run.Registers) > 0 {
		caption = strings.TrimSuffix(caption, ".") + fmt.Sprintf(": etcd down for %s, the new instance registered %s after it served again, its own `Register` taking %s.",
			setting(dur(run.Outage)), setting(dur(run.Delay)), r.span(slices.Min(run.Registers), slices.Max(run.Registers), " to "))
	}
	lines = append(lines, "", caption)
	return strings.Join(lines, "\n")
}
