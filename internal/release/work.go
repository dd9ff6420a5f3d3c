package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A work is a temporary place to act as a user: a proxy tree of the
// library modules, a module cache of its own (so that a module of ours
// published at a version already seen is never served from an older
// extraction), and the environment of the go command that uses them.
type work struct {
	r     *repo
	tmp   string
	proxy string
	env   []string
}

func newWork(r *repo, tmp string) (*work, error) {
	w := &work{r: r, tmp: tmp, proxy: filepath.Join(tmp, "proxy")}
	cache, err := goEnv("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	upstream, err := goEnv("GOPROXY")
	if err != nil {
		return nil, err
	}
	// Our modules from the tree just published; every other module from
	// this machine's module cache, whose download directory is a proxy
	// tree too, then from the proxy the machine uses.
	proxies := []string{fileURL(w.proxy), fileURL(filepath.Join(cache, "cache", "download"))}
	if upstream != "" && upstream != "off" {
		proxies = append(proxies, upstream)
	}
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "GOWORK", "GOFLAGS", "GOPROXY", "GONOSUMDB", "GONOSUMCHECK", "GOPRIVATE", "GOMODCACHE", "GOTOOLCHAIN":
			continue
		}
		w.env = append(w.env, kv)
	}
	w.env = append(w.env,
		"GOWORK=off",
		"GOFLAGS=-modcacherw",
		"GOPROXY="+strings.Join(proxies, ","),
		"GONOSUMDB="+prefix, // not in the checksum database until published
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOTOOLCHAIN=local",
	)
	return w, nil
}

func fileURL(path string) string { return "file://" + filepath.ToSlash(path) }

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	return strings.TrimSpace(string(out)), err
}

// goCmd runs the go command in dir with w's environment and returns its
// combined output; an error carries the output.
func (w *work) goCmd(dir string, args ...string) (string, error) {
	fmt.Printf("== go %s (%s)\n", strings.Join(args, " "), w.rel(dir))
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = w.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("go %s in %s: %v\n%s", strings.Join(args, " "), w.rel(dir), err, out.String())
	}
	return out.String(), nil
}

// rel names dir for a reader: relative to the repository or to the
// temporary directory.
func (w *work) rel(dir string) string {
	for _, base := range []string{w.r.root, w.tmp} {
		if r, err := filepath.Rel(base, dir); err == nil && !strings.HasPrefix(r, "..") {
			if base == w.tmp {
				return "$TMP/" + r
			}
			return r
		}
	}
	return dir
}
