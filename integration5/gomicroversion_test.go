package integration5

import (
	"os"
	"regexp"
	"testing"
)

// goMicroCache names go-micro's registry/cache in the conformance suite's
// tables, with the version of go-micro that go.mod requires: the suite
// compares regcache with the go-micro cache of this module's go-micro.
const goMicroCache = "go-micro v5.30.0 cache"

// TestGoMicroCacheNamesTheVersionOfGoMod holds goMicroCache to go.mod.
func TestGoMicroCacheNamesTheVersionOfGoMod(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?go-micro\.dev/v5\s+(v\S+)`).FindSubmatch(mod)
	if m == nil || goMicroCache != "go-micro "+string(m[1])+" cache" {
		t.Errorf("goMicroCache is %q, and go.mod requires go-micro.dev/v5 %s", goMicroCache, m)
	}
}
