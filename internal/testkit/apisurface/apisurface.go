// Package apisurface counts what a package exports: its exported
// identifiers (functions, types, constants, variables), the exported methods
// of its exported types and the exported fields of its exported structs,
// from the package's non-test source. Its test holds reconcile to the size
// of a host's API and prints every public package's counts.
package apisurface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Surface is what one package exports.
type Surface struct {
	// Identifiers are the exported top-level names, "kind name", sorted.
	Identifiers []string
	// Methods are the exported methods of exported types, "Type.Method".
	Methods []string
	// Fields counts the exported fields of exported structs.
	Fields int
}

// Of reads the package in dir: every non-test Go file, whatever its build
// constraints (a name declared once per platform is counted once).
func Of(dir string) (Surface, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Surface{}, err
	}
	fset := token.NewFileSet()
	var s Surface
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return Surface{}, err
		}
		for _, d := range f.Decls {
			s.add(d)
		}
	}
	s.Identifiers = sortedSet(s.Identifiers)
	s.Methods = sortedSet(s.Methods)
	return s, nil
}

// sortedSet is xs sorted, each once.
func sortedSet(xs []string) []string {
	sort.Strings(xs)
	return slices.Compact(xs)
}

func (s *Surface) add(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return
		}
		if d.Recv == nil {
			s.Identifiers = append(s.Identifiers, "func "+d.Name.Name)
			return
		}
		if recv := receiver(d.Recv.List[0].Type); recv != nil && recv.IsExported() {
			s.Methods = append(s.Methods, recv.Name+"."+d.Name.Name)
		}
	case *ast.GenDecl:
		for _, spec := range d.Specs {
			switch spec := spec.(type) {
			case *ast.TypeSpec:
				if !spec.Name.IsExported() {
					continue
				}
				s.Identifiers = append(s.Identifiers, "type "+spec.Name.Name)
				if st, ok := spec.Type.(*ast.StructType); ok {
					for _, fl := range st.Fields.List {
						for _, n := range fl.Names {
							if n.IsExported() {
								s.Fields++
							}
						}
					}
				}
			case *ast.ValueSpec:
				for _, n := range spec.Names {
					if n.IsExported() {
						s.Identifiers = append(s.Identifiers, d.Tok.String()+" "+n.Name)
					}
				}
			}
		}
	}
}

// receiver is the named type of a method's receiver.
func receiver(t ast.Expr) *ast.Ident {
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch t := t.(type) {
	case *ast.IndexExpr:
		id, _ := t.X.(*ast.Ident)
		return id
	case *ast.IndexListExpr:
		id, _ := t.X.(*ast.Ident)
		return id
	case *ast.Ident:
		return t
	}
	return nil
}
