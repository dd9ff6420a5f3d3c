package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tidy runs go mod tidy -diff in every module of the repository, as its
// own build sees it (no workspace), with the library modules from w's
// proxy: it fails if tidy would change a go.mod, or a go.sum line of a
// module of others.
//
// A go.sum holds no line for a module of ours: the workspace builds them
// from the tree, and their hashes are known only once the tree is
// published, at each release. tidy -diff names them; they are left out.
func (r *repo) tidy(w *work) error {
	var bad []string
	for _, m := range r.modules {
		sum, _ := os.ReadFile(filepath.Join(r.root, m.dir, "go.sum"))
		for _, line := range strings.Split(string(sum), "\n") {
			if isOurs(strings.SplitN(line, " ", 2)[0]) {
				bad = append(bad, fmt.Sprintf("%s/go.sum: %s (a hash of a module of ours, which the workspace builds from the tree)", m.dir, line))
			}
		}
		out, _ := w.goCmd(filepath.Join(r.root, m.dir), "mod", "tidy", "-diff")
		var diff []string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "go: ") {
				if !strings.HasPrefix(line, "go: downloading ") {
					diff = append(diff, line)
				}
				continue
			}
			if strings.HasPrefix(line, "+++") || strings.HasPrefix(line, "---") || len(line) == 0 || (line[0] != '+' && line[0] != '-') {
				continue
			}
			if isOurs(strings.Fields(line[1:] + " x")[0]) {
				continue
			}
			diff = append(diff, line)
		}
		if len(diff) > 0 {
			bad = append(bad, fmt.Sprintf("%s: go mod tidy would change:\n\t\t%s", m.dir, strings.Join(diff, "\n\t\t")))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("not tidy:\n\t%s", strings.Join(bad, "\n\t"))
	}
	fmt.Printf("== %d modules tidy\n", len(r.modules))
	return nil
}

// tidyWrite runs go mod tidy in every module, as tidy checks it, and
// takes the lines of our modules out of each go.sum.
func (r *repo) tidyWrite(w *work) error {
	for _, m := range r.modules {
		dir := filepath.Join(r.root, m.dir)
		if _, err := w.goCmd(dir, "mod", "tidy"); err != nil {
			return err
		}
		path := filepath.Join(dir, "go.sum")
		sum, err := os.ReadFile(path)
		if err != nil {
			continue // a module with no requirement has no go.sum
		}
		var keep []string
		for _, line := range strings.Split(strings.TrimSuffix(string(sum), "\n"), "\n") {
			if !isOurs(strings.SplitN(line, " ", 2)[0]) {
				keep = append(keep, line)
			}
		}
		if err := os.WriteFile(path, []byte(strings.Join(keep, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
