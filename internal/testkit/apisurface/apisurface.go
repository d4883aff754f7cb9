// Package apisurface counts what a package exports: its exported
// identifiers (functions, types, constants, variables), the exported methods
// of its exported types and the exported fields of its exported structs,
// from the package's non-test source. An exported alias of a type declared
// in one of the module's internal packages counts that type's exported
// fields and methods as its own: a host reaches them through the alias, and
// moving a type behind one changes nothing a host sees. Its test holds
// reconcile to the size of a host's API and prints every public package's
// counts.
package apisurface

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
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
	p, err := parse(dir)
	if err != nil {
		return Surface{}, err
	}
	s := Surface{Identifiers: p.identifiers}
	for name, ty := range p.types {
		if !ast.IsExported(name) {
			continue
		}
		if ty.alias != "" {
			if ty, err = resolve(dir, ty.alias, ty.target); err != nil {
				return Surface{}, fmt.Errorf("alias %s: %w", name, err)
			}
		}
		s.Fields += ty.fields
		for _, m := range ty.methods {
			s.Methods = append(s.Methods, name+"."+m)
		}
	}
	s.Identifiers = sortedSet(s.Identifiers)
	s.Methods = sortedSet(s.Methods)
	return s, nil
}

// typeInfo is what one declared type brings: its exported fields (a
// struct's) and exported methods, or, for an alias of another package's
// type, that package's import path and the type's name there.
type typeInfo struct {
	fields        int
	methods       []string
	alias, target string
}

// pkg is one package's parse: its exported top-level names and its types.
type pkg struct {
	identifiers []string
	types       map[string]*typeInfo
}

func parse(dir string) (*pkg, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	p := &pkg{types: map[string]*typeInfo{}}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			return nil, err
		}
		imports := importsOf(f)
		for _, d := range f.Decls {
			p.add(d, imports)
		}
	}
	return p, nil
}

// importsOf maps each name a file refers to an import by to its path.
func importsOf(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := filepath.Base(path)
		if im.Name != nil {
			name = im.Name.Name
		}
		m[name] = path
	}
	return m
}

// typ is the entry for the type named name, made on first use (a method may
// be read before its type).
func (p *pkg) typ(name string) *typeInfo {
	if p.types[name] == nil {
		p.types[name] = &typeInfo{}
	}
	return p.types[name]
}

func (p *pkg) add(d ast.Decl, imports map[string]string) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return
		}
		if d.Recv == nil {
			p.identifiers = append(p.identifiers, "func "+d.Name.Name)
			return
		}
		if recv := receiver(d.Recv.List[0].Type); recv != nil {
			ty := p.typ(recv.Name)
			ty.methods = append(ty.methods, d.Name.Name)
		}
	case *ast.GenDecl:
		for _, spec := range d.Specs {
			switch spec := spec.(type) {
			case *ast.TypeSpec:
				p.addType(spec, imports)
			case *ast.ValueSpec:
				for _, n := range spec.Names {
					if n.IsExported() {
						p.identifiers = append(p.identifiers, d.Tok.String()+" "+n.Name)
					}
				}
			}
		}
	}
}

func (p *pkg) addType(spec *ast.TypeSpec, imports map[string]string) {
	if spec.Name.IsExported() {
		p.identifiers = append(p.identifiers, "type "+spec.Name.Name)
	}
	ty := p.typ(spec.Name.Name)
	switch t := spec.Type.(type) {
	case *ast.StructType:
		for _, fl := range t.Fields.List {
			for _, n := range fl.Names {
				if n.IsExported() {
					ty.fields++
				}
			}
		}
	case *ast.SelectorExpr:
		if x, ok := t.X.(*ast.Ident); ok && spec.Assign.IsValid() {
			ty.alias, ty.target = imports[x.Name], t.Sel.Name
		}
	}
}

// resolve is the type an alias in the package in dir names: declared in
// one of the module's internal packages, it is read from that package's
// folder; an alias of any other package's type brings nothing.
func resolve(dir, importPath, name string) (*typeInfo, error) {
	root, module, err := moduleOf(dir)
	if err != nil {
		return nil, err
	}
	rel, ok := strings.CutPrefix(importPath, module+"/")
	if !ok || !slices.Contains(strings.Split(rel, "/"), "internal") {
		return &typeInfo{}, nil
	}
	p, err := parse(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	ty := p.types[name]
	if ty == nil {
		return nil, fmt.Errorf("%s declares no type %s", importPath, name)
	}
	return ty, nil
}

// moduleOf finds the go.mod at or above dir: the module's root folder and
// its path.
func moduleOf(dir string) (root, module string, err error) {
	root, err = filepath.Abs(dir)
	if err != nil {
		return "", "", err
	}
	for {
		f, err := os.Open(filepath.Join(root, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return root, strings.Trim(strings.TrimSpace(m), `"`), nil
				}
			}
			return "", "", fmt.Errorf("%s: no module line", filepath.Join(root, "go.mod"))
		}
		parent := filepath.Dir(root)
		if parent == root {
			return "", "", fmt.Errorf("no go.mod at or above %s", dir)
		}
		root = parent
	}
}

// sortedSet is xs sorted, each once.
func sortedSet(xs []string) []string {
	sort.Strings(xs)
	return slices.Compact(xs)
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
