package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// readme is examples/README.md.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestREADMEShowsTheClientsWiring checks that every line of the README's
// Go snippet is a line of client.go, but for the client's -ttl, which the
// snippet leaves out.
func TestREADMEShowsTheClientsWiring(t *testing.T) {
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(readme(t), -1)
	if len(blocks) != 1 {
		t.Fatalf("the README has %d Go snippets, want 1", len(blocks))
	}
	src, err := os.ReadFile("client.go")
	if err != nil {
		t.Fatal(err)
	}
	code := map[string]bool{}
	for _, l := range strings.Split(strings.ReplaceAll(string(src), ", cache.WithTTL(cfg.ttl)", ""), "\n") {
		code[strings.TrimSpace(l)] = true
	}
	for _, l := range strings.Split(blocks[0][1], "\n") {
		if l = strings.TrimSpace(l); l != "" && !code[l] {
			t.Errorf("the README's line %q is not in client.go", l)
		}
	}
}

// readmeMetrics returns the names of the metrics that the README names.
func readmeMetrics(t *testing.T) []string {
	t.Helper()
	var names []string
	seen := map[string]bool{}
	for _, n := range regexp.MustCompile(`regcache_[a-z_]+`).FindAllString(readme(t), -1) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	if len(names) < 2 {
		t.Fatalf("the README names %d metrics: %v", len(names), names)
	}
	return names
}
