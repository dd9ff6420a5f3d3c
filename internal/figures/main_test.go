package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The README, demo/README.md and docs/ show the figures that their
// sources render, and no figure of the demo outside a marked block.
func TestDocumentsShowTheFigures(t *testing.T) {
	g, err := renderAll(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	problems := g.check()
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) > 0 {
		t.Log("A marked block that differs: " + regenerate + ". A figure typed outside a block: put it in one (CONTRIBUTING.md).")
	}
}

// everyBlock shows every block once, the README the tables.
var everyBlock = map[string]string{
	"README.md": "# regcache\n\n<!-- figures:demo-comparison -->\n<!-- /figures -->\n\n" +
		"go-micro's cache asks at every miss (<!-- figures:demo-gomicro-cold-calls-a-second --><!-- /figures --> calls a second).\n\n" +
		"<!-- figures:demo-phases -->\n<!-- /figures -->\n\n<!-- figures:bench-comparison -->\n<!-- /figures -->\n\n" +
		"On etcd:\n\n<!-- figures:etcd-comparison -->\n<!-- /figures -->\n\n" +
		"go-micro's cache over the module did as well (<!-- figures:etcd-gomicro-over-module --><!-- /figures -->).\n\n" +
		"On NATS:\n\n<!-- figures:nats-comparison -->\n<!-- /figures -->\n" +
		"\n<!-- figures:demo-headline -->\n<!-- /figures -->\n",
	"demo/README.md": "It takes about <!-- figures:demo-took --><!-- /figures --> seconds.\n\n<!-- figures:demo-comparison -->\n<!-- /figures -->\n\n" +
		"## Against etcd\n\n`make demo-etcd` takes about <!-- figures:demo-etcd-took --><!-- /figures --> seconds, " +
		"<!-- figures:demo-etcd-storm-took --><!-- /figures --> of them the storm.\n\n<!-- figures:demo-etcd-restart -->\n<!-- /figures -->\n\n" +
		"Late in <!-- figures:demo-etcd-plugin-late --><!-- /figures -->; the module's within <!-- figures:demo-etcd-module-range --><!-- /figures -->.\n",
	"integration/README.md": "# Integration tests\n\nRun the tests.\n\n## The etcd module\n\n<!-- figures:etcd-module-table -->\n<!-- /figures -->\n\n" +
		"B's own `Register` took <!-- figures:etcd-restart-registers --><!-- /figures --> after the restart.\n\n" +
		"## NATS: a node registered after a restart\n\n<!-- figures:nats-restart-table -->\n<!-- /figures -->\n\n## How each test was made to fail\n\nBroken.\n" +
		"\n## A mass loss\n\n<!-- figures:mass-loss -->\n<!-- /figures -->\n\n<!-- figures:mass-loss-killed -->\n<!-- /figures -->\n\n" +
		"<!-- figures:mass-loss-zero -->\n<!-- /figures -->\n",
	"docs/streams.md": "# Streams\n\nOver the NATS module, served within 1.5 s in <!-- figures:nats-restart-summary --><!-- /figures --> " +
		"(`TestNodeRegisteredAfterANATSRestart`).\n",
}

// fixture is a repository with the documents given, by path, and the test
// data as its sources.
func fixture(t *testing.T, docs map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for _, dir := range []string{"docs", "demo"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "integration"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"README.md": "# x\n", "demo/README.md": "# demo\n", "integration/README.md": "# integration\n", "CHANGES.md": "# Changes\n\n## v0.1.0\n"}
	for src, dst := range map[string]string{"testdata/figures.json": figuresFile, "testdata/BENCHMARKS.md": benchFile,
		"testdata/figures-integration.json": integrationFile, "testdata/figures-demo-etcd.json": demoEtcdFile} {
		files[dst] = read(t, src)
	}
	// The go.mod files that the README's versions come from: each
	// requires its modules at testVersion, with a go directive of 1.25.
	for _, src := range versionSources {
		mod := "module x\n\ngo 1.25\n\nrequire (\n"
		for _, m := range src.modules {
			mod += "\t" + m + " " + testVersion + "\n"
		}
		files[src.gomod] = mod + ")\n"
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(src.gomod)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for path, text := range docs {
		files[path] = text
	}
	for path, text := range files {
		write(t, filepath.Join(root, path), text)
	}
	return root
}

// testVersion is the version the fixture's go.mod files require of every
// module the README's versions come from.
const testVersion = "v1.2.3"

// rendered is a fixture of docs, each block rendered from the sources, as
// -write leaves it.
func rendered(t *testing.T, docs map[string]string) string {
	t.Helper()
	root := fixture(t, docs)
	g, err := renderAll(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range g.docs {
		write(t, filepath.Join(root, d.path), d.rendered)
	}
	return root
}

func problemsOf(t *testing.T, root string) []string {
	t.Helper()
	g, err := renderAll(root)
	if err != nil {
		t.Fatal(err)
	}
	return g.check()
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// edit replaces old, which must be there, with new in the file at path.
func edit(t *testing.T, path, old, new string) {
	t.Helper()
	text := read(t, path)
	if !strings.Contains(text, old) {
		t.Fatalf("%s has no %q", path, old)
	}
	write(t, path, strings.Replace(text, old, new, 1))
}

// wantProblems fails unless the problems are, in order, one per want,
// each containing it.
func wantProblems(t *testing.T, problems []string, want ...string) {
	t.Helper()
	ok := len(problems) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.Contains(problems[i], want[i])
	}
	if !ok {
		t.Errorf("problems:\n\t%s\nwant one per\n\t%s", strings.Join(problems, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// Rendered, the blocks show the sources' figures, and the check passes;
// rendering again changes nothing.
func TestRenderedBlocksPass(t *testing.T) {
	root := rendered(t, everyBlock)
	wantProblems(t, problemsOf(t, root))
	readme := read(t, filepath.Join(root, "README.md"))
	for _, want := range []string{
		"| | regcache | go-micro v5.30.0 | go-micro v4.11.0 |\n| --- | --: | --: | --: |\n",
		"| 10 s outage, warm: registry calls (failed lookups: none) | 11 | 40 | 427 |\n",
		"| an instance restarts, 200 ms without one: failed lookups | 0 | 12 019 (3.6 %) | 256 (0.08 %) |\n",
		"| registry back, cold: failed lookups (current after) | 906 (21.4 ms) | 8 (1.40 ms) | 0 (at once) |\n",
		"| RPCs with 1 of 3 instances dead, registry down: failed | 0 of 1 199 | | 35 of 1 199 (go-micro's selector) |\n",
		"(<!-- figures:demo-gomicro-cold-calls-a-second -->514<!-- /figures --> calls a second)",
		"| outage ends, after go-micro's retry | +0 s | +1.25 s |\n",
		"| regcache | 1 110, 25.7 ms | 34 457, 834 ms |\n",
		"| lookup hit, 10 nodes (`Lookup`; go-micro: `GetService`) | 18 ns, 0 allocs | 909 ns, 17 allocs | 49× |\n",
		"| CPU per watch event, 10 000 cached: a node registering again / changed | 1.3 µs, 0 allocs / 2.6 µs, 4 allocs | 5.1 µs / 4.8 µs, 2 allocs | 3.8× / 1.8× |\n",
		"<!-- figures:bench-comparison -->\n\n| | regcache |",
		"\n\n<!-- /figures -->\n",
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("the rendered README lacks %q:\n%s", want, readme)
		}
	}
	if demo := read(t, filepath.Join(root, "demo/README.md")); !strings.Contains(demo, "about <!-- figures:demo-took -->43<!-- /figures --> seconds") {
		t.Errorf("demo/README.md: %s", demo)
	}
	g, err := renderAll(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range g.docs {
		if d.rendered != d.text {
			t.Errorf("%s changes when rendered again", d.path)
		}
	}
}

// A figure changed by hand in a block fails the check, which names the
// file, the line and the block; so does a source that changed.
func TestABlockThatDiffersFromItsSourceFails(t *testing.T) {
	root := rendered(t, everyBlock)
	edit(t, filepath.Join(root, "README.md"), "| 11 | 40 | 427 |", "| 11 | 40 | 435 |")
	wantProblems(t, problemsOf(t, root), "README.md:3: block demo-comparison is not what the sources render")

	root = rendered(t, everyBlock)
	edit(t, filepath.Join(root, figuresFile), `"registry_calls": 427`, `"registry_calls": 435`)
	wantProblems(t, problemsOf(t, root),
		"README.md:3: block demo-comparison is not what the sources render",
		"README.md:73: block demo-headline is not what the sources render",
		"demo/README.md:3: block demo-comparison is not what the sources render")

	root = rendered(t, everyBlock)
	edit(t, filepath.Join(root, benchFile), "| Lookup/nodes=10 | ns/op | 18.4 |", "| Lookup/nodes=10 | ns/op | 19.6 |")
	wantProblems(t, problemsOf(t, root), "README.md:31: block bench-comparison is not what the sources render")

	root = rendered(t, everyBlock)
	edit(t, filepath.Join(root, "demo/README.md"), "-->43<!--", "-->44<!--")
	wantProblems(t, problemsOf(t, root), "demo/README.md:1: block demo-took is not what the sources render")
}

// A source without a figure that a block shows is an error that names
// both.
func TestAFigureMissingFromTheSourceIsAnError(t *testing.T) {
	root := fixture(t, everyBlock)
	edit(t, filepath.Join(root, figuresFile), `"client": "regcache selector"`, `"client": "another selector"`)
	if _, err := renderAll(root); err == nil || !strings.Contains(err.Error(), `README.md:3: block demo-comparison: scenario "client_path" has no RPC row for regcache selector`) {
		t.Errorf("error %v", err)
	}
	root = fixture(t, everyBlock)
	edit(t, filepath.Join(root, figuresFile), `"retry_interval"`, `"retry_period"`)
	if _, err := renderAll(root); err == nil || !strings.Contains(err.Error(), `unknown field "retry_period"`) {
		t.Errorf("error %v", err)
	}
}

// A block that no document shows, or a name without a renderer, fails.
func TestEveryBlockIsShownAndKnown(t *testing.T) {
	docs := map[string]string{}
	for k, v := range everyBlock {
		docs[k] = v
	}
	docs["demo/README.md"] = strings.Replace(everyBlock["demo/README.md"], "<!-- figures:demo-took --><!-- /figures -->", "43", 1)
	wantProblems(t, problemsOf(t, rendered(t, docs)), "block demo-took is in no document")

	docs["demo/README.md"] = everyBlock["demo/README.md"] + "\n<!-- figures:demo-nothing -->\n<!-- /figures -->\n"
	if _, err := renderAll(fixture(t, docs)); err == nil || !strings.Contains(err.Error(), "demo/README.md:15: no block is named demo-nothing") {
		t.Errorf("error %v", err)
	}
}

// Markers out of place are reported with their line.
func TestMarkersOutOfPlace(t *testing.T) {
	for text, want := range map[string]string{
		"a\n<!-- figures:demo-took -->\nb\n":                                        "line 2: block demo-took has no <!-- /figures -->",
		"a\n<!-- /figures -->\n":                                                    "line 2: <!-- /figures --> without an opening marker",
		"<!-- figures:demo-took -->1<!-- /figures --><!-- /figures -->":             "line 1: <!-- /figures --> without an opening marker",
		"<!-- figures:demo-took -->\n<!-- figures:demo-took -->\n<!-- /figures -->": "line 2: block demo-took opens before <!-- /figures --> closes at line 3",
	} {
		if _, err := findBlocks(text); err == nil || err.Error() != want {
			t.Errorf("%q: error %v, want %q", text, err, want)
		}
	}
	blocks, err := findBlocks("x <!-- figures:a -->1<!-- /figures --> y\n<!-- figures:b -->\nt\n<!-- /figures -->\n")
	if err != nil || len(blocks) != 2 || !blocks[0].inline || blocks[1].inline || blocks[1].line != 2 || blocks[0].name != "a" {
		t.Errorf("blocks %+v, %v", blocks, err)
	}
}

// A figure of the demo typed outside the blocks fails: one equal to a
// figure a block shows, or a count of what the demo counts. Settings,
// versions, code and the paragraphs of docs/ that do not name the demo
// pass, and docs/decisions.md is not read.
func TestFiguresTypedOutsideTheBlocks(t *testing.T) {
	for _, tc := range []struct {
		path, text string
		want       string // in the one problem; "" for none
	}{
		{"README.md", "The cache made 427 calls.", `README.md:1: "427" is the figure "427" of block demo-comparison`},
		{"README.md", "The longest took 5172 µs.", `"5172 µs" is the figure "5.17 ms" of block demo-comparison`},
		{"README.md", "| v5 | 12,019 |", `"12,019" is the figure "12 019" of block demo-comparison`},
		{"README.md", "about 435 calls for go-micro's cache", `"435 calls" reads as a measured figure`},
		{"README.md", "then 38 failed RPCs", `"38 failed RPCs" reads as a measured figure`},
		{"README.md", "and 0 of 1,200 RPCs failed", `"0 of 1,200 RPCs" reads as a measured figure`},
		{"demo/README.md", "10 registry calls and no failed lookup", `demo/README.md:1: "10 registry calls" reads`},
		{"docs/x.md", "In the demo, 10 registry calls.", `docs/x.md:1: "10 registry calls" reads`},
		{"docs/x.md", "A soak run.\nIt made 98 815 registry calls and took 5.17 ms.", ""},
		{"docs/decisions.md", "In the demo, 427 calls.", ""},
		{"README.md", "TTL 5 s, 200 ms without one, 20 services, 8 calls at a time, 1 000 callers", ""},
		{"README.md", "etcd v1.2.3, 3.5.36 and go1.26.8, D150, demo5, x427, 427ms-ago", ""},
		{"README.md", "Run `go run . -n 427` first.\n\n```\n427 calls\n```", ""},
		{"README.md", "<!-- 427 calls -->", ""},
		{"README.md", "a 60 s outage costs about 60 `GetService` calls, 50 RPCs per second", ""},
	} {
		docs := map[string]string{}
		for k, v := range everyBlock {
			docs[k] = v
		}
		docs[tc.path] = tc.text + "\n\n" + docs[tc.path]
		got := problemsOf(t, rendered(t, docs))
		if tc.want == "" {
			wantProblems(t, got)
		} else {
			wantProblems(t, got, tc.want)
		}
	}
}

// numbers reads figures as the documents write them, and their values.
func TestNumbers(t *testing.T) {
	for line, want := range map[string][]string{
		"12 019 (3.6 %) and 5.17 ms, 2.96 s": {"count 12019", "percent 3.6", "time 5.17e+06", "time 2.96e+09"},
		"1,199 RPCs, 49×, 2.1 KB, 909 ns":    {"count 1199", "ratio 49", "size 2.1e+03", "time 909"},
		"5 services, 42s, 100ms, 3rd":        {"count 5", "time 4.2e+10", "time 1e+08"},
		"v4.11.0, 3.5.36, go1.26.8, D150":    nil,
	} {
		var got []string
		for _, n := range numbers(line) {
			got = append(got, n.key())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", line, got, want)
		}
	}
	for s, want := range map[string]int{"427": 3, "12019": 5, "5.00": 1, "200": 1, "0.08": 1, "21.4": 3, "0.0512": 3} {
		if got := significant(s); got != want {
			t.Errorf("significant(%q) = %d, want %d", s, got, want)
		}
	}
}

// The documents' formats.
func TestFormats(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{count(5141), "5 141"},
		{count(1234567), "1 234 567"},
		{count(427), "427"},
		{measured(5172345), "5.17 ms"},
		{measured(21370000), "21.4 ms"},
		{measured(159300000), "159 ms"},
		{measured(5004000000), "5.00 s"},
		{measured(0), "0"},
		{setting(1250000000), "1.25 s"},
		{setting(200000000), "200 ms"},
		{setting(0), "0 s"},
		{benchTime(18.4), "18 ns"},
		{benchTime(1070), "1.1 µs"},
		{benchTime(9960), "10 µs"},
		{benchTime(200206000), "200 ms"},
		{kilobytes(2097), "2.1 KB"},
		{ratio(3.75), "3.8×"},
		{ratio(319), "319×"},
		{percent(256, 299474), "0.09 %"},
		{percent(11832, 331639), "3.6 %"},
		{percent(999, 1000), "99 %"},
		{plural(1, "alloc") + ", " + plural(0, "alloc"), "1 alloc, 0 allocs"},
		{joinCells("", "a", ""), "| | a | |"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}

// The runs' blocks show what the runs measured, each client's times and
// trials, the settings, and where and when each run was made.
func TestRunsBlocks(t *testing.T) {
	root := rendered(t, everyBlock)
	wantProblems(t, problemsOf(t, root))
	for path, wants := range map[string][]string{
		"README.md": {
			"| 20 nodes written in one etcd transaction: all served after | 4.20 µs | > 5 s (2 of 21) | > 5 s (2 of 21) |\n",
			"| a new instance registered 500 ms after a 10 s etcd outage: served within 1.5 s | 3 of 3 trials, at most 484 ms | 1 of 3 | 1 of 3 |\n",
			"One run each of `TestTwentyNodesInOneTransaction` and `TestServerRegisteredAfterAnEtcdRestart` on 2026-01-02 (go1.26.8, linux/amd64, 2 CPUs, without the race detector; `docs/figures-integration.json`).",
			"did as well (<!-- figures:etcd-gomicro-over-module -->11.3 µs; 3 of 3<!-- /figures -->)",
			"| 3 of 3 trials, 192–348 ms | 0 of 3 | 0 of 3 | 1 of 3 |\n",
		},
		"integration/README.md": {
			"| regcache, etcd module (asserted) | 4.20 µs | 2.00 µs / 3.00 µs / 7.50 ms | 3 of 3 | 2.10 µs / 79.2 ms / 484 ms | 3 of 3 |\n",
			"| regcache, plugin | > 5 s (2 of 21) | 2.00 µs / 3.00 µs / 5.50 ms | 3 of 3 | 3.00 µs / 3.63 s / > 5 s | 1 of 3 |\n",
			"`TestServerRegisteredAfterAnEtcdRestart` (outages of 2 s and 10 s) on",
			"took <!-- figures:etcd-restart-registers -->1.50 to 5.10 ms<!-- /figures --> after",
			"| go-micro cache, nats module | 1.20 s | > 3 s | > 3 s | 1 of 3 |\n",
			"| regcache, one-line wiring (go-micro v4.11.0) | 5 918 of 5 973 | 300 ms | 55 | 6 234 of 7 739 |\n",
			"| go-micro v5.30.0 default selector | 5 960 of 5 970 | 33.0 ms | 6 | 7 100 of 7 700 |\n",
			"| regcache, one-line wiring (go-micro v5.30.0) | 0 of 5 970 | none | 12 345 | 7 000 of 7 700 |\n",
			"Every lease revoked for 30 s while the 60 servers (20 services) kept serving, 200 RPCs a second through each client; " +
				"the servers registered again 1.90 s (go-micro v4.11.0) and 8.76 s (go-micro v5.30.0) after the loss. " +
				"One run each of `TestMassLoss` in integration (go-micro v4.11.0) and integration5 (go-micro v5.30.0) on 2026-01-02 " +
				"(go1.26.8, linux/amd64, 2 CPUs, without the race detector; `docs/figures-integration.json`).",
			"| go-micro v4.11.0 default selector | 0 | 199 |\n| regcache, one-line wiring (go-micro v5.30.0) | 1 | 0 |\n",
			"| regcache, one-line wiring (go-micro v4.11.0) | 2 | 3 | 314 ms |\n",
			"| go-micro v5.30.0 default selector | 0 | 0 | none |\n",
		},
		"docs/streams.md": {
			"in <!-- figures:nats-restart-summary -->3 of 3 trials, against 0 of 3 over the plugin, through regcache or go-micro's cache<!-- /figures -->",
		},
		"demo/README.md": {
			"takes about <!-- figures:demo-etcd-took -->93<!-- /figures --> seconds, <!-- figures:demo-etcd-storm-took -->43<!-- /figures --> of them",
			"| client | trial 1 | trial 2 | trial 3 | trial 4 | trial 5 | median | within 1.5 s |\n| --- | --: | --: | --: | --: | --: | --: | --: |\n",
			"| go-micro cache, plugin | 5.40 ms | 7.00 µs | 5.30 ms | 3.50 s | 10.0 µs | 5.30 ms | 4 of 5 |\n",
			": etcd down for 5 s, the new instance registered 500 ms after it served again, its own `Register` taking 1.60 to 2.30 ms.",
			"Late in <!-- figures:demo-etcd-plugin-late -->4 of 5 trials and go-micro's in 1<!-- /figures -->",
			"within <!-- figures:demo-etcd-module-range -->112 to 260 ms<!-- /figures -->",
		},
	} {
		text := read(t, filepath.Join(root, path))
		for _, want := range wants {
			if !strings.Contains(text, want) {
				t.Errorf("the rendered %s lacks %q:\n%s", path, want, text)
			}
		}
	}

	// A changed time, or a client that no longer serves within the bound,
	// fails every block that shows it.
	root = rendered(t, everyBlock)
	edit(t, filepath.Join(root, integrationFile), `"484.3ms"`, `"1.6s"`)
	wantProblems(t, problemsOf(t, root),
		"README.md:48: block etcd-comparison is not what the sources render",
		"integration/README.md:7: block etcd-module-table is not what the sources render")
	root = rendered(t, everyBlock)
	edit(t, filepath.Join(root, integrationFile), `"go-micro cache, nats plugin",
          "took": [
            null,
            null,
            null`, `"go-micro cache, nats plugin",
          "took": [
            "1s",
            null,
            null`)
	wantProblems(t, problemsOf(t, root),
		"README.md:63: block nats-comparison is not what the sources render",
		"integration/README.md:24: block nats-restart-table is not what the sources render",
		"docs/streams.md:3: block nats-restart-summary is not what the sources render")
}

// A run that lacks a client or has a field the reader does not know is an
// error naming the file and the run; so is a run in two files.
func TestRunsThatDoNotReadAreErrors(t *testing.T) {
	for _, tc := range []struct{ file, old, new, want string }{
		{integrationFile, `"name": "regcache, plugin"`, `"name": "regcache, other plugin"`, `run "etcd-restart-10s" (docs/figures-integration.json) has no client "regcache, plugin"`},
		{integrationFile, `"nodes": 21`, `"nodes": 21, "extra": 1`, `docs/figures-integration.json: json: unknown field "extra"`},
		{demoEtcdFile, `"id": "demo-etcd-restart"`, `"id": "nats-restart"`, `docs/figures-demo-etcd.json: run "nats-restart" is in docs/figures-integration.json too`},
		{integrationFile, `"served": [
            2
          ]`, `"served": [2, 2]`, `run "etcd-twenty-nodes": client "regcache, plugin" has 1 trials, 2 nodes served`},
		{integrationFile, `"took": null,
          "mass_loss": {
            "rpcs": 7739`, `"took": ["1s"],
          "mass_loss": {
            "rpcs": 7739`, `run "mass-loss" of a mass loss: client "regcache, one-line wiring" has 1 trials and no mass loss figures`},
		{integrationFile, `"loss": "30s"`, `"loss": "0s"`, `run "mass-loss": client "regcache, one-line wiring" has 0 trials`},
	} {
		root := fixture(t, everyBlock)
		edit(t, filepath.Join(root, tc.file), tc.old, tc.new)
		if _, err := renderAll(root); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
}

// The check reads, for figures typed outside the blocks, the paragraphs
// of docs/ that name the demo or a test of the runs, and the sections of
// integration/README.md that hold a block; the rest of either is the
// record of other runs.
func TestWhereTypedFiguresAreRead(t *testing.T) {
	for _, tc := range []struct {
		path, old, new string
		want           string // in the one problem; "" for none
	}{
		{"integration/README.md", "Broken.", "Broken: 20 of 20 trials, 484 ms.", ""},
		{"integration/README.md", "Run the tests.", "Run the tests: 20 of 20 trials, 484 ms.", ""},
		{"integration/README.md", "after the restart.", "after the restart, within 484 ms.", `integration/README.md:20: "484 ms" is the figure "484 ms" of block`},
		{"integration/README.md", "after the restart.", "after the restart, in 7 of 20 trials.", `integration/README.md:20: "7 of 20 trials" reads as a measured figure`},
		{"docs/streams.md", "(`TestNodeRegisteredAfterANATSRestart`).", "(`TestNodeRegisteredAfterANATSRestart`), 348 ms at most.", `docs/streams.md:3: "348 ms" is the figure`},
		{"docs/streams.md", "# Streams", "# Streams\n\nA soak run made 348 ms and 20 of 20 trials.", ""},
		{"README.md", "On NATS:", "On NATS, 20 of 20 trials:", `README.md:61: "20 of 20 trials" reads as a measured figure`},
	} {
		docs := map[string]string{}
		for k, v := range everyBlock {
			docs[k] = v
		}
		root := rendered(t, docs)
		edit(t, filepath.Join(root, tc.path), tc.old, tc.new)
		got := problemsOf(t, root)
		if tc.want == "" {
			wantProblems(t, got)
		} else {
			wantProblems(t, got, tc.want)
		}
	}
}

// The README's versions are those that the go.mod files require, Go's
// their go directives, or a release of ours; code is not read.
func TestVersionsOfTheREADME(t *testing.T) {
	for text, want := range map[string]string{
		"go-micro.dev/v4 v1.2.3 on Go 1.25, regcache v0.1.0": "",
		"`go get x@v9.9.9`, <!-- v9.9.9 -->":                 "",
		"nats-server v2.15.3":                                "README.md:1: v2.15.3 is no version that the go.mod files of internal/figures/versions.go require",
		"the library needs Go 1.22":                          "README.md:1: Go 1.22 is no go directive of the go.mod files of internal/figures/versions.go (1.25)",
	} {
		docs := map[string]string{}
		for k, v := range everyBlock {
			docs[k] = v
		}
		docs["README.md"] = text + "\n\n" + docs["README.md"]
		got := problemsOf(t, rendered(t, docs))
		if want == "" {
			wantProblems(t, got)
		} else {
			wantProblems(t, got, want)
		}
	}
	root := fixture(t, everyBlock)
	write(t, filepath.Join(root, "gomicro5/go.newest.mod"), "module x\n\ngo 1.25\n")
	if _, err := renderAll(root); err == nil || !strings.Contains(err.Error(), "gomicro5/go.newest.mod requires no go-micro.dev/v5") {
		t.Errorf("error %v", err)
	}
}
