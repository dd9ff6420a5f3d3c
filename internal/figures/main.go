// Command figures puts the measured figures into the documents, from one
// source each: the demo's from docs/figures.json, which `make figures`
// writes from one run of the demo and of its -phases runs; the
// integration tests' from docs/figures-integration.json, which `make
// figures-integration` has them write; the restart scenario of `make
// demo-etcd` from docs/figures-demo-etcd.json (`make figures-demo-etcd`);
// the benchmarks' from the tables of BENCHMARKS.md, which `make bench`
// prints. It also holds the versions that the README names to the go.mod
// files they come from (versions.go).
//
// A document shows a figure between markers, which render as nothing:
// a table between two lines of their own,
//
//	<!-- figures:demo-comparison -->
//	...
//	<!-- /figures -->
//
// or a figure within a sentence, <!-- figures:demo-took -->43<!-- /figures -->.
// The names are the keys of renderers (render.go).
//
// Without flags, it checks the README, demo/README.md, docs/ and
// integration/README.md: every marked block must be what the sources
// render, every block must be shown somewhere, and no measured figure may
// be typed outside a block (see outside). docs/decisions.md, a dated
// record of the figures that decided, is not read. It exits with status 1, naming each file and
// block, if any check fails; its test runs the same checks in `make test`.
//
// Usage, from anywhere in the repository:
//
//	go run ./internal/figures          # check
//	go run ./internal/figures -write   # render every marked block from the sources
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// regenerate tells how to make the documents agree with the sources.
const regenerate = "run `go run ./internal/figures -write` to render them from " + figuresFile + ", " + integrationFile + ", " +
	demoEtcdFile + " and " + benchFile + " (`make figures`, `make figures-integration` and `make figures-demo-etcd` measure anew first; see CONTRIBUTING.md)"

func main() {
	write := flag.Bool("write", false, "render every marked block of the documents from the sources")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./internal/figures [-write]\n\nChecks, or with -write renders, the figures of the README and docs.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	root, err := findRoot()
	if err != nil {
		fatal(err)
	}
	g, err := renderAll(root)
	if err != nil {
		fatal(err)
	}
	if *write {
		for _, d := range g.docs {
			if d.rendered != d.text {
				if err := os.WriteFile(filepath.Join(root, d.path), []byte(d.rendered), 0o644); err != nil {
					fatal(err)
				}
				fmt.Println("internal/figures: wrote", d.path)
			}
		}
		for i := range g.docs {
			d := &g.docs[i]
			d.text = d.rendered
			d.blocks, d.err = findBlocks(d.text)
		}
	}
	if problems := g.check(); len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "internal/figures: the documents' figures do not agree with their sources:")
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "\t"+p)
		}
		fmt.Fprintln(os.Stderr, "A marked block that differs: "+regenerate+". A figure typed outside a block: put it in one (CONTRIBUTING.md).")
		os.Exit(1)
	}
}

// doc is a document as it is, and as the sources render its blocks.
type doc struct {
	path           string // relative to the root, with slashes
	text, rendered string
	blocks         []markedBlock // of text
	// read is what the check for figures typed outside the blocks reads.
	read readMode
	err  error // of its blocks: a marker out of place
}

// readMode is what of a document the check for figures typed outside the
// blocks reads.
type readMode int

const (
	// readWhole: all of it (the README and demo/README.md).
	readWhole readMode = iota
	// readSubjects: the paragraphs that name the demo or a test whose
	// run a block shows (docs/).
	readSubjects
	// readSections: the sections, from a heading to the next of its
	// level or above, that hold a block (integration/README.md, the
	// integration suite's record, whose other figures are of other runs).
	readSections
)

// rendering is the documents with their blocks rendered.
type rendering struct {
	docs []doc
	// shown are the measured figures that the blocks show, by number.key,
	// those of three significant digits or more; unused, the blocks that
	// no document shows.
	shown  map[string]figure
	unused []string
	// subjects are what a paragraph of docs/ names to be read: the demo,
	// and the tests whose runs the blocks show.
	subjects []string
	versions versionCheck
}

// documents are the documents that may show figures: the README, the
// demo's, docs/ but decisions.md, a dated record, and the integration
// suite's.
func documents(root string) ([]doc, error) {
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	var docs []doc
	for _, name := range append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "demo", "README.md"), filepath.Join(root, "integration", "README.md")}, names...) {
		rel, _ := filepath.Rel(root, name)
		rel = filepath.ToSlash(rel)
		if rel == "docs/decisions.md" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		read := readSubjects
		switch rel {
		case "README.md", "demo/README.md":
			read = readWhole
		case "integration/README.md":
			read = readSections
		}
		docs = append(docs, doc{path: rel, text: string(b), read: read})
	}
	return docs, nil
}

// renderAll reads the sources and the documents and renders every marked
// block.
func renderAll(root string) (*rendering, error) {
	demo, err := loadFigures(filepath.Join(root, figuresFile))
	if err != nil {
		return nil, err
	}
	bench, err := loadBenches(filepath.Join(root, benchFile))
	if err != nil {
		return nil, err
	}
	runs, err := loadRuns(root, integrationFile, demoEtcdFile)
	if err != nil {
		return nil, err
	}
	docs, err := documents(root)
	if err != nil {
		return nil, err
	}
	r := &renderer{demo: demo, benches: bench, runs: runs}
	used := map[string]bool{}
	for i := range docs {
		d := &docs[i]
		d.blocks, d.err = findBlocks(d.text)
		d.rendered = d.text
		if d.err != nil {
			continue
		}
		var b strings.Builder
		at := 0
		for _, bl := range d.blocks {
			body, err := r.render(bl.name)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", d.path, bl.line, err)
			}
			used[bl.name] = true
			b.WriteString(d.text[at:bl.start])
			b.WriteString(bl.content(body))
			at = bl.end
		}
		b.WriteString(d.text[at:])
		d.rendered = b.String()
	}
	out := &rendering{docs: docs, shown: map[string]figure{}, subjects: []string{"demo"}}
	for _, run := range runs {
		if t := testOf(run); t != "" && !slices.Contains(out.subjects, t) {
			out.subjects = append(out.subjects, t)
		}
	}
	slices.Sort(out.subjects[1:])
	if out.versions, err = loadVersions(root); err != nil {
		return nil, err
	}
	for _, f := range r.measured {
		for _, n := range numbers(f.text) {
			if n.digits >= 3 {
				out.shown[n.key()] = f
			}
		}
	}
	for name := range renderers {
		if !used[name] {
			out.unused = append(out.unused, name)
		}
	}
	slices.Sort(out.unused)
	return out, nil
}

// check compares each document with its rendering and reads it for
// figures typed outside the blocks.
func (g *rendering) check() []string {
	var problems []string
	for _, d := range g.docs {
		if d.err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", d.path, d.err))
			continue
		}
		if d.rendered != d.text {
			re, _ := findBlocks(d.rendered) // same markers, in the same order
			for i, bl := range d.blocks {
				if d.text[bl.start:bl.end] != d.rendered[re[i].start:re[i].end] {
					problems = append(problems, fmt.Sprintf("%s:%d: block %s is not what the sources render", d.path, bl.line, bl.name))
				}
			}
		}
		problems = append(problems, outside(d.path, d.text, d.blocks, g.shown, d.read, g.subjects)...)
		if d.path == "README.md" {
			problems = append(problems, g.versions.check(d.path, d.text, d.blocks)...)
		}
	}
	for _, name := range g.unused {
		problems = append(problems, fmt.Sprintf("block %s is in no document: show it, or remove it from internal/figures/render.go", name))
	}
	return problems
}

// findRoot returns the folder of the root module's go.mod, from the
// working directory up.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(mod, []byte("module github.com/regcache/cache\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the github.com/regcache/cache repository")
		}
		dir = parent
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "internal/figures:", err)
	os.Exit(1)
}
