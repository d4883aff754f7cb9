package ident

import (
	"fmt"
	"slices"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/ops"
)

// Names are data. Atlas renders an identifier by wrapping it in its
// dialect's quote (" on PostgreSQL, ` on SQLite) without doubling a quote
// inside it, so a name holding that quote ends the identifier early and the
// rest of the name runs as SQL. Two rules keep every name an identifier:
//
//   - Atlas renders plain names only (Plain): ASCII letters, digits and
//     underscores, not starting with a digit. Such a name cannot leave any
//     quoting, identifier or string. Every name of the declaration is held
//     to it once, after evaluation, and refused with its position in
//     schema.hcl (checkDeclaration); every name of every change handed to
//     Atlas's renderer is held to it again there (AtlasNames), so a name
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

// Plain reports a name Atlas may render: [A-Za-z_][A-Za-z0-9_]*.
func Plain(name string) bool {
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

// NameError is a name refused by Plain, with what it names.
func NameError(kind, name string) error {
	return fmt.Errorf("%w: %s %q", ops.ErrUnsafeName, kind, name)
}

// Visit is called with every name a check walks, and what it names.
type Visit func(kind, name string) error

// RequirePlain is the Visit of a check: a name that is not plain is
// refused by name.
func RequirePlain(kind, name string) error {
	if !Plain(name) {
		return NameError(kind, name)
	}
	return nil
}

// Optional skips a name SQL lets be absent (an unnamed foreign key, check
// or key), which Atlas then does not render.
func Optional(kind, name string, fn Visit) error {
	if name == "" {
		return nil
	}
	return fn(kind, name)
}

// AtlasNames calls fn with every name of c that Atlas's renderer could
// write into SQL. A kind of change it does not walk is refused.
func AtlasNames(c schema.Change, fn Visit) error {
	for _, names := range []func(schema.Change, Visit) (bool, error){tableChangeNames, indexChangeNames, constraintChangeNames} {
		if walked, err := names(c, fn); walked {
			return err
		}
	}
	return fmt.Errorf("%w: a change of kind %T, whose names are not checked", ops.ErrUnsafeName, c)
}

// tableChangeNames is AtlasNames for a change to a table or a column;
// walked is false for any other kind of change.
func tableChangeNames(c schema.Change, fn Visit) (walked bool, err error) {
	switch c := c.(type) {
	case *schema.AddTable:
		return true, TableNames(c.T, fn)
	case *schema.DropTable:
		return true, fn("table", c.T.Name)
	case *schema.ModifyTable:
		if err := TableNames(c.T, fn); err != nil {
			return true, err
		}
		for _, cc := range c.Changes {
			if err := AtlasNames(cc, fn); err != nil {
				return true, err
			}
		}
		return true, nil
	case *schema.RenameTable:
		return true, FirstErr(fn("table", c.From.Name), fn("table", c.To.Name))
	case *schema.AddColumn:
		return true, ColumnName(c.C, fn)
	case *schema.DropColumn:
		return true, ColumnName(c.C, fn)
	case *schema.ModifyColumn:
		return true, FirstErr(ColumnName(c.From, fn), ColumnName(c.To, fn))
	case *schema.RenameColumn:
		return true, FirstErr(ColumnName(c.From, fn), ColumnName(c.To, fn))
	}
	return false, nil
}

// indexChangeNames is AtlasNames for a change to an index or a primary
// key; walked is false for any other kind of change.
func indexChangeNames(c schema.Change, fn Visit) (walked bool, err error) {
	switch c := c.(type) {
	case *schema.AddIndex:
		return true, IndexNames("index", c.I, fn)
	case *schema.DropIndex:
		return true, IndexNames("index", c.I, fn)
	case *schema.ModifyIndex:
		return true, FirstErr(IndexNames("index", c.From, fn), IndexNames("index", c.To, fn))
	case *schema.RenameIndex:
		return true, FirstErr(IndexNames("index", c.From, fn), IndexNames("index", c.To, fn))
	case *schema.AddPrimaryKey:
		return true, IndexNames("primary key", c.P, fn)
	case *schema.DropPrimaryKey:
		return true, IndexNames("primary key", c.P, fn)
	case *schema.ModifyPrimaryKey:
		return true, FirstErr(IndexNames("primary key", c.From, fn), IndexNames("primary key", c.To, fn))
	}
	return false, nil
}

// constraintChangeNames is AtlasNames for a change to a foreign key, a
// check or an attribute; walked is false for any other kind of change.
func constraintChangeNames(c schema.Change, fn Visit) (walked bool, err error) {
	switch c := c.(type) {
	case *schema.AddForeignKey:
		return true, ForeignKeyNames(c.F, fn)
	case *schema.DropForeignKey:
		return true, ForeignKeyNames(c.F, fn)
	case *schema.ModifyForeignKey:
		return true, FirstErr(ForeignKeyNames(c.From, fn), ForeignKeyNames(c.To, fn))
	case *schema.AddCheck:
		return true, Optional("check", c.C.Name, fn)
	case *schema.DropCheck:
		return true, Optional("check", c.C.Name, fn)
	case *schema.ModifyCheck:
		return true, FirstErr(Optional("check", c.From.Name, fn), Optional("check", c.To.Name, fn))
	case *schema.AddAttr:
		return true, AttrNames([]schema.Attr{c.A}, fn)
	case *schema.DropAttr:
		return true, AttrNames([]schema.Attr{c.A}, fn)
	case *schema.ModifyAttr:
		return true, AttrNames([]schema.Attr{c.From, c.To}, fn)
	}
	return false, nil
}

// TableNames calls fn with the names of t: its own and its schema's, its
// columns, indexes, keys, foreign keys (and the tables and columns they
// reference) and checks.
func TableNames(t *schema.Table, fn Visit) error {
	if t == nil {
		return nil
	}
	errs := []error{fn("table", t.Name)}
	if t.Schema != nil {
		errs = append(errs, fn("schema", t.Schema.Name))
	}
	for _, c := range t.Columns {
		errs = append(errs, ColumnName(c, fn))
	}
	errs = append(errs, IndexNames("primary key", t.PrimaryKey, fn))
	for _, idx := range t.Indexes {
		errs = append(errs, IndexNames("index", idx, fn))
	}
	for _, fk := range t.ForeignKeys {
		errs = append(errs, ForeignKeyNames(fk, fn))
	}
	errs = append(errs, AttrNames(t.Attrs, fn))
	return FirstErr(errs...)
}

func ColumnName(c *schema.Column, fn Visit) error {
	if c == nil {
		return nil
	}
	return fn("column", c.Name)
}

func IndexNames(kind string, idx *schema.Index, fn Visit) error {
	if idx == nil {
		return nil
	}
	// An index always has a name; a key need not (and fn never sees the
	// name it lacks).
	visit := fn
	if kind == "primary key" {
		visit = func(kind, name string) error { return Optional(kind, name, fn) }
	}
	errs := []error{visit(kind, idx.Name)}
	for _, p := range idx.Parts {
		errs = append(errs, ColumnName(p.C, fn))
	}
	return FirstErr(append(errs, AttrNames(idx.Attrs, fn))...)
}

func ForeignKeyNames(fk *schema.ForeignKey, fn Visit) error {
	if fk == nil {
		return nil
	}
	errs := []error{Optional("foreign key", fk.Symbol, fn)}
	for _, c := range slices.Concat(fk.Columns, fk.RefColumns) {
		errs = append(errs, ColumnName(c, fn))
	}
	if fk.RefTable != nil {
		errs = append(errs, fn("table", fk.RefTable.Name))
		if fk.RefTable.Schema != nil {
			errs = append(errs, fn("schema", fk.RefTable.Schema.Name))
		}
	}
	return FirstErr(errs...)
}

// AttrNames walks the attributes that carry a name: checks and
// PostgreSQL's constraint names.
func AttrNames(attrs []schema.Attr, fn Visit) error {
	for _, a := range attrs {
		var err error
		switch a := a.(type) {
		case *schema.Check:
			err = Optional("check", a.Name, fn)
		case *postgres.Constraint:
			err = Optional("constraint", a.N, fn)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func FirstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
