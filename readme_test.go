package cache_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every Go snippet in the README stands, line for line, in the body of an
// Example function, so that `make test` compiles it: a snippet that does
// not compile, or that drifts from the code, fails here.
func TestReadmeSnippetsCompileAsExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	snippets := goBlocks(string(readme))
	if len(snippets) == 0 {
		t.Fatal("the README has no Go snippet")
	}
	files, _ := filepath.Glob("*example_test.go")
	more, _ := filepath.Glob("*/*example_test.go")
	var bodies []string
	for _, name := range append(files, more...) {
		bodies = append(bodies, exampleBodies(t, name)...)
	}
	for _, snippet := range snippets {
		found := false
		for _, body := range bodies {
			if strings.Contains(body, snippet) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("this README snippet is in no Example function:\n%s", snippet)
		}
	}
}

// goBlocks returns the ```go blocks of a Markdown text, each line trimmed.
func goBlocks(md string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, strings.TrimSpace(line))
		}
	}
	return blocks
}

// exampleBodies returns the bodies of the Example functions of a file, each
// line trimmed.
func exampleBodies(t *testing.T, name string) []string {
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
			continue
		}
		body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		var lines []string
		for _, line := range strings.Split(body, "\n") {
			lines = append(lines, strings.TrimSpace(line))
		}
		bodies = append(bodies, strings.Join(lines, "\n"))
	}
	return bodies
}
