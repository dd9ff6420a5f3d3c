package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The versions that the README names (go-micro, the plugins, the
// registry servers, the metrics libraries, Go) are not figures of a run
// but facts of go.mod files: they are not rendered, and the check holds
// each to the go.mod files they come from, so that a raised dependency
// shows as a version the README names and no go.mod requires any more.
var versionSources = []struct {
	gomod   string // relative to the root
	modules []string
}{
	{"go.mod", nil}, // its go directive: the Go the library needs
	{"integration/go.mod", []string{"go-micro.dev/v4", "github.com/go-micro/plugins/v4/registry/etcd",
		"github.com/go-micro/plugins/v4/registry/nats", "github.com/go-micro/plugins/v4/registry/consul"}},
	{"gomicro5/go.mod", []string{"go-micro.dev/v5"}},        // the oldest v5 supported
	{"gomicro5/go.newest.mod", []string{"go-micro.dev/v5"}}, // the newest, which the v5 suites run on
	{"integration/servers/etcd-3.5/go.mod", []string{"go.etcd.io/etcd/server/v3"}},
	{"integration/servers/etcd-3.6/go.mod", []string{"go.etcd.io/etcd/server/v3"}},
	{"integration/servers/etcd-3.7/go.mod", []string{"go.etcd.io/etcd/server/v3"}},
	{"integration/servers/nats/go.mod", []string{"github.com/nats-io/nats-server/v2"}},
	{"internal/newest/go.mod", []string{"github.com/prometheus/client_golang", "go.opentelemetry.io/otel"}},
}

// versionCheck holds what the README may name: module versions, each
// with where it comes from, Go versions, and our own releases (the
// headings of CHANGES.md).
type versionCheck struct {
	modules map[string][]string // "v4.11.0": {"go-micro.dev/v4 (integration/go.mod)"}
	gos     map[string]bool     // "1.25", "1.26"
}

var (
	goDirective    = regexp.MustCompile(`(?m)^go\s+(\d+\.\d+)`)
	releaseHeading = regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+)\s*$`)
	// A version in the text: v1.2.3, not within a word, a path or a
	// module@version; Go 1.26.
	versionInText = regexp.MustCompile(`(?:^|[^\w/@.-])(v\d+\.\d+\.\d+)\b`)
	goInText      = regexp.MustCompile(`\bGo (\d+\.\d+)\b`)
)

func loadVersions(root string) (versionCheck, error) {
	v := versionCheck{modules: map[string][]string{}, gos: map[string]bool{}}
	for _, src := range versionSources {
		b, err := os.ReadFile(filepath.Join(root, src.gomod))
		if err != nil {
			return v, err
		}
		if m := goDirective.FindSubmatch(b); m != nil {
			v.gos[string(m[1])] = true
		}
		for _, mod := range src.modules {
			m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(mod) + `\s+(v\S+)`).FindSubmatch(b)
			if m == nil {
				return v, fmt.Errorf("%s requires no %s (internal/figures/versions.go says it does)", src.gomod, mod)
			}
			v.modules[string(m[1])] = append(v.modules[string(m[1])], mod+" ("+src.gomod+")")
		}
	}
	changes, err := os.ReadFile(filepath.Join(root, "CHANGES.md"))
	if err != nil {
		return v, err
	}
	for _, m := range releaseHeading.FindAllSubmatch(changes, -1) {
		v.modules[string(m[1])] = append(v.modules[string(m[1])], "a release of ours (CHANGES.md)")
	}
	return v, nil
}

// check reports the versions that a document names, outside code and
// the marked blocks, and that are none of the sources'.
func (v versionCheck) check(path, text string, blocks []markedBlock) []string {
	var problems []string
	for i, line := range strings.Split(visible(text, blocks), "\n") {
		for _, m := range versionInText.FindAllStringSubmatch(line, -1) {
			if _, ok := v.modules[m[1]]; !ok {
				problems = append(problems, fmt.Sprintf("%s:%d: %s is no version that the go.mod files of internal/figures/versions.go require, nor a release in CHANGES.md: a dependency raised?",
					path, i+1, m[1]))
			}
		}
		for _, m := range goInText.FindAllStringSubmatch(line, -1) {
			if !v.gos[m[1]] {
				var gos []string
				for g := range v.gos {
					gos = append(gos, g)
				}
				slices.Sort(gos)
				problems = append(problems, fmt.Sprintf("%s:%d: Go %s is no go directive of the go.mod files of internal/figures/versions.go (%s)", path, i+1, m[1], strings.Join(gos, ", ")))
			}
		}
	}
	return problems
}
