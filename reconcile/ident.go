package reconcile

import (
	"fmt"
	"slices"
	"strings"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/schemastate/schemastate/internal/ops"
)

// Names are data. Atlas renders an identifier by wrapping it in its
// dialect's quote (" on PostgreSQL, ` on SQLite) without doubling a quote
// inside it, so a name holding that quote ends the identifier early and the
// rest of the name runs as SQL. Two rules keep every name an identifier:
//
//   - Atlas renders plain names only (plainIdent): ASCII letters, digits and
//     underscores, not starting with a digit. Such a name cannot leave any
//     quoting, identifier or string. Every name of the declaration is held
//     to it once, after evaluation, and refused with its position in
//     schema.hcl (checkDeclaration); every name of every change handed to
//     Atlas's renderer is held to it again there (atlasNames), so a name
//     that came from the live catalog is refused by name before any SQL is
//     rendered, and a kind of change the check does not know is refused too.
//   - A name that is not plain is quoted by the module (dialect.QuoteIdent
//     doubles an embedded quote). Only drops take that path (quotedDrops):
//     the undeclared objects --prune removes and a retired key, whose names
//     are the catalog's. Drift that is kept is never rendered at all, so an
//     operator's oddly named index stays, untouched, and the boot goes on.
//
// On SQLite Atlas's own catalog reads format index names into string
// literals; the querier it is given refuses any text that is more than one
// statement (sqlite_ident.go), and a SQLite rebuild checks what it renders
// from the catalog the same way.

// plainIdent reports a name Atlas may render: [A-Za-z_][A-Za-z0-9_]*.
func plainIdent(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// nameError is a name refused by plainIdent, with what it names.
func nameError(kind, name string) error {
	return fmt.Errorf("%w: %s %q", ops.ErrUnsafeName, kind, name)
}

// visitName is called with every name a check walks, and what it names.
type visitName func(kind, name string) error

// requirePlain is the visitName of a check: a name that is not plain is
// refused by name.
func requirePlain(kind, name string) error {
	if !plainIdent(name) {
		return nameError(kind, name)
	}
	return nil
}

// optional skips a name SQL lets be absent (an unnamed foreign key, check
// or key), which Atlas then does not render.
func optional(kind, name string, fn visitName) error {
	if name == "" {
		return nil
	}
	return fn(kind, name)
}

// atlasNames calls fn with every name of c that Atlas's renderer could
// write into SQL. A kind of change it does not walk is refused.
func atlasNames(c schema.Change, fn visitName) error {
	switch c := c.(type) {
	case *schema.AddTable:
		return tableNames(c.T, fn)
	case *schema.DropTable:
		return fn("table", c.T.Name)
	case *schema.ModifyTable:
		if err := tableNames(c.T, fn); err != nil {
			return err
		}
		for _, cc := range c.Changes {
			if err := atlasNames(cc, fn); err != nil {
				return err
			}
		}
		return nil
	case *schema.RenameTable:
		return firstErr(fn("table", c.From.Name), fn("table", c.To.Name))
	case *schema.AddColumn:
		return columnName(c.C, fn)
	case *schema.DropColumn:
		return columnName(c.C, fn)
	case *schema.ModifyColumn:
		return firstErr(columnName(c.From, fn), columnName(c.To, fn))
	case *schema.RenameColumn:
		return firstErr(columnName(c.From, fn), columnName(c.To, fn))
	case *schema.AddIndex:
		return indexNames("index", c.I, fn)
	case *schema.DropIndex:
		return indexNames("index", c.I, fn)
	case *schema.ModifyIndex:
		return firstErr(indexNames("index", c.From, fn), indexNames("index", c.To, fn))
	case *schema.RenameIndex:
		return firstErr(indexNames("index", c.From, fn), indexNames("index", c.To, fn))
	case *schema.AddPrimaryKey:
		return indexNames("primary key", c.P, fn)
	case *schema.DropPrimaryKey:
		return indexNames("primary key", c.P, fn)
	case *schema.ModifyPrimaryKey:
		return firstErr(indexNames("primary key", c.From, fn), indexNames("primary key", c.To, fn))
	case *schema.AddForeignKey:
		return foreignKeyNames(c.F, fn)
	case *schema.DropForeignKey:
		return foreignKeyNames(c.F, fn)
	case *schema.ModifyForeignKey:
		return firstErr(foreignKeyNames(c.From, fn), foreignKeyNames(c.To, fn))
	case *schema.AddCheck:
		return optional("check", c.C.Name, fn)
	case *schema.DropCheck:
		return optional("check", c.C.Name, fn)
	case *schema.ModifyCheck:
		return firstErr(optional("check", c.From.Name, fn), optional("check", c.To.Name, fn))
	case *schema.AddAttr:
		return attrNames([]schema.Attr{c.A}, fn)
	case *schema.DropAttr:
		return attrNames([]schema.Attr{c.A}, fn)
	case *schema.ModifyAttr:
		return attrNames([]schema.Attr{c.From, c.To}, fn)
	}
	return fmt.Errorf("%w: a change of kind %T, whose names are not checked", ops.ErrUnsafeName, c)
}

// tableNames calls fn with the names of t: its own and its schema's, its
// columns, indexes, keys, foreign keys (and the tables and columns they
// reference) and checks.
func tableNames(t *schema.Table, fn visitName) error {
	if t == nil {
		return nil
	}
	errs := []error{fn("table", t.Name)}
	if t.Schema != nil {
		errs = append(errs, fn("schema", t.Schema.Name))
	}
	for _, c := range t.Columns {
		errs = append(errs, columnName(c, fn))
	}
	errs = append(errs, indexNames("primary key", t.PrimaryKey, fn))
	for _, idx := range t.Indexes {
		errs = append(errs, indexNames("index", idx, fn))
	}
	for _, fk := range t.ForeignKeys {
		errs = append(errs, foreignKeyNames(fk, fn))
	}
	errs = append(errs, attrNames(t.Attrs, fn))
	return firstErr(errs...)
}

func columnName(c *schema.Column, fn visitName) error {
	if c == nil {
		return nil
	}
	return fn("column", c.Name)
}

func indexNames(kind string, idx *schema.Index, fn visitName) error {
	if idx == nil {
		return nil
	}
	// An index always has a name; a key need not.
	errs := []error{fn(kind, idx.Name)}
	if kind == "primary key" {
		errs[0] = optional(kind, idx.Name, fn)
	}
	for _, p := range idx.Parts {
		errs = append(errs, columnName(p.C, fn))
	}
	return firstErr(append(errs, attrNames(idx.Attrs, fn))...)
}

func foreignKeyNames(fk *schema.ForeignKey, fn visitName) error {
	if fk == nil {
		return nil
	}
	errs := []error{optional("foreign key", fk.Symbol, fn)}
	for _, c := range slices.Concat(fk.Columns, fk.RefColumns) {
		errs = append(errs, columnName(c, fn))
	}
	if fk.RefTable != nil {
		errs = append(errs, fn("table", fk.RefTable.Name))
		if fk.RefTable.Schema != nil {
			errs = append(errs, fn("schema", fk.RefTable.Schema.Name))
		}
	}
	return firstErr(errs...)
}

// attrNames walks the attributes that carry a name: checks and
// PostgreSQL's constraint names.
func attrNames(attrs []schema.Attr, fn visitName) error {
	for _, a := range attrs {
		var err error
		switch a := a.(type) {
		case *schema.Check:
			err = optional("check", a.Name, fn)
		case *postgres.Constraint:
			err = optional("constraint", a.N, fn)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// quotedDrops takes out of changes the drops of an index, foreign key or
// check whose name is not plain, and renders each with the module's own
// quoting (driver.dropSQL); the rest is Atlas's to render.
func (pc *planContext) quotedDrops(changes []schema.Change) (own []string, rest []schema.Change, err error) {
	drv, err := driverFor(pc.dialect)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range changes {
		m, ok := c.(*schema.ModifyTable)
		if !ok {
			rest = append(rest, c)
			continue
		}
		var keep []schema.Change
		for _, cc := range m.Changes {
			if name, drop := droppedName(cc); drop && name != "" && !plainIdent(name) {
				stmt, err := drv.dropSQL(pc.schema, m.T.Name, cc)
				if err != nil {
					return nil, nil, fmt.Errorf("drop %q from %s: %w", name, m.T.Name, err)
				}
				own = append(own, stmt)
				continue
			}
			keep = append(keep, cc)
		}
		if len(keep) > 0 {
			rest = append(rest, &schema.ModifyTable{T: m.T, Changes: keep})
		}
	}
	return own, rest, nil
}

// droppedName is the name of the object a drop of an index, foreign key or
// check removes.
func droppedName(c schema.Change) (string, bool) {
	switch c := c.(type) {
	case *schema.DropIndex:
		return c.I.Name, true
	case *schema.DropForeignKey:
		return c.F.Symbol, true
	case *schema.DropCheck:
		return c.C.Name, true
	}
	return "", false
}

// checkDeclaration holds every name of the evaluated declaration to
// plainIdent: the schema the reconcile works in, and each table's names
// (tableNames), owned and host alike. A name refused is cited by its
// position in the file (declaredAt).
func checkDeclaration(decl *Declaration, src []byte, schemaName string) error {
	if !plainIdent(schemaName) {
		return fmt.Errorf("%s: %w (the schema the reconcile works in)", decl.File, nameError("schema", schemaName))
	}
	for _, t := range slices.Concat(decl.Owned, decl.Host) {
		err := tableNames(t, func(kind, name string) error {
			if plainIdent(name) {
				return nil
			}
			return fmt.Errorf("%s: %w", declaredAt(src, decl.File, name), nameError(kind, name))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// declaredAt is "file:line,col" of the block labelled name (table "…",
// column "…", index "…"), as HCL's own diagnostics cite a position; failing
// that, of the first line that holds the name; else the file alone.
func declaredAt(src []byte, file, name string) string {
	if f, diags := hclsyntax.ParseConfig(src, file, hcl.InitialPos); !diags.HasErrors() {
		if body, ok := f.Body.(*hclsyntax.Body); ok {
			if r, ok := labelled(body, name); ok {
				return fmt.Sprintf("%s:%d,%d", file, r.Start.Line, r.Start.Column)
			}
		}
	}
	for i, line := range strings.Split(string(src), "\n") {
		if strings.Contains(line, name) {
			return fmt.Sprintf("%s:%d", file, i+1)
		}
	}
	return file
}

// labelled finds, depth first, the first block with a label equal to name.
func labelled(body *hclsyntax.Body, name string) (hcl.Range, bool) {
	for _, b := range body.Blocks {
		for i, l := range b.Labels {
			if l == name {
				return b.LabelRanges[i], true
			}
		}
		if r, ok := labelled(b.Body, name); ok {
			return r, true
		}
	}
	return hcl.Range{}, false
}
