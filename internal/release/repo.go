package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// prefix is the module path of the library, and of every module of the
// repository under it.
const prefix = "github.com/regcache/cache"

// A repo is the repository: its modules, which of them a user imports,
// and the version at which they require each other.
type repo struct {
	root    string
	modules []*mod // every module, sorted by directory
	library []*mod // the modules the root go.work uses
	version string // the version every requirement of a module of ours names
}

// A mod is one module of the repository.
type mod struct {
	dir  string // relative to the root, "." for the root
	path string
	file *modfile.File
}

// findRepo returns dir, or the nearest directory from the working directory
// up that has a go.work and the library's go.mod.
func findRepo(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if f, err := modfile.ParseLax("go.mod", readOr(filepath.Join(d, "go.mod")), nil); err == nil && f.Module != nil && f.Module.Mod.Path == prefix {
			if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
				return d, nil
			}
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no repository root (a go.work next to the go.mod of %s) from the working directory up", prefix)
		}
		d = parent
	}
}

func readOr(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

// loadRepo reads every go.mod of the repository and its go.work, and
// checks the rules a user's go get relies on: no replace directive of a
// module of ours, and one version for every requirement of one.
func loadRepo(root string) (*repo, error) {
	r := &repo{root: root}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		r.modules = append(r.modules, &mod{dir: filepath.ToSlash(rel), path: f.Module.Mod.Path, file: f})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(r.modules, func(i, j int) bool { return r.modules[i].dir < r.modules[j].dir })

	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	byDir := map[string]*mod{}
	for _, m := range r.modules {
		byDir[m.dir] = m
	}
	for _, u := range wf.Use {
		m := byDir[filepath.ToSlash(filepath.Clean(u.Path))]
		if m == nil {
			return nil, fmt.Errorf("go.work uses %s, which has no go.mod", u.Path)
		}
		r.library = append(r.library, m)
	}

	var problems []string
	versions := map[string][]string{}
	for _, m := range r.modules {
		for _, rep := range m.file.Replace {
			if strings.HasPrefix(rep.Old.Path, prefix) {
				problems = append(problems, fmt.Sprintf("%s/go.mod replaces %s: Go ignores it in a dependency, so a user's build differs from ours; its go.work is the way", m.dir, rep.Old.Path))
			}
		}
		for _, req := range m.file.Require {
			if !isOurs(req.Mod.Path) {
				continue
			}
			if isServer(m.dir) {
				problems = append(problems, fmt.Sprintf("%s/go.mod requires %s: a module of %s builds a registry server alone (GOWORK=off), and requires no module of ours", m.dir, req.Mod.Path, serversDir))
				continue
			}
			versions[req.Mod.Version] = append(versions[req.Mod.Version], m.dir+" requires "+req.Mod.Path)
		}
	}
	if len(versions) != 1 {
		for v, who := range versions {
			problems = append(problems, fmt.Sprintf("version %s: %s", v, strings.Join(who, "; ")))
		}
		if len(versions) == 0 {
			problems = append(problems, "no module requires another module of the repository")
		}
	}
	for v := range versions {
		r.version = v
	}
	if !semver.IsValid(r.version) || semver.Prerelease(r.version) != "" && len(versions) == 1 {
		problems = append(problems, fmt.Sprintf("the modules require each other at %q, not a release version", r.version))
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("the modules are not publishable as they are:\n\t%s", strings.Join(problems, "\n\t"))
	}
	return r, nil
}

// serversDir holds the modules from which `make servers` builds the
// registry servers that the tests start as child processes.
const serversDir = "integration/servers"

// isServer tells whether the module in dir (relative to the root) is one
// of serversDir.
func isServer(dir string) bool { return strings.HasPrefix(dir, serversDir+"/") }

// isOurs tells whether path is a module of the repository.
func isOurs(path string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// isLibrary tells whether path is a module the root go.work uses.
func (r *repo) isLibrary(path string) bool {
	for _, m := range r.library {
		if m.path == path {
			return true
		}
	}
	return false
}
