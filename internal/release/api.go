package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// apiCount is what one package exports: its exported top-level names
// (functions, types, variables, constants) and the exported fields of its
// exported struct types.
type apiCount struct {
	pkg           string
	names, fields int
}

// api counts what every package of the library modules exports, outside
// internal/ and the generated v5 flavour (which exports the same), and
// prints a line a package and the totals.
func (r *repo) api() error {
	var counts []apiCount
	for _, m := range r.library {
		if strings.HasPrefix(m.dir, "gomicro5") {
			continue
		}
		root := filepath.Join(r.root, m.dir)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			base := d.Name()
			if rel != "." && (base == "internal" || base == "testdata" || strings.HasPrefix(base, ".") ||
				exists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			c, ok, err := countPackage(path)
			if err != nil || !ok {
				return err
			}
			c.pkg = filepath.ToSlash(filepath.Join(m.path, rel))
			counts = append(counts, c)
			return nil
		})
		if err != nil {
			return err
		}
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i].pkg < counts[j].pkg })
	var total apiCount
	for _, c := range counts {
		fmt.Printf("%-55s %3d names %4d fields\n", c.pkg, c.names, c.fields)
		total.names += c.names
		total.fields += c.fields
	}
	fmt.Printf("%-55s %3d names %4d fields\n", "total", total.names, total.fields)
	return nil
}

// countPackage counts the exports of the non-test Go files in dir; ok is
// false when it has none.
func countPackage(dir string) (c apiCount, ok bool, err error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil || len(pkgs) == 0 {
		return c, false, err
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil && d.Name.IsExported() {
						c.names++
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								c.names++
								c.fields += exportedFields(s.Type)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									c.names++
								}
							}
						}
					}
				}
			}
		}
	}
	return c, true, nil
}

func exportedFields(t ast.Expr) int {
	st, ok := t.(*ast.StructType)
	if !ok {
		return 0
	}
	n := 0
	for _, f := range st.Fields.List {
		for _, name := range f.Names {
			if name.IsExported() {
				n++
			}
		}
	}
	return n
}
