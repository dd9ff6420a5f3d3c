// Command v5user checks that a user's module on a given go-micro v5 can
// use regcache's v5 flavour: it writes a module in a temporary directory
// that requires go-micro.dev/v5 at that version, imports every public
// package of gomicro5/ (the library, gomicro, admin, etcd, nats,
// watchscope, and the modules gomicro5/otel and gomicro5/prometheus), and
// points each regcache module at this checkout with a replace. Then, with
// GOWORK=off and GOFLAGS=-mod=mod, as a user's build runs, it runs
//
//	go mod tidy     (which follows the tests of the packages imported,
//	                 down to the ones that only tests import)
//	go list -m go-micro.dev/v5   (the version selected must be the one asked)
//	go build ./...
//
// and exits 1, naming the step and its output, if one fails.
//
// Usage, from the repository's root:
//
//	go run ./internal/v5user -go-micro v5.30.0   # the newest v5, which the tests run on
//	go run ./internal/v5user -go-micro min       # the oldest the library supports: gomicro5/go.mod's requirement
//
// With "min", the version is the one gomicro5/go.mod requires, and the
// check also fails if docs/gomicro5.md does not state it as the minimum.
// The published path (a module proxy, no replace) is checked elsewhere;
// this one checks the code and the go.mod files of the checkout.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

const rootModule = "github.com/regcache/cache"

// flavour is the folder of the v5 flavour, relative to the repository's
// root; its public packages are those a user can import.
const flavour = "gomicro5"

func main() {
	version := flag.String("go-micro", "", `the go-micro.dev/v5 version the user's module requires ("min": gomicro5/go.mod's)`)
	root := flag.String("root", ".", "the repository's root")
	keep := flag.Bool("keep", false, "keep the temporary module, and print where it is")
	flag.Parse()
	if *version == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/v5user -go-micro VERSION|min [-root DIR] [-keep]")
		os.Exit(2)
	}
	if err := run(*root, *version, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "v5user:", err)
		os.Exit(1)
	}
}

func run(root, version string, keep bool) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	if version == "min" {
		if version, err = minimum(root); err != nil {
			return err
		}
	}
	pkgs, mods, err := publicPackages(root)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "regcache-v5user-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("v5user: the module is in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	goDirective, err := goLine(filepath.Join(root, flavour, "go.mod"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod(root, version, goDirective, mods)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(mainGo(pkgs)), 0o644); err != nil {
		return err
	}
	fmt.Printf("v5user: a module on go-micro.dev/v5 %s importing %d packages of %s/ (%s)\n", version, len(pkgs), flavour, strings.Join(mods, ", "))
	if _, err := step(dir, "go", "mod", "tidy"); err != nil {
		return err
	}
	out, err := step(dir, "go", "list", "-m", "go-micro.dev/v5")
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "go-micro.dev/v5")); got != version {
		return fmt.Errorf("the module asked for go-micro.dev/v5 %s and builds with %s: a module of %s/ requires more", version, got, flavour)
	}
	if _, err := step(dir, "go", "build", "./..."); err != nil {
		return err
	}
	fmt.Printf("v5user: ok, go-micro.dev/v5 %s\n", version)
	return nil
}

// step runs a command in dir as a user's build runs it: no workspace, and
// go.mod updated as needed.
func step(dir string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	line := strings.Join(append([]string{name}, args...), " ")
	fmt.Printf("== %s (%s)\n", line, time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		return "", fmt.Errorf("%s: %v\n%s", line, err, out.String())
	}
	return out.String(), nil
}

// publicPackages lists the import paths of the packages under flavour/
// that a user can import (none under an internal/ or testdata/ folder,
// and none of tests alone), and the modules they are in, by their folder
// relative to root.
func publicPackages(root string) (pkgs, mods []string, err error) {
	seen := map[string]bool{}
	err = filepath.WalkDir(filepath.Join(root, flavour), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch d.Name() {
			case "internal", "testdata":
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				mods = append(mods, rel)
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".go") || strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		if dir := filepath.ToSlash(filepath.Dir(rel)); !seen[dir] {
			seen[dir] = true
			pkgs = append(pkgs, rootModule+"/"+dir)
		}
		return nil
	})
	sort.Strings(pkgs)
	sort.Strings(mods)
	if err == nil && len(mods) == 0 {
		err = fmt.Errorf("no go.mod under %s", filepath.Join(root, flavour))
	}
	return pkgs, mods, err
}

// goMod is the user's go.mod: go-micro.dev/v5 at version, and each
// regcache module of mods (folders relative to root) replaced by the
// checkout's.
func goMod(root, version, goDirective string, mods []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "module example.com/regcacheuser\n\ngo %s\n\nrequire go-micro.dev/v5 %s\n\n", goDirective, version)
	for _, m := range mods {
		fmt.Fprintf(&b, "replace %s/%s => %s\n", rootModule, m, filepath.Join(root, filepath.FromSlash(m)))
	}
	return b.String()
}

// mainGo is the user's program: it imports every package of pkgs.
func mainGo(pkgs []string) string {
	var b strings.Builder
	b.WriteString("// Command regcacheuser imports every public package of regcache's go-micro v5 flavour.\npackage main\n\nimport (\n")
	for _, p := range pkgs {
		fmt.Fprintf(&b, "\t_ %q\n", p)
	}
	b.WriteString(")\n\nfunc main() {}\n")
	return b.String()
}

var (
	requireV5 = regexp.MustCompile(`(?m)^\s*(?:require\s+)?go-micro\.dev/v5\s+(v\S+)`)
	goDir     = regexp.MustCompile(`(?m)^go\s+(\S+)`)
)

// minimum is the go-micro v5 that gomicro5/go.mod requires, which
// docs/gomicro5.md must state as the oldest supported.
func minimum(root string) (string, error) {
	mod, err := os.ReadFile(filepath.Join(root, flavour, "go.mod"))
	if err != nil {
		return "", err
	}
	m := requireV5.FindSubmatch(mod)
	if m == nil {
		return "", errors.New(flavour + "/go.mod does not require go-micro.dev/v5")
	}
	v := string(m[1])
	doc, err := os.ReadFile(filepath.Join(root, "docs", "gomicro5.md"))
	if err != nil {
		return "", err
	}
	if want := "oldest it supports is go-micro.dev/v5 " + v; !bytes.Contains(bytes.Join(bytes.Fields(doc), []byte(" ")), []byte(want)) {
		return "", fmt.Errorf("%s/go.mod requires go-micro.dev/v5 %s, and docs/gomicro5.md does not say %q", flavour, v, want)
	}
	return v, nil
}

func goLine(path string) (string, error) {
	mod, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	m := goDir.FindSubmatch(mod)
	if m == nil {
		return "", fmt.Errorf("%s has no go directive", path)
	}
	return string(m[1]), nil
}
