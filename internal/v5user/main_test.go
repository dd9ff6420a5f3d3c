package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The user's module imports every package a user can import, and no
// internal one, nor a folder of tests alone; each module under gomicro5/
// gets its replace.
func TestPublicPackagesAndModules(t *testing.T) {
	root := t.TempDir()
	write(t, root, map[string]string{
		"gomicro5/go.mod":                   "module github.com/regcache/cache/gomicro5\n\ngo 1.25\n\nrequire go-micro.dev/v5 v5.12.0\n",
		"gomicro5/cache.go":                 "package cache\n",
		"gomicro5/cache_test.go":            "package cache\n",
		"gomicro5/admin/page.go":            "package admin\n",
		"gomicro5/internal/core/core.go":    "package core\n",
		"gomicro5/onlytests/x_test.go":      "package onlytests\n",
		"gomicro5/otel/go.mod":              "module github.com/regcache/cache/gomicro5/otel\n",
		"gomicro5/otel/register.go":         "package otel\n",
		"gomicro5/otel/testdata/x/x.go":     "package x\n",
		"gomicro5/prometheus/go.mod":        "module github.com/regcache/cache/gomicro5/prometheus\n",
		"gomicro5/prometheus/collector.go":  "package prometheus\n",
		"gomicro5/prometheus/internal/a.go": "package a\n",
	})
	pkgs, mods, err := publicPackages(root)
	if err != nil {
		t.Fatal(err)
	}
	wantPkgs := []string{
		"github.com/regcache/cache/gomicro5",
		"github.com/regcache/cache/gomicro5/admin",
		"github.com/regcache/cache/gomicro5/otel",
		"github.com/regcache/cache/gomicro5/prometheus",
	}
	if !reflect.DeepEqual(pkgs, wantPkgs) {
		t.Errorf("packages %q, want %q", pkgs, wantPkgs)
	}
	if want := []string{"gomicro5", "gomicro5/otel", "gomicro5/prometheus"}; !reflect.DeepEqual(mods, want) {
		t.Errorf("modules %q, want %q", mods, want)
	}
	mod := goMod(root, "v5.30.0", "1.25", mods)
	for _, want := range []string{"require go-micro.dev/v5 v5.30.0", "replace github.com/regcache/cache/gomicro5/otel => " + filepath.Join(root, "gomicro5", "otel")} {
		if !strings.Contains(mod, want) {
			t.Errorf("go.mod lacks %q:\n%s", want, mod)
		}
	}
}

// The minimum is gomicro5/go.mod's requirement, and the check fails when
// the docs state another.
func TestMinimumIsTheRequirementTheDocsState(t *testing.T) {
	root := t.TempDir()
	write(t, root, map[string]string{
		"gomicro5/go.mod":  "module github.com/regcache/cache/gomicro5\n\ngo 1.25\n\nrequire (\n\tgithub.com/x/y v1.0.0\n\tgo-micro.dev/v5 v5.12.0\n)\n",
		"docs/gomicro5.md": "The oldest it supports is\ngo-micro.dev/v5 v5.12.0, and\n",
	})
	if v, err := minimum(root); err != nil || v != "v5.12.0" {
		t.Fatalf("minimum = %q, %v; want v5.12.0", v, err)
	}
	write(t, root, map[string]string{"docs/gomicro5.md": "The oldest it supports is go-micro.dev/v5 v5.8.0.\n"})
	if _, err := minimum(root); err == nil || !strings.Contains(err.Error(), "v5.12.0") {
		t.Fatalf("minimum with docs stating another version: %v, want an error naming v5.12.0", err)
	}
}
