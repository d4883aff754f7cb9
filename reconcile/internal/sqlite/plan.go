package sqlite

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"ariga.io/atlas/sql/schema"
	atlassqlite "ariga.io/atlas/sql/sqlite"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/catalog"
	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// SQLite planning: pure, from the inspected table, its declaration and the
// catalog facts driver.go reads.

// planTable: a new table is one create phase; an existing one is one alter
// phase where ALTER TABLE can make every change (needsCopy), else one
// rebuild phase with its guards.
func (Driver) PlanTable(pc *core.PlanContext, tp *core.TablePlan, cf core.Facts) error {
	f, _ := cf.(facts) // none for a new table
	if tp.Live == nil {
		stmts, err := pc.Render(&schema.AddTable{T: tp.Want})
		if err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
		tp.Phases = []ops.Phase{phase(ops.PhaseCreate, tp.Table, stmts)}
		return nil
	}
	tp.Live = normalizedLive(f.collations.Mark(tp.Live), tp.Want) // the inspected table is left as read
	changes, kept, err := pc.Diff(tp)
	stale := staleSelfReferences(tp.Live, tp.Want)
	if err != nil || len(tp.Refused) > 0 || len(changes) == 0 && stale == "" {
		return err
	}
	if !needsCopy(changes) && stale == "" {
		stmts, err := pc.Render(&schema.ModifyTable{T: tp.Want, Changes: changes})
		if err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
		ph := phase(ops.PhaseAlter, tp.Table, stmts)
		ph.Scans = slices.ContainsFunc(changes, func(c schema.Change) bool { _, build := c.(*schema.AddIndex); return build })
		tp.Phases = []ops.Phase{ph}
		return nil
	}
	ph, err := rebuildPhase(pc, tp.Live, tp.Want, changes, kept, f)
	if err != nil {
		return fmt.Errorf("plan rebuild of %s: %w", tp.Table, err)
	}
	ph.Scans = true // the copy
	ph.Detail = stale
	tp.Phases = []ops.Phase{ph}
	return nil
}

// rebuildName is the name the rebuild of table creates its new table under.
func rebuildName(table string) string { return "schemastate_new_" + table }

// selfReference reports whether a foreign key of live naming ref names the
// table itself: live, its name, or the name of a rebuild's new table
// (rebuildName), which a rebuild before the rule in rebuildTable left in
// place of the table's name.
func selfReference(ref, live *schema.Table) bool {
	return ref == live || strings.EqualFold(ref.Name, live.Name) || strings.EqualFold(ref.Name, rebuildName(live.Name))
}

// staleSelfReferences says which of live's foreign keys name a rebuild's new
// table instead of the table itself, or "" when none does. No such table
// exists once a rebuild committed, so with foreign keys on every write to
// the table fails "no such table": only a rebuild can name the table again.
func staleSelfReferences(live, want *schema.Table) string {
	var cols []string
	for _, fk := range live.ForeignKeys {
		if fk.RefTable != nil && strings.EqualFold(fk.RefTable.Name, rebuildName(live.Name)) {
			names := make([]string, len(fk.Columns))
			for i, c := range fk.Columns {
				names[i] = c.Name
			}
			cols = append(cols, "("+strings.Join(names, ", ")+")")
		}
	}
	if len(cols) == 0 {
		return ""
	}
	return fmt.Sprintf("foreign key %s names %s, which does not exist: rebuilt naming %s", strings.Join(cols, ", "), rebuildName(live.Name), want.Name)
}

// phase is a phase of the reconcile's one BEGIN IMMEDIATE transaction.
func phase(name, table string, stmts []string) ops.Phase {
	return ops.Phase{Step: core.StepShape, Name: name, Kind: ops.KindStatements, Table: table, SQL: stmts, Transactional: true, Lock: ops.LockSQLiteWrite}
}

// normalizedLive is live without the differences that are spellings of the
// same shape, so an equivalent live table plans no change (and runs no DDL).
func normalizedLive(live, want *schema.Table) *schema.Table {
	live = core.CloneTable(live)
	// An inline UNIQUE (…) constraint inspects as sqlite_autoindex_T_N; it is
	// the same uniqueness as a declared unique index over the same columns.
	for _, idx := range live.Indexes {
		if !idx.Unique || !strings.HasPrefix(idx.Name, "sqlite_autoindex_") {
			continue
		}
		for _, w := range want.Indexes {
			if w.Unique && core.SameColumns(idx, w) {
				idx.Name = w.Name
				idx.Attrs = nil
			}
		}
	}
	// SQLite keeps a default as written, and an expression default must be
	// written in parentheses (DEFAULT (lower(hex(randomblob(16))))), which
	// Atlas's inspection strips: the same default, not a change.
	for _, wc := range want.Columns {
		if lc, ok := live.Column(wc.Name); ok && wc.Default != nil && lc.Default != nil &&
			describe.BareExpr(core.DefaultSQL(wc.Default)) == describe.BareExpr(core.DefaultSQL(lc.Default)) {
			lc.Default = wc.Default
		}
	}
	return live
}

// needsCopy reports whether SQLite can only make these changes by rebuilding
// the table. ALTER TABLE handles adding a nullable-or-defaulted column and
// adding or dropping a named index; everything else — a changed or dropped
// autoindex (an inline constraint cannot be dropped), a changed column, a key
// or foreign-key change — takes the copy path. So do the additions Atlas
// itself would render as its own copy path (atlasCopies), which drops the
// table's triggers and skips the row-count and foreign-key checks: those are
// rebuilt here instead, never left to Atlas.
func needsCopy(changes []schema.Change) bool {
	for _, c := range changes {
		switch c := c.(type) {
		case *schema.AddColumn:
			if !c.C.Type.Null && c.C.Default == nil || atlasCopies(c.C) {
				return true
			}
		case *schema.AddIndex:
		case *schema.DropIndex:
			if strings.HasPrefix(c.I.Name, "sqlite_autoindex_") {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// atlasCopies reports a column addition Atlas's SQLite planner renders by
// copying the table rather than by ALTER TABLE … ADD COLUMN (sqlite's
// alterable in ariga.io/atlas/sql/sqlite/migrate.go; pinned to Atlas's own
// rendering by TestPlan_SQLiteNeverRendersAtlasCopy): a column an index or
// foreign key covers, a non-constant default, a stored generated column.
func atlasCopies(c *schema.Column) bool {
	if len(c.Indexes) > 0 || len(c.ForeignKeys) > 0 {
		return true
	}
	switch x := c.Default.(type) {
	case *schema.Literal:
		if slices.Contains([]string{"CURRENT_TIME", "CURRENT_DATE", "CURRENT_TIMESTAMP"}, x.V) {
			return true
		}
	case *schema.RawExpr:
		return true
	}
	for _, a := range c.Attrs {
		if g, ok := a.(*schema.GeneratedExpr); ok && strings.EqualFold(g.Type, "STORED") {
			return true
		}
	}
	return false
}

// rebuildPhase is SQLite's documented table rebuild ("Making Other Kinds Of
// Table Schema Changes") as one phase: create the new table, copy every row
// with an explicit column list, drop the old table, rename the new one into
// place, recreate the declared indexes and any triggers the old table
// carried. The old table's drift — undeclared indexes, foreign keys and
// checks — is created again on the new one (drift.go). Its guards refuse to
// let it commit unless every row was copied and no foreign-key violation
// appeared, and run the rename as the legacy rename.
func rebuildPhase(pc *core.PlanContext, live, want *schema.Table, changes, drift []schema.Change, f facts) (ops.Phase, error) {
	tmp, keepIndexes := rebuildTable(live, want, drift)
	stmts, err := pc.Render(&schema.AddTable{T: tmp})
	if err != nil {
		return ops.Phase{}, err
	}
	// The new table carries the kept foreign keys and checks as Atlas read
	// them off the catalog, a check's expression as raw text: what Atlas
	// renders of them must stay one statement (internal/catalog).
	for _, s := range stmts {
		if err := catalog.SingleSQLiteStatement(s); err != nil {
			return ops.Phase{}, err
		}
	}
	fill := core.Fills(live, want)
	table := dialect.QuoteIdent(want.Name)
	copyAt := len(stmts)
	stmts = append(stmts,
		rebuildCopy(live, want, tmp.Name, fill),
		"DROP TABLE "+table,
		"ALTER TABLE "+dialect.QuoteIdent(tmp.Name)+" RENAME TO "+table)
	for _, idx := range want.Indexes {
		s, err := pc.Render(&schema.ModifyTable{T: want, Changes: []schema.Change{&schema.AddIndex{I: idx}}})
		if err != nil {
			return ops.Phase{}, err
		}
		stmts = append(stmts, s...)
	}
	for _, idx := range keepIndexes {
		s, err := keptIndex(pc, want, idx, f.indexSQL)
		if err != nil {
			return ops.Phase{}, err
		}
		stmts = append(stmts, s...)
	}
	stmts = append(stmts, f.triggers...)

	ph := phase(ops.PhaseRebuild, want.Name, stmts)
	ph.Guards = nullChecks(live, want, fill)
	if why := fkCheckWhy(live, tmp, changes, f.referencedBy); why != "" {
		var checks []string
		for _, t := range append([]string{want.Name}, f.referencedBy...) {
			checks = append(checks, "PRAGMA foreign_key_check("+dialect.QuoteIdent(t)+")")
		}
		ph.Guards = append(ph.Guards, ops.Guard{Kind: ops.GuardForeignKeys, Queries: checks, Detail: why}.WithSQL())
	}
	ph.Guards = append(ph.Guards,
		ops.Guard{Kind: ops.GuardRowsCopied, Count: "SELECT COUNT(*) FROM " + table, Copy: stmts[copyAt],
			Detail: "every row is copied"}.WithSQL(),
		// SQLite's RENAME re-parses every view and trigger in the schema;
		// between the DROP and the RENAME a view or another table's trigger
		// that names the table names nothing, and the RENAME fails. The legacy
		// rename (SQLite's documented rebuild predates the re-parse) renames
		// the table alone; the views and triggers resolve to the rebuilt table
		// by name afterwards.
		ops.Guard{Kind: ops.GuardSetting, Read: "PRAGMA legacy_alter_table", Set: "PRAGMA legacy_alter_table = ON", Restore: "PRAGMA legacy_alter_table = %s",
			Detail: "the rename leaves views and other tables' triggers to resolve by name"}.WithSQL())
	return ph, nil
}

// rebuildTable is the rebuild's new table: the declared one under another
// name, with no index, carrying the live table's drift (its undeclared
// foreign keys and checks); keep are its undeclared indexes, made again
// after the rename. want is left as it was.
func rebuildTable(live, want *schema.Table, drift []schema.Change) (tmp *schema.Table, keep []*schema.Index) {
	t := *want
	tmp = &t
	tmp.Name = rebuildName(want.Name)
	tmp.Indexes = nil
	tmp.ForeignKeys = append([]*schema.ForeignKey(nil), want.ForeignKeys...)
	tmp.Attrs = append([]schema.Attr(nil), want.Attrs...)
	for _, c := range drift {
		switch c := c.(type) {
		case *schema.DropForeignKey:
			fk := *c.F
			fk.Table = tmp
			// A key on the table itself names the table's own name, never
			// tmp's: the legacy rename rewrites no reference, so a key naming
			// tmp would name a table that no longer exists once tmp is
			// renamed. SQLite resolves a key's parent by name when the key is
			// used, and foreign keys are off for the reconcile, so the new
			// table may name the table it is about to replace.
			if selfReference(fk.RefTable, live) {
				fk.RefTable = want
			}
			if _, err := strconv.Atoi(fk.Symbol); err == nil {
				fk.Symbol = "" // SQLite's numbering of an unnamed key, not a name
			}
			tmp.ForeignKeys = append(tmp.ForeignKeys, &fk)
		case *schema.DropCheck:
			tmp.Attrs = append(tmp.Attrs, c.C)
		case *schema.DropIndex:
			keep = append(keep, c.I)
		}
	}
	return tmp, keep
}

// rebuildCopy is the rebuild's copy, with an explicit column list: every
// declared column that exists live keeps its stored value byte for byte; a
// new column takes its declared DEFAULT ('unknown' for agent_execution_id,
// AC-33 clause 5); a column tightened to NOT NULL takes its DEFAULT where it
// held NULL (fill).
func rebuildCopy(live, want *schema.Table, tmpName string, fill map[string]string) string {
	var cols, exprs []string
	for _, c := range want.Columns {
		if _, ok := live.Column(c.Name); ok {
			q := dialect.QuoteIdent(c.Name)
			cols = append(cols, q)
			if v, ok := fill[c.Name]; ok {
				q = fmt.Sprintf("COALESCE(%s, %s)", q, v)
			}
			exprs = append(exprs, q)
		}
	}
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s", dialect.QuoteIdent(tmpName), strings.Join(cols, ", "), strings.Join(exprs, ", "), dialect.QuoteIdent(want.Name))
}

// nullChecks are the rebuild's guards against a NULL it could not copy: one
// per column nullable live that the declaration makes NOT NULL and fills do
// not fill. The host's own `id TEXT PRIMARY KEY` is one: SQLite lets a
// non-INTEGER primary key hold NULL. A row found fails the phase with
// ErrNullRow, naming it by its rowid (unless the table has none) and the
// declared key's columns, before anything changes.
func nullChecks(live, want *schema.Table, fill map[string]string) []ops.Guard {
	var out []ops.Guard
	for _, wc := range want.Columns {
		lc, ok := live.Column(wc.Name)
		if _, filled := fill[wc.Name]; !ok || filled || !lc.Type.Null || wc.Type.Null {
			continue
		}
		var names []string
		if !slices.ContainsFunc(live.Attrs, func(a schema.Attr) bool { _, ok := a.(*atlassqlite.WithoutRowID); return ok }) {
			names = append(names, "rowid")
		}
		var key []*schema.Column
		if want.PrimaryKey != nil {
			for _, p := range want.PrimaryKey.Parts {
				key = append(key, p.C)
			}
		}
		for _, idx := range want.Indexes {
			if idx.Unique {
				for _, p := range idx.Parts {
					key = append(key, p.C)
				}
				break
			}
		}
		for _, c := range key {
			if _, ok := live.Column(c.Name); ok && c.Name != wc.Name && !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
		sel := make([]string, len(names))
		for i, n := range names {
			sel[i] = dialect.QuoteIdent(n)
		}
		out = append(out, ops.Guard{Kind: ops.GuardNoNulls, Column: wc.Name, Names: names,
			Query: fmt.Sprintf("SELECT %s FROM %s WHERE %s IS NULL LIMIT 1",
				strings.Join(sel, ", "), dialect.QuoteIdent(want.Name), dialect.QuoteIdent(wc.Name)),
			Detail: "NOT NULL with no DEFAULT to fill a NULL with"}.WithSQL())
	}
	return out
}

// fkCheckWhy says why a rebuild must compare foreign_key_check before and
// after its copy, or returns "" when the violation set cannot change.
//
// The copy moves every row verbatim, with its id, into a table whose foreign
// keys are those the live table has (declared and kept drift). A violation is
// a row's foreign-key columns against the parent's key, so with the same keys
// over the same columns (none of them retyped, recollated or filled) and
// parents the rebuild does not touch, the same rows violate the same keys
// before and after: the two scans of the table could only count the same
// rows. The checks therefore run whenever the table's foreign keys differ
// from the live ones (added, dropped, another column, parent or action), a
// change touches a column of one of them, or any table references the rebuilt
// one — itself included: its parent key is dropped and created again, so
// those tables' keys are checked against it afresh. In doubt, they run.
func fkCheckWhy(live, rebuilt *schema.Table, changes []schema.Change, refs []string) string {
	if len(refs) > 0 {
		return "referenced by " + strings.Join(refs, ", ")
	}
	if !slices.Equal(foreignKeyKeys(live, live), foreignKeyKeys(rebuilt, live)) {
		return "its foreign keys change"
	}
	cols := map[string]bool{}
	for _, fk := range rebuilt.ForeignKeys {
		for _, c := range fk.Columns {
			cols[c.Name] = true
		}
	}
	for _, c := range changes {
		switch c := c.(type) {
		case *schema.AddForeignKey, *schema.DropForeignKey, *schema.ModifyForeignKey:
			return "its foreign keys change"
		case *schema.ModifyColumn:
			if cols[c.From.Name] || cols[c.To.Name] {
				return "foreign-key column " + c.To.Name + " changes"
			}
		case *schema.DropColumn:
			if cols[c.C.Name] {
				return "foreign-key column " + c.C.Name + " changes"
			}
		case *schema.RenameColumn:
			return "a column is renamed"
		}
	}
	return ""
}

// foreignKeyKeys spells each foreign key of t by what decides its
// violations and actions (ForeignKeyDescription.decides). A key on t itself
// names the live table, whatever t is called during the rebuild.
func foreignKeyKeys(t, live *schema.Table) []string {
	out := make([]string, 0, len(t.ForeignKeys))
	for _, fk := range t.ForeignKeys {
		f := describe.ForeignKey(fk)
		if fk.RefTable == t {
			f.RefTable = live.Name
		}
		out = append(out, f.Decides())
	}
	slices.Sort(out)
	return out
}

// keptIndex is the statement that creates an undeclared index again after a
// rebuild: the operator's own CREATE INDEX as SQLite stored it. An inline
// UNIQUE (an autoindex, which has no statement and whose name SQLite
// reserves) becomes a named unique index over the same columns.
func keptIndex(pc *core.PlanContext, want *schema.Table, idx *schema.Index, stored map[string]string) ([]string, error) {
	if stmt, ok := stored[idx.Name]; ok {
		return []string{stmt}, nil
	}
	named := *idx
	named.Name = want.Name + "_" + strings.Join(describe.ColumnNames(idx), "_") + "_key"
	named.Table = want
	return pc.Render(&schema.ModifyTable{T: want, Changes: []schema.Change{&schema.AddIndex{I: &named}}})
}
