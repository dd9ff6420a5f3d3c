package storm

import (
	"os"
	"regexp"
	"testing"
)

// Every go-micro cache among the clients names the version of go-micro
// that go.mod requires, which the demo is built and run with.
func TestGoMicroCachesNameTheVersionsOfGoMod(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`^go-micro (v(\d+)\.\d+\.\d+) cache$`)
	n := 0
	for _, c := range DefaultClients() {
		m := named.FindStringSubmatch(c.Name)
		if m == nil {
			continue
		}
		n++
		req := regexp.MustCompile(`(?m)^\s*(?:require\s+)?go-micro\.dev/v` + m[2] + `\s+(v\S+)`).FindSubmatch(mod)
		if req == nil || string(req[1]) != m[1] {
			t.Errorf("%q: go.mod requires go-micro.dev/v%s %s", c.Name, m[2], req)
		}
	}
	if n == 0 {
		t.Errorf("no client is named as a go-micro cache of a version: %q", GoMicro)
	}
}
