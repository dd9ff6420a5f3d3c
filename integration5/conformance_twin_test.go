package integration5

import (
	"os"
	"strings"
	"testing"
)

// twinOf is integration/conformance_test.go turned into this module's
// conformance_test.go: the suite is written once, for go-micro v4, and
// only its package and imports change for v5.
func twinOf(v4 string) string {
	return strings.NewReplacer(
		"package integration\n", "package integration5\n",
		`"go-micro.dev/v4/`, `"go-micro.dev/v5/`,
		`cache "github.com/regcache/cache"`, `cache "github.com/regcache/cache/gomicro5"`,
	).Replace(v4)
}

// TestConformanceIsTheTwin fails when conformance_test.go here is not the
// v4 suite with its imports changed; REGCACHE_IT_WRITE_TWIN=1 rewrites it.
func TestConformanceIsTheTwin(t *testing.T) {
	v4, err := os.ReadFile("../integration/conformance_test.go")
	if err != nil {
		t.Fatalf("read the v4 suite: %v", err)
	}
	want := twinOf(string(v4))
	if os.Getenv("REGCACHE_IT_WRITE_TWIN") == "1" {
		if err := os.WriteFile("conformance_test.go", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("conformance_test.go")
	if err != nil {
		t.Fatalf("read the v5 suite: %v", err)
	}
	if string(got) != want {
		t.Fatalf("integration5/conformance_test.go is not integration/conformance_test.go with v5 imports: run `REGCACHE_IT_WRITE_TWIN=1 go test -run TestConformanceIsTheTwin .` in integration5")
	}
}
