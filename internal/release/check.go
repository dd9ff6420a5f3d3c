package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// newestV5 is the newest go-micro v5 the v5 flavour is checked on, besides
// the oldest, the one gomicro5/go.mod requires.
const newestV5 = "v5.30.0"

// servers are the module paths of registry servers, which only tests
// start: no library module may require one.
var servers = []string{"go.etcd.io/etcd/server/v3", "github.com/nats-io/nats-server/v2"}

// check acts as a user of the published modules, in fresh modules outside
// the checkout:
//   - on go-micro v4: go get every v4 module, build and vet every Example
//     of them (in which every Go snippet of the README stands);
//   - on go-micro v5, at the oldest version gomicro5 supports and at the
//     newest: the same with every v5 module, after go mod tidy;
//   - for each library module alone: the module graph a user gets, which
//     must not have a module of ours require a registry server.
func (r *repo) check(w *work) error {
	var v4, v5 []*mod
	for _, m := range r.library {
		if strings.HasPrefix(m.path, prefix+"/gomicro5") {
			v5 = append(v5, m)
		} else {
			v4 = append(v4, m)
		}
	}
	oldest, err := r.requiredVersion("gomicro5", "go-micro.dev/v5")
	if err != nil {
		return err
	}
	// Every step runs, so that one run names every failure.
	var failed []string
	note := func(err error) {
		if err != nil {
			fmt.Println(err)
			failed = append(failed, strings.SplitN(err.Error(), "\n", 2)[0])
		}
	}
	note(r.checkChanges())
	note(w.user("user-v4", v4, "", true))
	for _, gm := range []string{oldest, newestV5} {
		note(w.user("user-v5-"+gm, v5, "go-micro.dev/v5@"+gm, false))
	}
	for _, m := range r.library {
		note(w.graph(m))
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of the user's steps failed:\n\t%s", len(failed), strings.Join(failed, "\n\t"))
	}
	fmt.Println("== every module installs from the proxy, and every snippet builds")
	return nil
}

// requiredVersion is the version of dep that the module in dir requires.
func (r *repo) requiredVersion(dir, dep string) (string, error) {
	for _, m := range r.modules {
		if m.dir != dir {
			continue
		}
		for _, req := range m.file.Require {
			if req.Mod.Path == dep {
				return req.Mod.Version, nil
			}
		}
	}
	return "", fmt.Errorf("%s/go.mod does not require %s", dir, dep)
}

// user makes a fresh module named name, go gets mods (and pin, a
// module@version, first), copies their examples into it, and builds and
// vets it. With readme, every Go snippet of the README must be in one of
// the examples.
func (w *work) user(name string, mods []*mod, pin string, readme bool) error {
	dir := filepath.Join(w.tmp, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/"+name+"\n\ngo 1.25\n"), 0o644); err != nil {
		return err
	}
	get := []string{"get"}
	if pin != "" {
		get = append(get, pin)
	}
	for _, m := range mods {
		get = append(get, m.path+"@"+w.r.version)
	}
	if _, err := w.goCmd(dir, get...); err != nil {
		return err
	}
	examples, err := w.copyExamples(dir, mods)
	if err != nil {
		return err
	}
	if readme {
		if err := w.readmeIn(examples); err != nil {
			return err
		}
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "./..."}, {"vet", "./..."}} {
		if _, err := w.goCmd(dir, args...); err != nil {
			return err
		}
	}
	if pin != "" {
		// tidy may raise what pin asked for; the check is at that version.
		at := strings.SplitN(pin, "@", 2)
		out, err := w.goCmd(dir, "list", "-m", at[0])
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]); got != at[0]+" "+at[1] {
			return fmt.Errorf("%s: built with %s, not %s", name, got, pin)
		}
	}
	return nil
}

// packageClause is a file's package clause.
var packageClause = regexp.MustCompile(`(?m)^package \w+$`)

// copyExamples copies the *example_test.go files of mods into dir, each
// as the only file of a package of its own, and returns their texts.
// They are external tests (package x_test), so they use the public API
// only, as a user's code does.
func (w *work) copyExamples(dir string, mods []*mod) ([]string, error) {
	var texts []string
	for _, m := range mods {
		root := filepath.Join(w.r.root, m.dir)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || exists(filepath.Join(p, "go.mod"))) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(d.Name(), "example_test.go") {
				return nil
			}
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(w.r.root, p)
			pkgDir := filepath.Join(dir, "examples", strings.TrimSuffix(rel, ".go"))
			if err := os.MkdirAll(pkgDir, 0o755); err != nil {
				return err
			}
			text := packageClause.ReplaceAllString(string(src), "package examples")
			texts = append(texts, text)
			return os.WriteFile(filepath.Join(pkgDir, "examples.go"), []byte(text), 0o644)
		})
		if err != nil {
			return nil, err
		}
	}
	if len(texts) == 0 {
		return nil, fmt.Errorf("no example in %d modules", len(mods))
	}
	return texts, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// readmeIn checks that every Go snippet of the README stands, line for
// line, in one of texts.
func (w *work) readmeIn(texts []string) error {
	readme, err := os.ReadFile(filepath.Join(w.r.root, "README.md"))
	if err != nil {
		return err
	}
	var trimmed []string
	for _, t := range texts {
		trimmed = append(trimmed, trimLines(t))
	}
	snippets := goBlocks(string(readme))
	if len(snippets) == 0 {
		return fmt.Errorf("README.md has no Go snippet")
	}
	for _, s := range snippets {
		found := false
		for _, t := range trimmed {
			found = found || strings.Contains(t, s)
		}
		if !found {
			return fmt.Errorf("this README snippet is in no example of the published modules:\n%s", s)
		}
	}
	fmt.Printf("== the README's %d Go snippets are in the examples built\n", len(snippets))
	return nil
}

// goBlocks returns the ```go blocks of a Markdown text, each line trimmed.
func goBlocks(md string) []string {
	var blocks, cur []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		switch t := strings.TrimSpace(line); {
		case !in && t == "```go":
			in, cur = true, nil
		case in && t == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, t)
		}
	}
	return blocks
}

func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "\n")
}

// graph makes a fresh module that requires m alone and reads the module
// graph a user of m gets: no module of ours may require a registry
// server. A server that a module of others requires (a plugin's go.mod)
// is named, not refused.
func (w *work) graph(m *mod) error {
	name := "graph-" + strings.NewReplacer("/", "-", ".", "root").Replace(m.dir)
	dir := filepath.Join(w.tmp, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f := &modfile.File{}
	f.AddModuleStmt("example.com/" + name)
	f.AddGoStmt("1.25")
	f.AddNewRequire(m.path, w.r.version, false)
	data, err := f.Format()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), data, 0o644); err != nil {
		return err
	}
	out, err := w.goCmd(dir, "mod", "graph")
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var ours, others []string
	for _, line := range lines {
		from, to, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		for _, s := range servers {
			if !strings.HasPrefix(to, s+"@") {
				continue
			}
			if isOurs(strings.SplitN(from, "@", 2)[0]) {
				ours = append(ours, line)
			} else {
				others = append(others, line)
			}
		}
	}
	sort.Strings(others)
	fmt.Printf("== %s: a user's module graph has %d edges", m.path, len(lines)-1)
	if len(others) > 0 {
		fmt.Printf("; a server named by a module of others: %s", strings.Join(others, "; "))
	}
	fmt.Println()
	if len(ours) > 0 {
		return fmt.Errorf("%s requires a registry server, which only its tests need: %s", m.path, strings.Join(ours, "; "))
	}
	return nil
}
