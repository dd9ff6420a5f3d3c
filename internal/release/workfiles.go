package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// A go.work that uses a module of ours also replaces it, at the version
// the modules require each other at, with the same directory. Without
// that, the go command looks up that version's go.mod, which exists only
// once it is published, wherever the graph names it.

// workFiles returns every go.work of the repository, relative to its root.
func (r *repo) workFiles() ([]string, error) {
	var out []string
	err := filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != r.root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.work" {
			rel, _ := filepath.Rel(r.root, p)
			out = append(out, rel)
		}
		return nil
	})
	return out, err
}

// workText returns the text the go.work at rel should have at version v:
// its own, with a replace of each module of ours it uses, and no other.
func (r *repo) workText(rel, v string) ([]byte, []byte, error) {
	path := filepath.Join(r.root, rel)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	wf, err := modfile.ParseWork(rel, data, nil)
	if err != nil {
		return nil, nil, err
	}
	byDir := map[string]*mod{}
	for _, m := range r.modules {
		byDir[m.dir] = m
	}
	for _, rep := range wf.Replace {
		if err := wf.DropReplace(rep.Old.Path, rep.Old.Version); err != nil {
			return nil, nil, err
		}
	}
	base := filepath.Dir(rel)
	for _, u := range wf.Use {
		m := byDir[filepath.ToSlash(filepath.Clean(filepath.Join(base, u.Path)))]
		if m == nil {
			return nil, nil, fmt.Errorf("%s uses %s, which has no go.mod", rel, u.Path)
		}
		if isOurs(m.path) && r.isLibrary(m.path) {
			if err := wf.AddReplace(m.path, v, u.Path, ""); err != nil {
				return nil, nil, err
			}
		}
	}
	wf.SortBlocks()
	wf.Cleanup()
	return data, modfile.Format(wf.Syntax), nil
}

// checkWorkFiles fails, naming them, if a go.work is not as workText
// writes it.
func (r *repo) checkWorkFiles() error {
	files, err := r.workFiles()
	if err != nil {
		return err
	}
	var stale []string
	for _, rel := range files {
		have, want, err := r.workText(rel, r.version)
		if err != nil {
			return err
		}
		if !bytes.Equal(have, want) {
			stale = append(stale, rel)
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("%s: not as `go run ./internal/release work` writes them (a replace of each module of ours used, at %s)", strings.Join(stale, ", "), r.version)
	}
	return nil
}

// writeWorkFiles writes every go.work as workText gives it at v.
func (r *repo) writeWorkFiles(v string) error {
	files, err := r.workFiles()
	if err != nil {
		return err
	}
	for _, rel := range files {
		have, want, err := r.workText(rel, v)
		if err != nil {
			return err
		}
		if !bytes.Equal(have, want) {
			if err := os.WriteFile(filepath.Join(r.root, rel), want, 0o644); err != nil {
				return err
			}
			fmt.Printf("%s: written\n", rel)
		}
	}
	return nil
}
