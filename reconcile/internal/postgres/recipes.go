package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	atlaspg "ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/typechange"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
)

// The online recipes for constraints and defaults on a PostgreSQL table at
// or above the online threshold. Each recipe is a sequence of typed phases
// whose exclusive locks are catalog-only; the scans run under SHARE UPDATE
// EXCLUSIVE (readers and writers proceed) or as plain reads:
//
//	SET NOT NULL   [fill]  check_rows  add_not_valid CHECK (c IS NOT NULL)  validate  set_not_null (proved by the check, which is dropped)
//	a check                check_rows  add_not_valid CHECK (…)              validate
//	a foreign key          check_rows  add_not_valid FOREIGN KEY …          validate
//	a column whose default is evaluated per row:
//	               add_column (nullable, no default; SET DEFAULT)  fill  then SET NOT NULL's recipe
//
// check_rows reads the rows that would break the constraint before anything
// is added, so a change that must fail never starts rejecting the host's
// writes. A validation that fails anyway (a row written in between) drops the
// NOT VALID constraint it validated (Cleanup) and names the rows. A boot that
// stops after any phase resumes from the catalog: a NOT VALID constraint of
// the declared name is validated, not added again (normalizeNotValid), and
// each phase's DoneWhen skips what is done.

// notNullCheckPrefix names the CHECK (c IS NOT NULL) the SET NOT NULL recipe
// adds and drops.
const notNullCheckPrefix = "schemastate_nn_"

// notNullCheck names the recipe's check for column col, within PostgreSQL's
// 63-byte identifiers.
func notNullCheck(col string) string {
	name := notNullCheckPrefix + col
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// recipes is what planOnline hands the recipe planner: the changes it took
// out of the single ALTER.
type recipes struct {
	addColumns []*schema.Column     // a default evaluated per row
	filling    []*schema.Column     // added by a recipe stopped before its fill ended (fillMarker)
	tighten    []*schema.Column     // to NOT NULL (the declared column)
	checks     []*schema.Check      // to add
	foreignKey []*schema.ForeignKey // to add
	// replace names the checks and foreign keys (a SET NOT NULL's check
	// among them) live under their declared name with another definition:
	// dropped in the transaction that adds the declared one.
	replace map[string]bool
}

// fillMarker is the comment a recipe puts on a column it added until its
// fill ends: what tells a later boot the fill is to be continued.
const fillMarker = "schemastate: filling with its default"

// recipePlanner plans one table's recipes.
type recipePlanner struct {
	schema, table string
	qt            string // the table, qualified and quoted
	key           string // the table's row key as text, for naming rows
	why           string
	// checks are the declared checks as the server normalizes them, which
	// the done-checks compare the live ones with.
	checks *checkFacts
}

func newRecipePlanner(schemaName string, tp *pgTablePlan, why string) recipePlanner {
	p := recipePlanner{schema: schemaName, table: tp.Table, qt: pgsql.Qualified(schemaName, tp.Table), key: rowKeyText(tp.Want), why: why}
	if tp.Inflight != nil {
		p.checks = tp.Inflight.checks
	}
	return p
}

// declaredCheckExpr is check name's declared expression as the server
// normalizes it ("" when unknown).
func (p recipePlanner) declaredCheckExpr(name string) string {
	if p.checks == nil {
		return ""
	}
	return p.checks.declared[name]
}

// rowKeyText is an expression naming a row by its primary key (ctid when
// the table has none).
func rowKeyText(t *schema.Table) string {
	if t.PrimaryKey == nil || len(t.PrimaryKey.Parts) == 0 {
		return "ctid::text"
	}
	var parts []string
	for _, p := range t.PrimaryKey.Parts {
		if p.C == nil {
			return "ctid::text"
		}
		parts = append(parts, dialect.QuoteIdent(p.C.Name)+"::text")
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "concat_ws(', ', " + strings.Join(parts, ", ") + ")"
}

// plan is the recipes' phases, in order: new columns and their fills, then
// the NOT NULLs, the checks and the foreign keys.
func (p recipePlanner) plan(r recipes, fills map[string]bool) []ops.Phase {
	var out []ops.Phase
	filled := map[string]bool{}
	for _, c := range r.addColumns {
		out = append(out, p.addColumn(c), p.fill(c), p.filled(c))
		filled[c.Name] = true
	}
	for _, c := range r.filling {
		out = append(out, p.fill(c), p.filled(c))
		filled[c.Name] = true
	}
	for _, c := range append(append([]*schema.Column(nil), r.addColumns...), r.filling...) {
		if !c.Type.Null && !slices.ContainsFunc(r.tighten, func(t *schema.Column) bool { return t.Name == c.Name }) {
			out = append(out, p.setNotNull(c.Name, r.replace)...)
		}
	}
	for _, c := range r.tighten {
		if fills[c.Name] && !filled[c.Name] {
			out = append(out, p.fill(c))
		}
		out = append(out, p.setNotNull(c.Name, r.replace)...)
	}
	for _, c := range r.checks {
		out = append(out, p.constraint(constraintSpec{name: c.Name, what: "check " + c.Name, broken: "NOT (" + c.Expr + ")",
			def: fmt.Sprintf("CHECK (%s)", c.Expr), match: checkMatches(p.declaredCheckExpr(c.Name)), lock: ops.LockCatalog, replace: r.replace[c.Name]})...)
	}
	for _, fk := range r.foreignKey {
		ref := p.schema
		if fk.RefTable != nil && fk.RefTable.Schema != nil && fk.RefTable.Schema.Name != "" {
			ref = fk.RefTable.Schema.Name
		}
		refTable := pgsql.Qualified(ref, fk.RefTable.Name)
		var cols, refCols, present, match []string
		for i, c := range fk.Columns {
			rc := fk.RefColumns[i]
			cols = append(cols, dialect.QuoteIdent(c.Name))
			refCols = append(refCols, dialect.QuoteIdent(rc.Name))
			present = append(present, "t."+dialect.QuoteIdent(c.Name)+" IS NOT NULL")
			match = append(match, "r."+dialect.QuoteIdent(rc.Name)+" = t."+dialect.QuoteIdent(c.Name))
		}
		def := fmt.Sprintf("FOREIGN KEY (%s) REFERENCES %s (%s)", strings.Join(cols, ", "), refTable, strings.Join(refCols, ", "))
		if a := fkAction(fk.OnUpdate); a != "" {
			def += " ON UPDATE " + a
		}
		if a := fkAction(fk.OnDelete); a != "" {
			def += " ON DELETE " + a
		}
		// MATCH SIMPLE: a row with a NULL in any column is not checked.
		broken := fmt.Sprintf("%s AND NOT EXISTS (SELECT 1 FROM %s r WHERE %s)", strings.Join(present, " AND "), refTable, strings.Join(match, " AND "))
		out = append(out, p.constraint(constraintSpec{name: fk.Symbol, what: "foreign key " + fk.Symbol, broken: broken, def: def,
			match: fkMatches(refTable, fk), lock: ops.LockShareRowExclusive, lockNote: "; holds SHARE ROW EXCLUSIVE on " + fk.RefTable.Name + " too",
			replace: r.replace[fk.Symbol]})...)
	}
	return out
}

func fkAction(a schema.ReferenceOption) string {
	switch a {
	case "", schema.NoAction:
		return ""
	}
	return string(a)
}

// notNull is the catalog check that a column is NOT NULL.
func (p recipePlanner) notNull(col string) string {
	return fmt.Sprintf("EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s AND attnotnull AND NOT attisdropped)", pgsql.Literal(p.qt), pgsql.Literal(col))
}

// breaking is the read of the rows where broken holds.
func (p recipePlanner) breaking(broken string) *ops.Breaking {
	return &ops.Breaking{
		Sample: fmt.Sprintf("SELECT %s FROM %s t WHERE %s LIMIT 5", p.key, p.qt, broken),
		Count:  fmt.Sprintf("SELECT count(*) FROM %s t WHERE %s", p.qt, broken),
	}
}

// addColumn adds a column whose default PostgreSQL would evaluate for every
// existing row (a rewrite under ACCESS EXCLUSIVE): nullable and with no
// default, then the default set, so new rows get it; the fill gives it to
// the existing rows.
func (p recipePlanner) addColumn(c *schema.Column) ops.Phase {
	qc := dialect.QuoteIdent(c.Name)
	t, _ := columnTypeSQL(c) // planOnline took only columns it spells
	return ops.Phase{Step: core.StepShape, Name: ops.PhaseAddColumn, Kind: ops.KindStatements, Table: p.table, Object: c.Name, Transactional: true, Lock: ops.LockCatalog,
		SQL: []string{
			fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s %s", p.qt, qc, t),
			fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT %s", p.qt, qc, core.DefaultSQL(c.Default)),
			fmt.Sprintf("COMMENT ON COLUMN %s.%s IS %s", p.qt, qc, pgsql.Literal(fillMarker)),
		},
		// Done when a column of the name and of the declared type has a
		// default (a column of the name and another type is no column this
		// phase added).
		DoneWhen: fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum WHERE a.attrelid = to_regclass(%s) AND a.attname = %s AND a.atttypid = to_regtype(%s) AND NOT a.attisdropped)",
			pgsql.Literal(p.qt), pgsql.Literal(c.Name), pgsql.Literal(t)),
		Detail: p.why + "; column " + c.Name + ": its default is evaluated per row, so it is added nullable, then filled in batches"}
}

// fill gives the existing rows where col is NULL the column's default, in
// batches of pages.
func (p recipePlanner) fill(c *schema.Column) ops.Phase {
	qc := dialect.QuoteIdent(c.Name)
	return pgsql.LoopPhase(ops.Phase{Step: core.StepShape, Name: ops.PhaseFill, Kind: ops.KindBatched, Table: p.table, Object: c.Name, Lock: ops.LockRows, Scans: true,
		DoneWhen: fmt.Sprintf("SELECT %s OR NOT EXISTS (SELECT 1 FROM %s WHERE %s IS NULL)", p.notNull(c.Name), p.qt, qc),
		Detail:   p.why + "; column " + c.Name + ": its NULLs given its default in batches"},
		ops.Loop{Batch: fmt.Sprintf("UPDATE %s SET %s = DEFAULT WHERE ctid >= $1::text::tid AND ctid < $2::text::tid AND %s IS NULL", p.qt, qc, qc)})
}

// filled ends a fill: the column's comment becomes the declared one again.
func (p recipePlanner) filled(c *schema.Column) ops.Phase {
	comment := "NULL"
	for _, a := range c.Attrs {
		if cm, ok := a.(*schema.Comment); ok && cm.Text != "" {
			comment = pgsql.Literal(cm.Text)
		}
	}
	return ops.Phase{Step: core.StepShape, Name: ops.PhaseFilled, Kind: ops.KindStatements, Table: p.table, Object: c.Name, Transactional: true, Lock: ops.LockCatalog,
		SQL: []string{fmt.Sprintf("COMMENT ON COLUMN %s.%s IS %s", p.qt, dialect.QuoteIdent(c.Name), comment)},
		DoneWhen: fmt.Sprintf("SELECT col_description(to_regclass(%s), (SELECT attnum FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s AND NOT attisdropped)) IS DISTINCT FROM %s",
			pgsql.Literal(p.qt), pgsql.Literal(p.qt), pgsql.Literal(c.Name), pgsql.Literal(fillMarker)),
		Detail: p.why + "; column " + c.Name + ": filled"}
}

// columnTypeSQL is the column's type as PostgreSQL spells it; false when
// it cannot be spelled (the column then stays in the alter, as Atlas
// renders it, never added under another type).
func columnTypeSQL(c *schema.Column) (string, bool) {
	if c.Type.Raw != "" {
		return c.Type.Raw, true
	}
	s, err := atlaspg.FormatType(c.Type.Type)
	return s, err == nil
}

// catalogOnlyDefault reports a default PostgreSQL stores once in the catalog
// when a NOT NULL column is added (11 and later): a constant, or a
// non-volatile expression it evaluates once. Anything it cannot be sure of
// takes the recipe: add nullable, fill in batches.
func catalogOnlyDefault(c *schema.Column) bool {
	switch x := c.Default.(type) {
	case *schema.Literal:
		return true
	case *schema.RawExpr:
		switch strings.ToLower(strings.Join(strings.Fields(strings.Trim(x.X, "()")), "")) {
		case "now()", "current_timestamp", "current_date", "localtimestamp", "current_time", "localtime", "transaction_timestamp()":
			return true
		}
	}
	return false
}

// notValidConstraints names the table's NOT VALID checks and foreign keys.
func notValidConstraints(ctx context.Context, q core.Querier, schemaName, table string) (map[string]bool, error) {
	return nameSet(ctx, q, "NOT VALID constraints", table, `SELECT conname FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype IN ('c', 'f') AND NOT convalidated`,
		pgsql.Qualified(schemaName, table))
}

// equivalentDefaults names the columns whose declared default expression
// and live default differ as text but not as the server deparses them:
// EXPLAIN VERBOSE prints an expression the way PostgreSQL stores it, and
// runs nothing. A declared default that will not deparse is left to the
// diff (the ALTER reports it).
func equivalentDefaults(ctx context.Context, q core.Querier, live, want *schema.Table) (map[string]bool, error) {
	out := map[string]bool{}
	if want == nil {
		return out, nil
	}
	for _, wc := range want.Columns {
		lc, ok := live.Column(wc.Name)
		if !ok || wc.Default == nil || lc.Default == nil {
			continue
		}
		w, l := core.DefaultSQL(wc.Default), core.DefaultSQL(lc.Default)
		if w == l {
			continue
		}
		if _, raw := wc.Default.(*schema.RawExpr); !raw {
			continue
		}
		dw, err := deparse(ctx, q, w)
		if err != nil {
			continue
		}
		dl, err := deparse(ctx, q, l)
		if err != nil {
			return nil, fmt.Errorf("read the default of %s.%s: %w", live.Name, lc.Name, err)
		}
		if dw == dl {
			out[wc.Name] = true
		}
	}
	return out, nil
}

// deparse is an expression as the server prints it back.
func deparse(ctx context.Context, q core.Querier, expr string) (string, error) {
	lines, err := core.QueryStrings(ctx, q, "EXPLAIN (VERBOSE, COSTS OFF) SELECT "+expr)
	if err != nil {
		return "", err
	}
	for _, l := range lines {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "Output: "); ok {
			return s, nil
		}
	}
	return "", fmt.Errorf("no output line in the plan of %q", expr)
}

// normalizeRecipes is an inspected live table without what a recipe in
// flight left, so the diff plans the rest of the recipe: a NOT VALID check
// or foreign key of a declared name (added again by the diff, whose
// add_not_valid phase is then done and whose validate phase runs), the
// recipe's own NOT NULL checks (returned, with the columns they are for),
// and a default that is the declared one as the server prints it.
func normalizeRecipes(live, want *schema.Table, f tableFacts) (_ *schema.Table, nnChecks map[string]string, filling []*schema.Column) {
	live, nnChecks = core.CloneTable(live), map[string]string{}
	for _, lc := range live.Columns {
		wc, declared := want.Column(lc.Name)
		if !declared {
			continue
		}
		for i, a := range lc.Attrs {
			if cm, ok := a.(*schema.Comment); ok && cm.Text == fillMarker {
				filling = append(filling, wc)
				lc.Attrs = slices.Delete(slices.Clone(lc.Attrs), i, i+1)
				for _, wa := range wc.Attrs {
					if _, ok := wa.(*schema.Comment); ok {
						lc.Attrs = append(lc.Attrs, wa)
					}
				}
				break
			}
		}
	}
	attrs := live.Attrs[:0:0]
	for _, a := range live.Attrs {
		if c, ok := a.(*schema.Check); ok {
			if col, ok := strings.CutPrefix(c.Name, notNullCheckPrefix); ok {
				nnChecks[c.Name] = col
				continue
			}
			if f.notValid[c.Name] && declaredCheck(want, c.Name) && f.checks.same(c.Name) {
				continue // this recipe's own, in flight: validated next
			}
		}
		attrs = append(attrs, a)
	}
	live.Attrs = attrs
	fks := live.ForeignKeys[:0:0]
	for _, fk := range live.ForeignKeys {
		if w, declared := want.ForeignKey(fk.Symbol); declared && f.notValid[fk.Symbol] && sameForeignKey(fk, w, f.deferrableFKs) {
			continue // this recipe's own, in flight: validated next
		}
		fks = append(fks, fk)
	}
	live.ForeignKeys = fks
	for name := range f.sameDefault {
		if lc, ok := live.Column(name); ok {
			wc, _ := want.Column(name)
			lc.Default = wc.Default
		}
	}
	return live, nnChecks, filling
}

func declaredCheck(t *schema.Table, name string) bool {
	for _, a := range t.Attrs {
		if c, ok := a.(*schema.Check); ok && c.Name == name {
			return true
		}
	}
	return false
}

// columnFills names the columns the declaration makes NOT NULL with a
// DEFAULT that are nullable live: their NULLs take the default, in batches,
// before the column is tightened.
func columnFills(live, want *schema.Table) map[string]bool {
	out := map[string]bool{}
	for _, wc := range want.Columns {
		if lc, ok := live.Column(wc.Name); ok && lc.Type.Null && !wc.Type.Null && wc.Default != nil {
			out[wc.Name] = true
		}
	}
	return out
}

// pgScans reports a change whose statement, as Atlas renders it, reads or
// rewrites every row of the table under its lock (the single-transaction
// path's ALTER).
func pgScans(c schema.Change) bool {
	switch c := c.(type) {
	case *schema.DropIndex, *schema.DropCheck, *schema.DropForeignKey, *schema.RenameIndex, *schema.RenameColumn,
		*schema.AddAttr, *schema.ModifyAttr, *schema.DropAttr:
		return false
	case *schema.ModifyColumn:
		return c.Change.Is(schema.ChangeType) && !typechange.BinaryCoercible(c.From.Type.Type, c.To.Type.Type) ||
			c.Change.Is(schema.ChangeNull) && !c.To.Type.Null
	case *schema.AddColumn:
		return c.C.Default != nil && !catalogOnlyDefault(c.C) || !c.C.Type.Null && c.C.Default == nil
	case *schema.ModifyIndex:
		return c.Change&^schema.ChangeComment != schema.NoChange // not a comment alone: the index is built again
	}
	return true
}
