package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// publish writes every library module, as the working tree holds it, at
// r.version into out, laid out as a module proxy (the GOPROXY protocol
// over file://): <module>/@v/list, .info, .mod and .zip. The zips are made
// as the go command makes them, so a go get from out sees what a go get
// from a public proxy would once the modules are tagged: no file of a
// nested module, no file the module zip rules leave out.
func (r *repo) publish(out string) error {
	for _, m := range r.library {
		if err := r.publishOne(out, m); err != nil {
			return fmt.Errorf("publish %s: %w", m.path, err)
		}
	}
	return nil
}

func (r *repo) publishOne(out string, m *mod) error {
	mv := module.Version{Path: m.path, Version: r.version}
	escaped, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, r.version)
	info, _ := json.Marshal(struct{ Version, Time string }{r.version, time.Now().UTC().Format(time.RFC3339)})
	gomod, err := os.ReadFile(filepath.Join(r.root, m.dir, "go.mod"))
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		filepath.Join(dir, "list"): []byte(r.version + "\n"),
		base + ".info":             info,
		base + ".mod":              gomod,
	} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return err
		}
	}
	f, err := os.Create(base + ".zip")
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(f, mv, filepath.Join(r.root, m.dir)); err != nil {
		f.Close()
		return explainZip(err)
	}
	return f.Close()
}

// explainZip adds to an error of the zip rules what they are for.
func explainZip(err error) error {
	if strings.Contains(err.Error(), "file") {
		return fmt.Errorf("%w (the go command would refuse such a module zip; see golang.org/x/mod/zip)", err)
	}
	return err
}
