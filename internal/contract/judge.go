package contract

import (
	"fmt"
	"slices"
	"strings"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/describe"
)

// Finding codes: what in a table a writer's rows would break. They are
// stable: lint's hazards and the writer's refusal carry them.
const (
	CodeTable          = "writer-table"           // the table does not exist
	CodeColumn         = "writer-column"          // a column the writer names does not exist
	CodeNotNull        = "writer-not-null"        // NOT NULL where the writer writes NULL, or does not write and no default fills
	CodeConflictTarget = "writer-conflict-target" // no unique key matches the writer's ON CONFLICT target
	CodeCheck          = "writer-check"           // a check the writer's values break (or may break)
	CodeForeignKey     = "writer-foreign-key"     // a foreign key the writer's order breaks (or may break)
	CodeUnique         = "writer-unique"          // a unique key the writer's rows break (or may break)
)

// Finding is one thing in a table that a writer's rows would break.
type Finding struct {
	Code string `json:"code"`
	// Refused: the contract says the writer writes rows the table rejects.
	// False: the contract cannot decide it (a notice).
	Refused    bool   `json:"refused"`
	Writer     string `json:"writer"`
	Table      string `json:"table"`
	Column     string `json:"column,omitempty"`
	Constraint string `json:"constraint,omitempty"`
	// Detail says what fails; Frames which writes fail.
	Detail string `json:"detail"`
	Frames string `json:"frames"`
}

func (f Finding) String() string {
	what := f.Table
	if f.Column != "" {
		what += "." + f.Column
	}
	if f.Constraint != "" {
		what += " (" + f.Constraint + ")"
	}
	return fmt.Sprintf("%s: %s: %s; fails %s", f.Code, what, f.Detail, f.Frames)
}

// Table is what a judge reads of a table: its inspected or declared form,
// and the names of the indexes that do not count (PostgreSQL's INVALID
// indexes, which neither enforce nor serve a conflict target).
type Table struct {
	T       *schema.Table
	Invalid map[string]bool
}

// Judge lists what in t the writer's rows would break: refused findings
// (the contract decides they fail) and notices (it cannot decide).
func Judge(w *Writer, t Table) []Finding {
	j := judge{w: w, t: t}
	if t.T == nil {
		j.add(true, CodeTable, "", "", "the table does not exist", "every write")
		return j.out
	}
	j.columns()
	j.conflictTarget()
	j.checks()
	j.foreignKeys()
	j.uniques()
	return j.out
}

// Refused returns the refused findings of fs.
func Refused(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Refused {
			out = append(out, f)
		}
	}
	return out
}

type judge struct {
	w   *Writer
	t   Table
	out []Finding
}

func (j *judge) add(refused bool, code, column, constraint, detail, frames string) {
	j.out = append(j.out, Finding{Code: code, Refused: refused, Writer: j.w.Name, Table: j.w.Table,
		Column: column, Constraint: constraint, Detail: detail, Frames: frames})
}

// columns: every named column exists; a NOT NULL column is never written
// NULL, and one the INSERT does not name has a default (or is generated).
func (j *judge) columns() {
	for _, name := range j.named() {
		if _, ok := j.t.T.Column(name); !ok {
			j.add(true, CodeColumn, name, "", "the writer names this column and the table has none", "every write")
		}
	}
	for _, c := range j.t.T.Columns {
		if c.Type == nil || c.Type.Null {
			continue
		}
		if !j.w.Writes(c.Name) {
			if c.Default == nil && !generated(j.t.T, c) {
				j.add(true, CodeNotNull, c.Name, "", "NOT NULL without a DEFAULT, and the writer does not write this column", "every insert")
			}
			continue
		}
		if cc := j.w.Column(c.Name); cc != nil && cc.Null != "" {
			j.add(true, CodeNotNull, c.Name, "", "NOT NULL, and the writer writes NULL here (a DEFAULT does not fill a NULL the writer names)", cc.Null)
		}
	}
}

// named lists the columns the writer's statements name, once each.
func (j *judge) named() []string {
	out := slices.Clone(j.w.Insert)
	for _, c := range j.w.Update {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// generated reports a column the database fills itself: an identity, or
// SQLite's INTEGER PRIMARY KEY (the rowid).
func generated(t *schema.Table, c *schema.Column) bool {
	for _, a := range c.Attrs {
		if _, ok := a.(*postgres.Identity); ok {
			return true
		}
	}
	if t.PrimaryKey != nil && len(t.PrimaryKey.Parts) == 1 && t.PrimaryKey.Parts[0].C == c {
		return strings.EqualFold(c.Type.Raw, "integer")
	}
	return false
}

// conflictTarget: a valid unique key (or the primary key) over exactly the
// target's columns, plain columns, no predicate: what both dialects infer an
// ON CONFLICT target from.
func (j *judge) conflictTarget() {
	if len(j.w.Conflict) == 0 {
		return
	}
	if pk := j.t.T.PrimaryKey; pk != nil && sameSet(describe.Index(pk).Columns, j.w.Conflict) && len(pk.Parts) == len(j.w.Conflict) {
		return
	}
	for _, idx := range j.t.T.Indexes {
		if !idx.Unique || j.t.Invalid[idx.Name] {
			continue
		}
		x := describe.Index(idx)
		if x.Predicate == "" && len(x.Columns) == len(idx.Parts) && sameSet(x.Columns, j.w.Conflict) {
			return
		}
	}
	detail := fmt.Sprintf("no valid unique key over (%s), the writer's ON CONFLICT target (PostgreSQL 42P10, SQLite \"ON CONFLICT clause does not match\")", strings.Join(j.w.Conflict, ", "))
	j.add(true, CodeConflictTarget, "", "", detail, "every write")
}

// sameSet reports whether a and b hold the same names (a conflict target
// matches a key whatever its column order).
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// foreignKeys: a key on a column the writer writes must name a table the
// writer waits for (After); one on a column whose value may precede its row
// (Precedes) fails those writes; any other cannot be decided.
func (j *judge) foreignKeys() {
	for _, fk := range j.t.T.ForeignKeys {
		var cols []string
		for _, c := range fk.Columns {
			if j.w.Writes(c.Name) {
				cols = append(cols, c.Name)
			}
		}
		if len(cols) == 0 || fk.RefTable == nil {
			continue
		}
		ref := fk.RefTable.Name
		if j.waitsFor(cols, ref) {
			continue
		}
		if c, p := j.precedes(cols, ref); p != nil {
			j.add(true, CodeForeignKey, c, fk.Symbol,
				fmt.Sprintf("a foreign key onto %s, and %s", ref, p.Why), "writes that name a "+ref+" row before it is written")
			continue
		}
		j.add(false, CodeForeignKey, strings.Join(cols, ", "), fk.Symbol,
			fmt.Sprintf("a foreign key onto %s; the contract does not say the writer waits for that row", ref),
			"writes whose row of "+ref+" does not exist yet, if any")
	}
}

func (j *judge) waitsFor(cols []string, table string) bool {
	for _, a := range j.w.After {
		if a.Table == table && len(cols) == 1 && cols[0] == a.Column {
			return true
		}
	}
	return false
}

func (j *judge) precedes(cols []string, table string) (string, *Ref) {
	for _, c := range cols {
		if cc := j.w.Column(c); cc != nil && cc.Precedes != nil && cc.Precedes.Table == table {
			return c, cc.Precedes
		}
	}
	return "", nil
}

// uniques: a unique key other than the conflict target is broken by two
// rows of two conflict keys that agree on its columns: certainly when its
// columns are part of the target (the same tool call in two executions),
// possibly otherwise — unless it holds a generated column or the whole
// target.
func (j *judge) uniques() {
	for _, idx := range j.t.T.Indexes {
		if !idx.Unique || j.t.Invalid[idx.Name] {
			continue
		}
		x := describe.Index(idx)
		if j.harmless(x) {
			continue
		}
		if len(x.Columns) == len(idx.Parts) && x.Predicate == "" && subset(x.Columns, j.w.Conflict) {
			j.add(true, CodeUnique, strings.Join(x.Columns, ", "), idx.Name,
				fmt.Sprintf("a unique key over part of the writer's conflict target (%s): two rows the writer keeps apart collide here, and ON CONFLICT does not catch a second key", strings.Join(j.w.Conflict, ", ")),
				"frames of one "+strings.Join(x.Columns, ", ")+" in two "+strings.Join(minus(j.w.Conflict, x.Columns), ", ")+" values")
			continue
		}
		j.add(false, CodeUnique, strings.Join(x.Columns, ", "), idx.Name,
			"a unique key the writer's rows are not bounded by: two rows of two conflict keys that agree on it collide", "writes that agree on its columns, if any")
	}
}

// harmless: the conflict target itself (or a key holding all of it), a key
// holding a generated column, or a key over no column the writer writes.
func (j *judge) harmless(x describe.IndexDescription) bool {
	if len(x.Columns) > 0 && subset(j.w.Conflict, x.Columns) {
		return true
	}
	writes := false
	for _, c := range x.Columns {
		if cc := j.w.Column(c); cc != nil && cc.Generated != "" {
			return true
		}
		writes = writes || j.w.Writes(c)
	}
	return len(x.Columns) > 0 && !writes
}

func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
