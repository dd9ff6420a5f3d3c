package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/semver"
)

// setVersion writes v wherever a module of the repository requires another
// module of it: the first step of a release (RELEASING.md).
func (r *repo) setVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Prerelease(v) != "" {
		return fmt.Errorf("version %q: want a release version, vMAJOR.MINOR.PATCH", v)
	}
	if semver.Major(v) != "v0" {
		return fmt.Errorf("version %s: a major version past v0 changes every module path (/v2...), which this tool does not do", v)
	}
	for _, m := range r.modules {
		changed := false
		for _, req := range m.file.Require {
			if isOurs(req.Mod.Path) && req.Mod.Version != v {
				if err := m.file.AddRequire(req.Mod.Path, v); err != nil {
					return err
				}
				changed = true
			}
		}
		if !changed {
			continue
		}
		data, err := m.file.Format()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(r.root, m.dir, "go.mod"), data, 0o644); err != nil {
			return err
		}
		fmt.Printf("%s/go.mod: requires the modules of the repository at %s\n", m.dir, v)
	}
	return r.writeWorkFiles(v)
}

// tag is the git tag of m at r.version: the version, prefixed with the
// module's directory for a module below the root (etcd/v0.1.0), as the go
// command looks up a module in a subdirectory of its repository.
func (r *repo) tag(m *mod) string {
	if m.dir == "." {
		return r.version
	}
	return m.dir + "/" + r.version
}

// checkChanges fails if CHANGES.md has no section for r.version.
func (r *repo) checkChanges() error {
	data, err := os.ReadFile(filepath.Join(r.root, "CHANGES.md"))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "## "+r.version || strings.HasPrefix(line, "## "+r.version+" ") {
			return nil
		}
	}
	return fmt.Errorf("CHANGES.md has no section \"## %s\", the version the modules require each other at", r.version)
}
