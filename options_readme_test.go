package cache

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's table of options lists every option of the package, and
// the defaults it gives are the code's.
func TestTheReadmeListsEveryOption(t *testing.T) {
	rows := readmeOptions(t)
	defaults := newOptions(nil)
	var names []string
	for _, tc := range optionCases {
		names = append(names, tc.name)
		row, ok := rows[tc.name]
		if !assert.True(t, ok, "the README's table of options has no row for %s", tc.name) {
			continue
		}
		assert.Equal(t, tc.deflt, row.deflt, "%s: the README's default", tc.name)
		if tc.value != nil {
			assert.Equal(t, readmeValue(tc.deflt), tc.value(defaults), "%s: the code's default", tc.name)
		}
		assert.Equal(t, len(tc.refused) > 0, row.refused != "", "%s: the README's refused values", tc.name)
	}
	for name := range rows {
		assert.Contains(t, names, name, "the README lists an option the test does not know")
	}
	assert.ElementsMatch(t, exportedOptions(t), names, "every func returning Option is in the table")
}

type readmeRow struct{ deflt, refused string }

// readmeOptions returns the rows of the README's table of options, by
// option name.
func readmeOptions(t *testing.T) map[string]readmeRow {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	rows := map[string]readmeRow{}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| Option |") {
			in = true
			continue
		}
		if in && !strings.HasPrefix(line, "|") {
			break
		}
		if !in || strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.GreaterOrEqual(t, len(cells), 5, line)
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		name = name[:strings.IndexByte(name, '(')]
		rows[name] = readmeRow{deflt: strings.TrimSpace(cells[1]), refused: strings.TrimSpace(cells[len(cells)-1])}
	}
	require.NotEmpty(t, rows, "the README has no table of options")
	return rows
}

// readmeValue turns the README's way of writing a default into Go's.
func readmeValue(s string) string {
	r := strings.NewReplacer(" min", "m0s", " s", "s")
	return r.Replace(s)
}

// exportedOptions returns the names of the package's exported functions
// that return an Option.
func exportedOptions(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var names []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "Option" {
				names = append(names, fn.Name.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}
