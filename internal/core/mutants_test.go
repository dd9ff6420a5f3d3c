//go:build mutants

package core

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// mutant is one plausible bug: old, in file, written new.
type mutant struct {
	name, file, old, new string
}

// readMutants reads testdata/mutants.txt.
func readMutants(t *testing.T) []mutant {
	data, err := os.ReadFile("testdata/mutants.txt")
	if os.IsNotExist(err) {
		t.Skip("no testdata/mutants.txt in this copy of the core")
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []mutant
	for _, block := range strings.Split("\n"+string(data), "\n== ")[1:] {
		name, rest, _ := strings.Cut(block, "\n")
		file, rest, _ := strings.Cut(strings.TrimPrefix(rest, "file: "), "\n")
		old, new, ok := strings.Cut(strings.TrimPrefix(rest, "-- old\n"), "\n-- new\n")
		if !ok {
			t.Fatalf("mutant %q: no -- new", name)
		}
		out = append(out, mutant{name, file, old, strings.TrimRight(new, "\n")})
	}
	return out
}

// TestMutants builds each mutant through an overlay, the source left as
// it is, and runs the core's tests, then the root package's if the
// core's pass: one must fail. A mutant no behaviour can show is named
// "(equivalent...)" and only reported.
func TestMutants(t *testing.T) {
	for _, m := range readMutants(t) {
		t.Run(m.name, func(t *testing.T) {
			path, err := filepath.Abs(m.file)
			if err != nil {
				t.Fatal(err)
			}
			orig, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(orig), m.old); n != 1 {
				t.Fatalf("the text to change is in %s %d times, want once", m.file, n)
			}
			dir := t.TempDir()
			mutated := filepath.Join(dir, m.file)
			if err := os.WriteFile(mutated, []byte(strings.Replace(string(orig), m.old, m.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{path: mutated}})
			ov := filepath.Join(dir, "overlay.json")
			if err := os.WriteFile(ov, overlay, 0o644); err != nil {
				t.Fatal(err)
			}
			killedBy := ""
			for _, pkg := range []string{".", "../.."} {
				out, err := exec.Command("go", "test", "-overlay", ov, "-count=1", "-short", pkg).CombinedOutput()
				if strings.Contains(string(out), "build failed") || strings.Contains(string(out), "setup failed") {
					t.Fatalf("the mutant does not build:\n%s", out)
				}
				if err != nil {
					killedBy = pkg
					break
				}
			}
			switch {
			case strings.Contains(m.name, "(equivalent"):
				t.Logf("equivalent; killed by %q", killedBy)
			case killedBy == "":
				t.Errorf("survived the core's and the root package's tests")
			case killedBy != ".":
				t.Logf("killed only by the root package's tests")
			}
		})
	}
}
