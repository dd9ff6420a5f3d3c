package main

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// renderers are the marked blocks, by name: each renders its body from the
// sources.
var renderers = map[string]func(*renderer) string{
	// The comparison of the caches, in the README and demo/README.md.
	"demo-comparison": demoComparison,
	// Three rows of it, on the README's first screen.
	"demo-headline": demoHeadline,
	// The cold recovery at four ends of the outage, in the README.
	"demo-phases": demoPhases,
	// go-micro's oldest cache's registry calls a second through the cold
	// outage, in a sentence of the README.
	"demo-gomicro-cold-calls-a-second": func(r *renderer) string {
		gms := r.demo.goMicroCaches()
		if len(gms) == 0 {
			r.fail(errors.New("the run has no go-micro cache"))
			return ""
		}
		out := r.scenario("outage")
		calls := r.row(out, gms[len(gms)-1], true).RegistryCalls
		return r.count(int64(math.Round(float64(calls) / time.Duration(out.Length).Seconds())))
	},
	// How long `make demo` takes, in whole seconds, in demo/README.md.
	"demo-took": func(r *renderer) string {
		return r.count(int64(math.Round(time.Duration(r.demo.Run.Took).Seconds())))
	},
	// The benchmarks against go-micro's, in the README.
	"bench-comparison": benchComparison,
}

// renderer renders the blocks from the sources. It notes every measured
// figure it prints, for the check that none is typed outside a block, and
// the first error, so that the renderers read as the tables they print.
type renderer struct {
	demo    *demoFigures
	benches benches
	runs    runs

	block    string
	measured []figure
	err      error
}

// figure is a measured figure as a block shows it.
type figure struct {
	text, block string
}

func (r *renderer) render(name string) (string, error) {
	fn, ok := renderers[name]
	if !ok {
		return "", fmt.Errorf("no block is named %s (internal/figures/render.go has the names)", name)
	}
	r.block, r.err = name, nil
	body := fn(r)
	if r.err != nil {
		return "", fmt.Errorf("block %s: %w", name, r.err)
	}
	return body, nil
}

func (r *renderer) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// note records s, a measured figure, and returns it.
func (r *renderer) note(s string) string {
	r.measured = append(r.measured, figure{s, r.block})
	return s
}

// The formats of format.go, for measured figures: each notes what it
// prints. Counts of allocations are too small to note.
func (r *renderer) count(n int64) string        { return r.note(count(n)) }
func (r *renderer) time(d duration) string      { return r.note(measured(time.Duration(d))) }
func (r *renderer) percent(n, of int64) string  { return r.note(percent(n, of)) }
func (r *renderer) benchTime(ns float64) string { return r.note(benchTime(ns)) }
func (r *renderer) ratio(x float64) string      { return r.note(ratio(x)) }
func (r *renderer) kilobytes(b float64) string  { return r.note(kilobytes(b)) }
func (r *renderer) allocs(n float64) string     { return plural(int64(math.Round(n)), "alloc") }
func (r *renderer) countf(x float64) string     { return r.count(int64(math.Round(x))) }

// scenario is the run's scenario id; or, a section or the error of
// finding it, which the renderer keeps, with an empty section to go on.
func (r *renderer) scenario(id string) *section { return r.or(r.demo.scenario(id)) }

func (r *renderer) or(s *section, err error) *section {
	if err != nil {
		r.fail(err)
		return &section{ID: "?"}
	}
	return s
}

func (r *renderer) row(s *section, client string, cold bool) row {
	x, err := s.row(client, cold)
	r.fail(err)
	return x
}

func (r *renderer) bench(name, metric string) benchRow {
	x, err := r.benches.get(name, metric)
	r.fail(err)
	return x
}

// share is n, and its share of of unless n is 0: 12 019 (3.6 %).
func (r *renderer) share(n, of int64) string {
	if n == 0 || of == 0 {
		return r.count(n)
	}
	return r.count(n) + " (" + r.percent(n, of) + ")"
}

// current is a row's "current after": "at once" if no lookup failed or
// returned an old node after the change, "> t" if one did at the end.
func (r *renderer) current(x row) string {
	switch {
	case x.CurrentAfter == 0:
		return "at once"
	case x.Stuck:
		return "> " + r.time(x.CurrentAfter)
	}
	return r.time(x.CurrentAfter)
}

// demoComparison is the table of the caches side by side in the run:
// regcache, then go-micro's caches, the newest first.
func demoComparison(r *renderer) string {
	f := r.demo
	clients := append([]string{regcache}, f.goMicroCaches()...)
	rolling, restart := r.scenario("rolling_deployment"), r.scenario("restart")
	outage, recovery, path := r.scenario("outage"), r.scenario("recovery"), r.scenario("client_path")

	head := []string{""}
	for _, c := range clients {
		head = append(head, strings.TrimSuffix(c, " cache"))
	}
	lines := []string{joinCells(head...), "|" + strings.Repeat(" --- |", 1) + strings.Repeat(" --: |", len(clients))}
	add := func(label string, cell func(client string) string) {
		cells := []string{label}
		for _, c := range clients {
			cells = append(cells, cell(c))
		}
		lines = append(lines, joinCells(cells...))
	}

	add(fmt.Sprintf("rolling deployment, registry at %s a call: longest lookup", setting(time.Duration(f.Config.Slow))), func(c string) string {
		return r.time(r.row(rolling, c, false).Max)
	})
	add(fmt.Sprintf("an instance restarts, %s without one: failed lookups", setting(time.Duration(f.Config.RestartGap))), func(c string) string {
		x := r.row(restart, c, false)
		return r.share(x.Failed, x.Lookups)
	})
	add("… current after the stop", func(c string) string { return r.current(r.row(restart, c, false)) })
	warmFailed := false
	for _, c := range clients {
		warmFailed = warmFailed || r.row(outage, c, false).Failed > 0
	}
	label := fmt.Sprintf("%s outage, warm: registry calls", setting(time.Duration(outage.Length)))
	if warmFailed {
		label += " (failed lookups)"
	} else {
		label += " (failed lookups: none)"
	}
	add(label, func(c string) string {
		x := r.row(outage, c, false)
		if warmFailed {
			return r.count(x.RegistryCalls) + " (" + r.count(x.Failed) + ")"
		}
		return r.count(x.RegistryCalls)
	})
	add(fmt.Sprintf("%s outage, cold: registry calls", setting(time.Duration(outage.Length))), func(c string) string {
		return r.count(r.row(outage, c, true).RegistryCalls)
	})
	add("registry back with new nodes, warm: current after", func(c string) string { return r.current(r.row(recovery, c, false)) })
	add("registry back, cold: failed lookups (current after)", func(c string) string {
		x := r.row(recovery, c, true)
		return r.count(x.Failed) + " (" + r.current(x) + ")"
	})
	// The client path runs go-micro's RPC client on the go-micro the demo
	// is built on: its default selector goes in that version's column.
	add(fmt.Sprintf("RPCs with 1 of %d instances dead, registry down: failed", f.Config.RPCInstances), func(c string) string {
		var sel, note string
		switch {
		case c == regcache:
			sel = regcacheSelector
		case goMicroVersion(c) == f.Config.GoMicro:
			sel, note = goMicroSelector, " (go-micro's selector)"
		default:
			return ""
		}
		x, err := path.rpc(sel)
		r.fail(err)
		return r.count(x.Failed) + " of " + r.count(x.RPCs) + note
	})

	lines = append(lines, "", fmt.Sprintf("One run of `make figures` on %s (%s, %s/%s, %d CPUs): %d services, %d callers per client, the registry %s a call, TTL %s; %d RPCs a second through each selector (`docs/figures.json`).",
		f.Run.Date, f.Run.Go, f.Run.OS, f.Run.Arch, f.Run.CPUs, f.Config.Services, f.Config.Concurrency,
		setting(time.Duration(f.Config.Latency)), setting(time.Duration(f.Config.TTL)), f.Config.RPCRate))
	return strings.Join(lines, "\n")
}

// headlineRows are the rows of the comparison that the README's first
// screen shows, by a part of their labels: a failure of the registry's
// answer that the callers meet, the load on a registry that is down, and
// the RPCs through the selector.
var headlineRows = []string{"an instance restarts", "outage, warm", "instances dead"}

// demoHeadline is the comparison's header and its headline rows.
func demoHeadline(r *renderer) string {
	lines := strings.Split(demoComparison(r), "\n")
	out := lines[:2:2]
	for _, want := range headlineRows {
		found := false
		for _, l := range lines[2:] {
			if strings.Contains(l, want) {
				out, found = append(out, l), true
				break
			}
		}
		if !found {
			r.fail(fmt.Errorf("the comparison has no row %q", want))
		}
	}
	return strings.Join(out, "\n")
}

// demoPhases is the cold recovery of regcache and go-micro's newest cache
// at each end of the outage of the -phases runs: failed lookups, and the
// time until current.
func demoPhases(r *renderer) string {
	f := r.demo
	gms := f.goMicroCaches()
	if len(gms) == 0 {
		r.fail(errors.New("the run has no go-micro cache"))
		return ""
	}
	head := []string{"outage ends, after go-micro's retry"}
	for _, p := range f.Phases {
		head = append(head, "+"+setting(time.Duration(p.OutageEnd*float64(f.Config.RetryInterval))))
	}
	lines := []string{joinCells(head...), "| --- |" + strings.Repeat(" --: |", len(f.Phases))}
	for _, c := range []string{regcache, gms[0]} {
		cells := []string{strings.TrimSuffix(c, " cache")}
		for _, p := range f.Phases {
			x := r.row(r.or(findSection(p.Scenarios, "recovery", "the -phases runs")), c, true)
			cells = append(cells, r.count(x.Failed)+", "+r.current(x))
		}
		lines = append(lines, joinCells(cells...))
	}
	return strings.Join(lines, "\n")
}

// benchComparison is the README's table of benchmarks: regcache against
// go-micro v4's cache and selector, from BENCHMARKS.md's v4 table.
func benchComparison(r *renderer) string {
	lines := []string{
		"| | regcache | go-micro v4.11.0 | |",
		"| --- | --: | --: | --: |",
	}
	add := func(cells ...string) { lines = append(lines, joinCells(cells...)) }

	ns, allocs := r.bench("Lookup/nodes=10", "ns/op"), r.bench("Lookup/nodes=10", "allocs/op")
	add("lookup hit, 10 nodes (`Lookup`; go-micro: `GetService`)",
		r.benchTime(ns.reg)+", "+r.allocs(allocs.reg), r.benchTime(ns.gm)+", "+r.allocs(allocs.gm), r.ratio(ns.ratio))

	ns10, ns100 := r.bench("GetService/nodes=10", "ns/op"), r.bench("GetService/nodes=100", "ns/op")
	al10, al100 := r.bench("GetService/nodes=10", "allocs/op"), r.bench("GetService/nodes=100", "allocs/op")
	add("`GetService` hit, 10 / 100 nodes (a copy)",
		r.benchTime(ns10.reg)+" / "+r.benchTime(ns100.reg)+", "+pair(al10.reg, al100.reg, r.allocs),
		r.benchTime(ns10.gm)+" / "+r.benchTime(ns100.gm)+", "+pair(al10.gm, al100.gm, r.allocs),
		r.ratio(ns10.ratio)+" / "+r.ratio(ns100.ratio))

	stale := r.bench("Stale/op=Lookup/nodes=10", "ns/op")
	add("stale read, registry down", r.benchTime(stale.reg)+", no registry call", r.benchTime(stale.gm)+", a registry call", r.ratio(stale.ratio))

	sel, selAllocs := r.bench("Select/nodes=10", "ns/op"), r.bench("Select/nodes=10", "allocs/op")
	add("`Select` + `Next`, 10 nodes", r.benchTime(sel.reg)+", "+r.allocs(selAllocs.reg), r.benchTime(sel.gm)+", "+r.allocs(selAllocs.gm), r.ratio(sel.ratio))

	storm := r.bench("ExpiryStorm", "p99-us")
	add("1 000 callers on an expired entry, registry hanging: p99", r.benchTime(storm.reg*1e3), r.benchTime(storm.gm*1e3), "")

	heap := r.bench("MemoryScale/nodes=3/services=100000", "heap-B/svc")
	add("live heap per cached service of 3 nodes, 100 000 cached", r.kilobytes(heap.reg), r.kilobytes(heap.gm), r.ratio(heap.ratio))

	gor := r.bench("MemoryScale/nodes=3/services=100000", "goroutines/op")
	add("goroutines for 100 000 cached services", r.countf(gor.reg), r.countf(gor.gm), "")

	// Events sends one event to each of 10 000 cached services per op.
	const events = 10000
	again, changed := r.bench("Events/services=10000/phase=steady", "cpu-ns/event"), r.bench("Events/services=10000/phase=changed", "cpu-ns/event")
	againAl, changedAl := r.bench("Events/services=10000/phase=steady", "allocs/op"), r.bench("Events/services=10000/phase=changed", "allocs/op")
	add("CPU per watch event, 10 000 cached: a node registering again / changed",
		r.benchTime(again.reg)+", "+r.allocs(againAl.reg/events)+" / "+r.benchTime(changed.reg)+", "+r.allocs(changedAl.reg/events),
		r.benchTime(again.gm)+" / "+r.benchTime(changed.gm)+", "+pair(againAl.gm/events, changedAl.gm/events, r.allocs),
		r.ratio(again.ratio)+" / "+r.ratio(changed.ratio))
	return strings.Join(lines, "\n")
}

// pair prints two allocation counts as one if they are equal: "4 allocs",
// else "17 / 107 allocs".
func pair(a, b float64, allocs func(float64) string) string {
	if math.Round(a) == math.Round(b) {
		return allocs(a)
	}
	return count(int64(math.Round(a))) + " / " + allocs(b)
}
