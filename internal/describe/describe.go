// Package describe reads an inspected index or foreign key one way, which
// every comparison and every text of the reconcile that names one is made
// of, and that internal/tool/parity's snapshot reads them with too.
package describe

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlite"
)

// The describer: one reading of an inspected index or foreign key, which
// every comparison and every text of this package that names one is made of
// — drift's definitions, the AC-33 clause 4 comparison and IndexSet, the
// planner's equivalences and a rebuild's foreign-key check — and that
// internal/tool/parity's snapshot reads indexes and foreign keys with too.

// IndexDescription is an index as the module compares it.
type IndexDescription struct {
	Name   string `json:"name"`
	Unique bool   `json:"unique"`
	// Constraint marks a PostgreSQL UNIQUE constraint (rather than a unique
	// index).
	Constraint bool `json:"constraint,omitempty"`
	// Parts spells each part: a column's name or an expression's text, its
	// collation where not the column's (Collation), its operator class where
	// not the default (PartOpClass), then its order
	// (PartOrder): " DESC" where descending, the NULLs' placement where not
	// the direction's default.
	Parts []string `json:"parts"`
	// Columns names the indexed columns, in order; nil when a part is an
	// expression.
	Columns []string `json:"columns"`
	// Predicate is a partial index's WHERE, as the catalog renders it.
	Predicate string `json:"predicate,omitempty"`
	// Include names the INCLUDE columns (PostgreSQL), in order.
	Include []string `json:"include,omitempty"`
	// NullsNotDistinct marks a unique index whose NULLs collide
	// (PostgreSQL's NULLS NOT DISTINCT).
	NullsNotDistinct bool `json:"nulls_not_distinct,omitempty"`
}

// Index describes idx.
func Index(idx *schema.Index) IndexDescription {
	x := IndexDescription{Name: idx.Name, Unique: idx.Unique, Parts: make([]string, 0, len(idx.Parts)), Columns: make([]string, 0, len(idx.Parts))}
	for _, p := range idx.Parts {
		c := "?"
		switch {
		case p.C != nil:
			c = p.C.Name
		case p.X != nil:
			if e, ok := p.X.(*schema.RawExpr); ok {
				// SQLite reads an expression back in the parentheses its
				// CREATE INDEX needs; they are no part of the expression.
				c = BareExpr(e.X)
			}
		}
		if p.C == nil {
			x.Columns = nil
		} else if x.Columns != nil {
			x.Columns = append(x.Columns, p.C.Name)
		}
		for _, a := range p.Attrs {
			if co, ok := a.(*Collation); ok {
				c += " COLLATE " + co.Name
			}
		}
		if op := PartOpClass(p); op != "" {
			c += " " + op
		}
		x.Parts = append(x.Parts, c+PartOrder(p))
	}
	for _, a := range idx.Attrs {
		switch a := a.(type) {
		case *postgres.Constraint:
			x.Constraint = a.T == "u" && idx.Unique
		case *postgres.IndexPredicate:
			x.Predicate = a.P
		case *sqlite.IndexPredicate:
			x.Predicate = a.P
		case *postgres.IndexInclude:
			for _, c := range a.Columns {
				x.Include = append(x.Include, c.Name)
			}
		case *postgres.IndexNullsDistinct:
			x.NullsNotDistinct = !a.V
		}
	}
	return x
}

// Collation marks an index part whose collation is not its column's, as
// the catalog names it. Atlas's inspection reads no index collation and a
// declaration names none, so a driver that reads them off the catalog marks
// the inspected part (PostgreSQL: pg_index.indcollation, where not the
// column's; SQLite: pragma_index_xinfo, where not BINARY), and the part is
// then spelled, and compared, with it.
type Collation struct {
	schema.Attr
	Name string
}

// HasCollation reports an index with a part marked Collation.
func HasCollation(idx *schema.Index) bool {
	for _, p := range idx.Parts {
		for _, a := range p.Attrs {
			if _, ok := a.(*Collation); ok {
				return true
			}
		}
	}
	return false
}

// PartOrder is how part p orders its key, as CREATE INDEX spells it: ""
// (ascending, NULLs last), " DESC" (NULLs first), and " NULLS FIRST" or
// " NULLS LAST" where the NULLs go otherwise than that direction's default.
// Atlas reads every btree part's NULLs placement, default or not, and a
// declaration names it only where it is not the default: both read the same.
func PartOrder(p *schema.IndexPart) string {
	nullsFirst := p.Desc
	for _, a := range p.Attrs {
		if n, ok := a.(*postgres.IndexColumnProperty); ok {
			switch {
			case n.NullsFirst:
				nullsFirst = true
			case n.NullsLast:
				nullsFirst = false
			}
		}
	}
	s := ""
	if p.Desc {
		s = " DESC"
	}
	switch {
	case nullsFirst == p.Desc:
	case nullsFirst:
		s += " NULLS FIRST"
	default:
		s += " NULLS LAST"
	}
	return s
}

// PartOpClass is part p's operator class where one other than its type's
// default is named ("" for the default): Atlas reads only such a one, and a
// declaration names one with ops.
func PartOpClass(p *schema.IndexPart) string {
	for _, a := range p.Attrs {
		if op, ok := a.(*postgres.IndexOpClass); ok && !(op.Default && len(op.Params) == 0) {
			return op.Name
		}
	}
	return ""
}

// Partial reports a WHERE predicate.
func (x IndexDescription) Partial() bool { return x.Predicate != "" }

func (x IndexDescription) kind() string {
	if x.Unique {
		return "unique"
	}
	return "index"
}

// Definition is the index without its name, as drift reports it:
// "unique (a, b) partial".
func (x IndexDescription) Definition() string {
	def := fmt.Sprintf("%s (%s)%s", x.kind(), strings.Join(x.Parts, ", "), x.extras())
	if x.Partial() {
		def += " partial"
	}
	return def
}

// String is the index as IndexSet lists it: "name unique(a, b)".
func (x IndexDescription) String() string {
	return fmt.Sprintf("%s %s(%s)%s", x.Name, x.kind(), strings.Join(x.Parts, ", "), x.extras())
}

// extras spells what an index has beyond its parts, where it has it:
// " include(c)", " nulls not distinct".
func (x IndexDescription) extras() string {
	s := ""
	if len(x.Include) > 0 {
		s += " include(" + strings.Join(x.Include, ", ") + ")"
	}
	if x.NullsNotDistinct {
		s += " nulls not distinct"
	}
	return s
}

// SameIndex reports two indexes that enforce and serve the same: uniqueness
// and whether NULLs collide under it, a predicate or none, the same parts in
// order with their operator class, direction and NULLs placement, and the
// same INCLUDE columns.
func SameIndex(a, b *schema.Index) bool {
	x, y := Index(a), Index(b)
	return x.Unique == y.Unique && x.NullsNotDistinct == y.NullsNotDistinct && x.Partial() == y.Partial() &&
		slices.Equal(x.Parts, y.Parts) && slices.Equal(x.Include, y.Include)
}

// ColumnNames names idx's columns in order; nil when a part is an expression.
func ColumnNames(idx *schema.Index) []string { return Index(idx).Columns }

// partial reports an index with a WHERE predicate.
func IsPartial(idx *schema.Index) bool { return Index(idx).Partial() }

// ForeignKeyDescription is a foreign key as the module compares it.
type ForeignKeyDescription struct {
	Name       string   `json:"name"`
	Columns    []string `json:"columns"`
	RefTable   string   `json:"ref_table"`
	RefColumns []string `json:"ref_columns"`
	// OnUpdate and OnDelete are as inspected: empty is NO ACTION.
	OnUpdate string `json:"on_update"`
	OnDelete string `json:"on_delete"`
}

// ForeignKey describes fk.
func ForeignKey(fk *schema.ForeignKey) ForeignKeyDescription {
	f := ForeignKeyDescription{Name: fk.Symbol, RefTable: "?", OnUpdate: string(fk.OnUpdate), OnDelete: string(fk.OnDelete)}
	for _, c := range fk.Columns {
		f.Columns = append(f.Columns, c.Name)
	}
	if fk.RefTable != nil {
		f.RefTable = fk.RefTable.Name
	}
	for _, c := range fk.RefColumns {
		f.RefColumns = append(f.RefColumns, c.Name)
	}
	return f
}

// Definition is the key without its name, as drift reports it:
// "(a) REFERENCES t (id) ON DELETE CASCADE".
func (f ForeignKeyDescription) Definition() string {
	def := fmt.Sprintf("(%s) REFERENCES %s (%s)", strings.Join(f.Columns, ", "), f.RefTable, strings.Join(f.RefColumns, ", "))
	if f.OnDelete != "" {
		def += " ON DELETE " + f.OnDelete
	}
	if f.OnUpdate != "" {
		def += " ON UPDATE " + f.OnUpdate
	}
	return def
}

// decides spells what decides the key's violations and actions: its
// columns, its parent and the parent's columns, ON UPDATE and ON DELETE
// (absent = NO ACTION), case-folded.
func (f ForeignKeyDescription) Decides() string {
	action := func(o string) string {
		if o == "" {
			return string(schema.NoAction)
		}
		return strings.ToUpper(o)
	}
	return fmt.Sprintf("(%s) %s(%s) %s %s", strings.Join(f.Columns, ","), f.RefTable, strings.Join(f.RefColumns, ","), action(f.OnUpdate), action(f.OnDelete))
}

// IndexSet describes a table's indexes as sorted "name unique(cols)" lines,
// for comparing a migrated database with a fresh one (AC-33 clause 4). The
// primary key is not an index here; unique constraints are.
func IndexSet(t *schema.Table) []string {
	if t == nil {
		return nil
	}
	var out []string
	for _, idx := range t.Indexes {
		out = append(out, Index(idx).String())
	}
	sort.Strings(out)
	return out
}

// Expr is an expression's text: a literal's value, a raw expression's SQL,
// anything else as fmt prints it.
func Expr(x schema.Expr) string {
	switch x := x.(type) {
	case *schema.Literal:
		return x.V
	case *schema.RawExpr:
		return x.X
	}
	return fmt.Sprintf("%v", x)
}

// BareExpr is an expression without the parentheses around the whole of it
// and the space at its ends.
func BareExpr(x string) string {
	for {
		x = strings.TrimSpace(x)
		if len(x) < 2 || x[0] != '(' || x[len(x)-1] != ')' {
			return x
		}
		if lowest, _ := Depth(x[1 : len(x)-1]); lowest < 0 {
			return x // "(a) + (b)": the first parenthesis closes early
		}
		x = x[1 : len(x)-1]
	}
}

// Depth scans s's parentheses: lowest is the least depth reached (below 0
// where a ')' closes more than was opened), final the depth at the end. s
// is balanced when both are 0.
func Depth(s string) (lowest, final int) {
	for _, r := range s {
		switch r {
		case '(':
			final++
		case ')':
			final--
			lowest = min(lowest, final)
		}
	}
	return lowest, final
}
