package postgres

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/typechange"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/rebuild"
)

// onlineChanges is one table's diff sorted by how the online path makes
// each change: the alter's changes (other), the recipes, the concurrent
// builds and drops, the redefinitions, the key, the widenings.
type onlineChanges struct {
	other       []schema.Change
	builds      []*schema.Index
	dropKeys    []*schema.Index
	dropIndexes []*schema.Index
	redefined   []*schema.ModifyIndex
	// keyFrom and keyTo: a primary key added or redefined online.
	keyFrom, keyTo *schema.Index
	widenOnline    []*schema.Column
	widenOther     []schema.Change
	rc             recipes
	// catalogOnly: the alter touches the catalog alone. A deferrable key
	// rebuilt as declared builds its index: not catalog-only. A rename is.
	// (A fill runs as batches of its own.)
	catalogOnly bool
	// widening: a type widening is planned, so the rebuild predicts the
	// index set the shape phases leave (afterShape) from plain columns, and
	// an index of expressions or with a predicate stays in the alter.
	widening bool
}

// classifyOnline sorts the table's changes for the online path.
func classifyOnline(tp *pgTablePlan, pre prelude) *onlineChanges {
	oc := &onlineChanges{catalogOnly: len(pre.replaced) == 0, rc: recipes{replace: map[string]bool{}}}
	if tp.Inflight != nil {
		maps.Copy(oc.rc.replace, tp.Inflight.replace)
	}
	oc.widening = slices.ContainsFunc(tp.Changes, func(c schema.Change) bool {
		m, ok := c.(*schema.ModifyColumn)
		return ok && m.Change.Is(schema.ChangeType) && typechange.Widens(m.From.Type.Type, m.To.Type.Type) && !typechange.BinaryCoercible(m.From.Type.Type, m.To.Type.Type)
	})
	for _, c := range tp.Changes {
		if !oc.take(tp, c) {
			oc.other = append(oc.other, c)
		}
	}
	return oc
}

// take files c under what makes it online; false leaves it to the alter
// (noting there whether it is catalog-only).
func (oc *onlineChanges) take(tp *pgTablePlan, c schema.Change) bool {
	switch c := c.(type) {
	case *schema.AddIndex:
		if buildable(c.I) && (!oc.widening || plainColumns(c.I)) {
			oc.builds = append(oc.builds, c.I)
			return true
		}
	case *schema.DropIndex:
		if isUniqueConstraint(c.I) {
			oc.dropKeys = append(oc.dropKeys, c.I)
		} else {
			oc.dropIndexes = append(oc.dropIndexes, c.I)
		}
		return true
	case *schema.ModifyColumn:
		return oc.takeColumn(tp, c)
	case *schema.AddColumn:
		if _, spelled := columnTypeSQL(c.C); spelled && c.C.Default != nil && !catalogOnlyDefault(c.C) {
			oc.rc.addColumns = append(oc.rc.addColumns, c.C)
			return true
		}
		if c.C.Type.Null || c.C.Default != nil {
			return false
		}
		// NOT NULL with no default fails on a table with rows: nothing to fill it with.
	case *schema.AddCheck, *schema.ModifyCheck, *schema.AddForeignKey, *schema.ModifyForeignKey:
		if oc.takeConstraint(c) {
			return true
		}
	case *schema.ModifyIndex:
		if c.Change&^schema.ChangeComment == schema.NoChange {
			return false // COMMENT ON INDEX: catalog-only
		}
		if buildable(c.To) && (!oc.widening || plainColumns(c.To)) {
			oc.redefined = append(oc.redefined, c)
			return true
		}
		// Atlas's DROP INDEX and CREATE INDEX: a build that holds the writers.
	case *schema.AddPrimaryKey:
		if onlinePrimaryKey(c.P, tp.Want) && !oc.widening {
			oc.keyTo = c.P
			return true
		}
	case *schema.ModifyPrimaryKey:
		if onlinePrimaryKey(c.To, tp.Want) && !oc.widening {
			oc.keyFrom, oc.keyTo = c.From, c.To
			return true
		}
	case *schema.DropCheck, *schema.DropForeignKey, *schema.RenameIndex, *schema.DropPrimaryKey, *schema.AddAttr, *schema.ModifyAttr, *schema.DropAttr:
		return false // catalog-only: a comment, a name, a constraint dropped
	}
	oc.catalogOnly = false
	return false
}

// takeConstraint takes a check or foreign key added or redefined under a
// name into the recipes (take), reporting whether it did.
func (oc *onlineChanges) takeConstraint(c schema.Change) bool {
	switch c := c.(type) {
	case *schema.AddCheck:
		if c.C.Name != "" {
			oc.rc.checks = append(oc.rc.checks, c.C)
			return true
		}
	case *schema.ModifyCheck:
		if c.To.Name != "" && c.From.Name == c.To.Name {
			// Dropped in the transaction that adds the declared one NOT
			// VALID: the name never goes unenforced.
			oc.rc.checks = append(oc.rc.checks, c.To)
			oc.rc.replace[c.To.Name] = true
			return true
		}
	case *schema.AddForeignKey:
		if c.F.Symbol != "" && c.F.RefTable != nil && len(c.F.Columns) == len(c.F.RefColumns) {
			oc.rc.foreignKey = append(oc.rc.foreignKey, c.F)
			return true
		}
	case *schema.ModifyForeignKey:
		if c.To.Symbol != "" && c.To.RefTable != nil && len(c.To.Columns) == len(c.To.RefColumns) {
			if c.From.Symbol != c.To.Symbol {
				oc.other = append(oc.other, &schema.DropForeignKey{F: c.From})
			}
			// Under its name, dropped in the transaction that adds the
			// declared one NOT VALID.
			oc.rc.foreignKey = append(oc.rc.foreignKey, c.To)
			oc.rc.replace[c.To.Symbol] = true
			return true
		}
	}
	return false
}

// takeColumn files a column's change: a widening online or not, a NOT NULL
// to its recipe (the rest of the change, if any, to the alter).
func (oc *onlineChanges) takeColumn(tp *pgTablePlan, c *schema.ModifyColumn) bool {
	if c.Change.Is(schema.ChangeType) && typechange.Widens(c.From.Type.Type, c.To.Type.Type) && !typechange.BinaryCoercible(c.From.Type.Type, c.To.Type.Type) {
		if widenableOnline(tp.Live, c) {
			oc.widenOnline = append(oc.widenOnline, c.To)
		} else {
			oc.widenOther = append(oc.widenOther, c)
		}
		return true
	}
	if c.Change.Is(schema.ChangeNull) && !c.To.Type.Null {
		oc.rc.tighten = append(oc.rc.tighten, c.To)
		rest := *c
		rest.Change &^= schema.ChangeNull
		if rest.Change == schema.NoChange {
			return true
		}
		c = &rest
	}
	if c.Change.Is(schema.ChangeType) && !typechange.BinaryCoercible(c.From.Type.Type, c.To.Type.Type) {
		oc.catalogOnly = false
	}
	oc.other = append(oc.other, c)
	return true
}

// planOnline plans the table's changes as the online phases: the alter,
// the recipes, the concurrent builds, redefinitions and key, the swap of
// the unique keys, the drops, the widenings.
func planOnline(pc *core.PlanContext, tp *pgTablePlan, pre prelude, why string) error {
	oc := classifyOnline(tp, pre)
	if err := oc.planAlter(pc, tp, pre, why); err != nil {
		return err
	}
	rp := newRecipePlanner(pc.Schema, tp, why)
	oc.planRecipes(rp, tp)
	attach := oc.planIndexes(rp, tp)
	if ph, ok := swapKeys(pc.Schema, tp.Table, oc.dropKeys, attach, why); ok {
		tp.Phases = append(tp.Phases, ph)
	}
	for _, idx := range oc.dropIndexes {
		tp.Phases = append(tp.Phases, dropConcurrently(pc.Schema, tp.Table, idx.Name, why))
	}
	if len(oc.widenOther) > 0 {
		stmts, err := pc.Render(&schema.ModifyTable{T: tp.Want, Changes: oc.widenOther})
		if err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
		tp.Phases = append(tp.Phases, ops.Phase{Step: core.StepWiden, Name: ops.PhaseWiden, Kind: ops.KindStatements, Table: tp.Table, SQL: stmts, Transactional: true, Lock: ops.LockRewrite, Scans: true,
			Detail: why + "; these columns have no online widening (indexed, defaulted or NOT NULL)"})
	}
	// A redefined index is, after the shape phases, its new definition
	// under its name.
	built, gone := slices.Clone(oc.builds), slices.Clone(oc.dropIndexes)
	for _, m := range oc.redefined {
		built, gone = append(built, m.To), append(gone, m.From)
	}
	tp.Phases = append(tp.Phases, onlineWidening(pc.Schema, tp, oc.widenOnline, afterShape(pc.Schema, tp, built, oc.dropKeys, gone), why)...)
	return nil
}

// planAlter is the alter phase: the prelude's statements and Atlas's for
// the changes left to it.
func (oc *onlineChanges) planAlter(pc *core.PlanContext, tp *pgTablePlan, pre prelude, why string) error {
	alter := append(append([]string(nil), pre.replaced...), pre.renames...)
	if len(oc.other) > 0 {
		stmts, err := pc.Render(&schema.ModifyTable{T: tp.Want, Changes: oc.other})
		if err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
		alter = append(alter, stmts...)
	}
	if len(alter) == 0 {
		return nil
	}
	lock := ops.LockCatalog
	if !oc.catalogOnly {
		lock = ops.LockRewrite
	}
	tp.Phases = append(tp.Phases, ops.Phase{Step: core.StepShape, Name: ops.PhaseAlter, Kind: ops.KindStatements, Table: tp.Table, SQL: alter, Transactional: true, Lock: lock, Scans: !oc.catalogOnly, Detail: why})
	return nil
}

// planRecipes is the recipes' phases, after the drop of a SET NOT NULL's
// check left by a tightening no longer declared.
func (oc *onlineChanges) planRecipes(rp recipePlanner, tp *pgTablePlan) {
	oc.rc.filling = tp.Inflight.filling
	tightened := map[string]bool{}
	for _, c := range append(append([]*schema.Column(nil), oc.rc.tighten...), oc.rc.addColumns...) {
		tightened[c.Name] = true
	}
	for _, chk := range slices.Sorted(maps.Keys(tp.Inflight.nnChecks)) {
		if !tightened[tp.Inflight.nnChecks[chk]] {
			tp.Phases = append(tp.Phases, rp.dropNotNullCheck(chk))
		}
	}
	tp.Phases = append(tp.Phases, rp.plan(oc.rc, columnFills(tp.Live, tp.Want))...)
}

// planIndexes is the concurrent builds, the redefinitions, the primary key
// and the drop of what was built for a redefinition no longer declared;
// attach names the built indexes to become unique keys.
func (oc *onlineChanges) planIndexes(rp recipePlanner, tp *pgTablePlan) (attach []*schema.Index) {
	schemaName, why := rp.schema, rp.why
	for _, idx := range oc.builds {
		tp.Phases = append(tp.Phases, buildConcurrently(schemaName, tp.Table, idx.Name, idx, idx.Unique, tp.Inflight != nil && tp.Inflight.invalid[idx.Name], why))
		if isUniqueConstraint(idx) {
			attach = append(attach, idx)
		}
	}
	for _, m := range oc.redefined {
		next := nextIndexName(m.To.Name)
		tp.Phases = append(tp.Phases, rp.replaceIndex(m, tp.Inflight.invalid[next])...)
	}
	pkName := primaryKeyName(tp.Live, tp.Want)
	if oc.keyTo != nil {
		tp.Phases = append(tp.Phases, rp.replacePrimaryKey(oc.keyFrom, oc.keyTo, pkName, tp.Inflight.invalid[nextIndexName(pkName)])...)
	}
	orphans := tp.Inflight.orphans
	for _, base := range slices.Sorted(maps.Keys(tp.Inflight.next)) {
		if base == pkName && oc.keyTo != nil {
			continue
		}
		if !slices.ContainsFunc(oc.redefined, func(m *schema.ModifyIndex) bool { return m.To.Name == base }) {
			orphans = append(orphans, tp.Inflight.next[base]) // the redefinition was declared back
		}
	}
	for _, next := range orphans {
		tp.Phases = append(tp.Phases, dropConcurrently(schemaName, tp.Table, next, why+"; "+next+" was built for a redefinition no longer declared"))
	}
	return attach
}

// swapKeys is the swap_key phase: the unique keys dropped and the built
// indexes attached as keys, in one catalog-only transaction.
func swapKeys(schemaName, tableName string, dropKeys []*schema.Index, attach []*schema.Index, why string) (ops.Phase, bool) {
	if len(dropKeys) == 0 && len(attach) == 0 {
		return ops.Phase{}, false
	}
	qt := pgsql.Qualified(schemaName, tableName)
	var clauses, present, absent []string
	for _, idx := range dropKeys {
		clauses = append(clauses, "DROP CONSTRAINT "+dialect.QuoteIdent(idx.Name))
		absent = append(absent, pgsql.Literal(idx.Name))
	}
	for _, idx := range attach {
		n := idx.Name
		clauses = append(clauses, fmt.Sprintf("ADD CONSTRAINT %s UNIQUE USING INDEX %s", dialect.QuoteIdent(n), dialect.QuoteIdent(n)))
		// Attached, not deferrable, and over the declared index.
		present = append(present, fmt.Sprintf("EXISTS (SELECT 1 FROM pg_constraint c JOIN pg_index i ON i.indexrelid = c.conindid WHERE c.conrelid = to_regclass(%s) AND c.contype = 'u' AND c.conname = %s AND NOT c.condeferrable AND i.indisvalid AND %s)",
			pgsql.Literal(qt), pgsql.Literal(n), indexMatches(idx, true)))
	}
	done := "SELECT true"
	if len(present) > 0 {
		done = "SELECT " + strings.Join(present, " AND ")
	}
	if len(absent) > 0 {
		done += fmt.Sprintf(" AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass(%s) AND conname IN (%s))", pgsql.Literal(qt), strings.Join(absent, ", "))
	}
	return ops.Phase{Step: core.StepShape, Name: ops.PhaseSwapKey, Kind: ops.KindStatements, Table: tableName,
		SQL:           []string{"ALTER TABLE " + qt + " " + strings.Join(clauses, ", ")},
		Transactional: true, Lock: ops.LockCatalog, DoneWhen: done, Detail: why}, true
}

// refusedRebuild is what a table whose declared change is refused still
// runs of a rebuild in flight on it: once swapped, its finish (the carried
// foreign keys validated); before, its abandonment — the table is left as it
// is, without the trigger that logs its every write into a log nothing
// replays, and the rebuild begins again from the catalog once the refusal is
// resolved.
func refusedRebuild(schemaName string, tp *pgTablePlan) []ops.Phase {
	rb := tp.Inflight.rebuild
	switch {
	case rb == nil || !rb.Inflight():
		return nil
	case rb.State.Swapped:
		return []ops.Phase{rebuild.FinishPhase(schemaName, tp.Table, rb.State.Validate, "its declared shape refused; the rebuilt table is swapped in")}
	}
	return []ops.Phase{rebuild.AbandonPhase(schemaName, tp.Table, "its declared shape refused ("+strings.Join(tp.Refused, "; ")+"): the rebuild is dropped, and begins again once the refusal is resolved")}
}
