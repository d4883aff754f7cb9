package postgres

import (
	"fmt"
	"slices"
	"strings"

	atlaspg "ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/typechange"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/rebuild"
)

// PostgreSQL planning: the single-transaction path and the online phases.
//
// A table under the online threshold (WithOnlineAbove, measured on the live
// table) keeps one transaction per step: Atlas's ALTERs for the shape, the
// type widenings in the widen step's own. Its exclusive lock lasts
// milliseconds anyway, and every step is all-or-nothing.
//
// A table at or above it is changed in phases whose every exclusive lock is
// catalog-only (docs/reconcile.md, "Later edits on a large PostgreSQL
// table"). planOnline (online.go) sorts the diff:
//
//   - alter: what is catalog-only as Atlas renders it (a constant default, a
//     rename, a constraint dropped, a binary-coercible type change);
//   - the recipes (recipes.go): SET NOT NULL, a check, a foreign
//     key through check_rows, NOT VALID and VALIDATE; a column whose default
//     is evaluated per row added nullable, then filled in page batches;
//   - indexes (indexes.go): built and dropped CONCURRENTLY, a
//     redefined index or primary key built beside and swapped in, unique
//     keys attached USING INDEX in swap_key;
//   - widenings: the shadow-table rebuild (rebuild.go), or the
//     column copy (widen_expand, widen_copy, widen_contract) where the
//     rebuild does not apply.
//
// Every intermediate state is the old shape plus additive objects, each with
// the catalog query that says it is done. A boot that stops between phases
// (a crash, a lock it could not get) leaves them; the next boot recognises
// them in the catalog (resumeOnline), plans from there and continues online
// whatever the table's size.

// shadowSuffix names the bigint shadow column of a column being widened.
const shadowSuffix = "__schemastate_bigint"

// widenTrigger names the trigger (and its function) that keeps the shadow
// columns of table equal to their originals.
func widenTrigger(table string) string { return "schemastate_widen_" + table }

// inflight is what an online upgrade that stopped between two phases left
// in the catalog.
type inflight struct {
	// notes describe each artefact, for status, plan and the step detail.
	notes []string
	// invalid names INVALID indexes (a build that crashed or failed).
	invalid map[string]bool
	// shadows: a column copy's shadow columns are in flight.
	shadows bool
	// rebuild is the catalog's view of a shadow-table rebuild, in flight
	// or not (nil when not read).
	rebuild *rebuild.Facts
	// renamed maps a live unique constraint the shape step renames to its
	// declared name (renameEquivalentUniques).
	renamed map[string]string
	// nnChecks maps each NOT NULL check a SET NOT NULL recipe left to its
	// column (normalizeRecipes).
	nnChecks map[string]string
	// filling are the columns a recipe added whose fill is to be continued.
	filling []*schema.Column
	// next maps a declared index to the index built beside it for its new
	// definition (replaceIndex), not yet swapped in; orphans are such
	// indexes whose redefinition is no longer declared.
	next    map[string]string
	orphans []string
	// twins describe each object found under a declared name with another
	// definition, replaced by the declared one (definitions.go);
	// replace names the checks and foreign keys among them, which the
	// recipe drops in the transaction that adds the declared one.
	twins   []string
	replace map[string]bool
	// checks are the table's checks as the server normalizes them.
	checks *checkFacts
	// newTable is what a shadow-table rebuild in flight built (nil when
	// none), compared with what it builds.
	newTable *shadowTable
}

func (f *inflight) any() bool { return f != nil && len(f.notes) > 0 }

// resumeOnline is an inspected live table without the artefacts of an
// online upgrade in flight — shadow columns, INVALID indexes, an index built
// but not yet attached as the declared key — so the diff plans the remaining
// changes as if they were not there, with what it took out. invalid names
// the table's INVALID indexes (tableFacts).
func resumeOnline(live, want *schema.Table, invalid []string) (*schema.Table, *inflight) {
	f := &inflight{invalid: map[string]bool{}, replace: map[string]bool{}}
	live = core.CloneTable(live)
	cols := live.Columns[:0:0]
	for _, c := range live.Columns {
		if base, ok := strings.CutSuffix(c.Name, shadowSuffix); ok {
			f.notes = append(f.notes, fmt.Sprintf("shadow column %s (widening of %s in flight)", c.Name, base))
			f.shadows = true
			if t, ok := c.Type.Type.(*schema.IntegerType); !ok || !strings.EqualFold(t.T, "bigint") {
				f.replace[c.Name] = true
				f.twins = append(f.twins, fmt.Sprintf("shadow column %s found as %s, not bigint: replaced", c.Name, c.Type.Raw))
			}
			continue
		}
		cols = append(cols, c)
	}
	live.Columns = cols
	for _, n := range invalid {
		if _, declared := want.Index(n); !declared {
			continue // not ours to rebuild
		}
		f.invalid[n] = true
		f.notes = append(f.notes, fmt.Sprintf("INVALID index %s (dropped and rebuilt)", n))
	}
	idxs := live.Indexes[:0:0]
	for _, idx := range live.Indexes {
		if f.invalid[idx.Name] {
			continue
		}
		if strings.HasPrefix(idx.Name, nextIndexPrefix) && f.resumeNext(idx, live, want, slices.Contains(invalid, idx.Name)) {
			continue
		}
		if w, declared := want.Index(idx.Name); declared && isUniqueConstraint(w) && idx.Unique && !isUniqueConstraint(idx) && core.SameColumns(idx, w) && !hasPredicate(idx) {
			f.notes = append(f.notes, fmt.Sprintf("index %s built, not yet the key", idx.Name))
			continue
		}
		idxs = append(idxs, idx)
	}
	live.Indexes = idxs
	return live, f
}

// resumeNext takes an index built beside a declared one for its new
// definition (replaceIndex) out of the live table, recording it to be
// swapped in, or (INVALID, or built for an earlier definition) to be dropped
// and built again, or, when no declared index is redefined as it, to be
// dropped. It reports false for an index of the prefix that is not one.
func (f *inflight) resumeNext(idx *schema.Index, live, want *schema.Table, invalid bool) bool {
	candidates := slices.Clone(want.Indexes)
	if want.PrimaryKey != nil {
		pk := *want.PrimaryKey
		pk.Name, pk.Unique = primaryKeyName(live, want), true
		candidates = append(candidates, &pk)
	}
	for _, w := range candidates {
		if nextIndexName(w.Name) != idx.Name {
			continue
		}
		if f.next == nil {
			f.next = map[string]string{}
		}
		f.next[w.Name] = idx.Name
		if invalid || !describe.SameIndex(idx, w) || !samePredicate(idx, w) {
			f.invalid[idx.Name] = true
			f.notes = append(f.notes, fmt.Sprintf("index %s built for %s's new definition, INVALID or of an earlier one (dropped and rebuilt)", idx.Name, w.Name))
		} else {
			f.notes = append(f.notes, fmt.Sprintf("index %s built for %s's new definition (swapped in next)", idx.Name, w.Name))
		}
		return true
	}
	for _, a := range idx.Attrs {
		if c, ok := a.(*atlaspg.Constraint); ok && c.T != "" {
			return false // a constraint's index: not one we build beside
		}
	}
	f.orphans = append(f.orphans, idx.Name)
	f.notes = append(f.notes, fmt.Sprintf("index %s built for a redefinition no longer declared (dropped)", idx.Name))
	return true
}

// prelude is what precedes Atlas's statements in a PostgreSQL table's
// alter: the renames and drops the driver planned itself, and the NULL fills.
type prelude struct {
	// replaced drops each declared unique constraint that is live but
	// DEFERRABLE (replaceDeferrableKeys); the diff then adds it as declared.
	replaced []string
	// renames are RENAME CONSTRAINTs (renameEquivalentUniques): catalog-only.
	renames []string
	// fills are the UPDATEs that give a column being tightened its default
	// where it holds NULL (fills): they read every row.
	fills []string
}

func (p prelude) sql() []string {
	return append(append(append([]string(nil), p.replaced...), p.renames...), p.fills...)
}

// catalogOnly reports a prelude whose statements touch the catalog alone.
func (p prelude) catalogOnly() bool { return len(p.replaced) == 0 && len(p.fills) == 0 }

// planTable: a new table is one create phase; an existing one is normalized
// (an online upgrade in flight, a deferrable key, an equivalent key under
// another name), diffed, and planned as the single transaction or as online
// phases by its size (planPhases).
func (d Driver) PlanTable(pc *core.PlanContext, tp *core.TablePlan, f core.Facts) error {
	pf, _ := f.(tableFacts) // none for a new table
	ptp := &pgTablePlan{TablePlan: tp}
	err := d.planTable(pc, ptp, pf)
	if ptp.Inflight.any() {
		tp.Resumed = ptp.Inflight.notes
	}
	return err
}

// pgTablePlan is one table's plan with what PostgreSQL's planning found of
// an online upgrade in flight.
type pgTablePlan struct {
	*core.TablePlan
	// Inflight is what an online upgrade stopped between two phases left
	// in the catalog.
	Inflight *inflight
}

func (Driver) planTable(pc *core.PlanContext, tp *pgTablePlan, f tableFacts) error {
	if tp.Live == nil {
		return planCreate(pc, tp)
	}
	// Each normalization returns a new table: the inspected one is left as
	// the catalog holds it. The declared indexes' predicates and
	// expressions are compared as the server spells them.
	tp.Want = withServerForms(tp.Want, f.checks.indexForms())
	tp.Live = f.collations.Mark(tp.Live)
	live, in := resumeInflight(tp, f)
	var pre prelude
	live, pre.replaced = replaceDeferrableKeys(pc.Schema, live, tp.Want, f.deferrable)
	for _, w := range tp.Want.Indexes {
		if f.deferrable[w.Name] {
			in.twins = append(in.twins, fmt.Sprintf("unique key %s found DEFERRABLE (no ON CONFLICT arbiter): replaced", w.Name))
		}
	}
	live, pre.renames, in.renamed = renameEquivalentUniques(pc.Schema, live, tp.Want, f.deferrable)
	tp.Live = live // what the diff and the phases plan from
	tp.Twins = func(changes []schema.Change) []schema.Change {
		changes = core.CheckTwins(tp.Live, tp.Want, func(l, w *schema.Check) bool { return f.checks.same(w.Name) }, changes)
		return core.CollationTwins(tp.Live, tp.Want, fkTwins(tp.Live, tp.Want, f.deferrableFKs, changes))
	}
	changes, _, err := pc.Diff(tp.TablePlan)
	if err != nil {
		return err
	}
	in.twins = append(in.twins, core.TwinNotes(changes, f.notValid, f.deferrableFKs)...)
	if len(tp.Refused) > 0 {
		tp.Phases = refusedRebuild(pc.Schema, tp)
		return nil
	}
	pre.fills = fillStatements(pc.Schema, tp.Live, tp.Want)
	return planChanges(pc, tp, f.size, pre, changes)
}

// planCreate plans a table that does not exist: one create phase.
func planCreate(pc *core.PlanContext, tp *pgTablePlan) error {
	stmts, err := pc.Render(&schema.AddTable{T: tp.Want})
	if err != nil {
		return fmt.Errorf("plan %s: %w", tp.Table, err)
	}
	if len(stmts) > 0 {
		tp.Phases = []ops.Phase{{Step: core.StepShape, Name: ops.PhaseCreate, Kind: ops.KindStatements, Table: tp.Table, SQL: stmts, Transactional: true, Lock: ops.LockCatalog,
			Detail: "new table"}}
	}
	return nil
}

// resumeInflight reads off the live table what an online upgrade stopped
// between two phases left there (tp.Inflight, with a note for each), and
// returns the table without it, as the diff must see it.
func resumeInflight(tp *pgTablePlan, f tableFacts) (*schema.Table, *inflight) {
	live, in := resumeOnline(tp.Live, tp.Want, f.invalid)
	tp.Inflight = in
	if tp.Inflight.rebuild = f.rebuild; f.rebuild.Inflight() {
		tp.Inflight.notes = append(tp.Inflight.notes, f.rebuild.Notes(tp.Table)...)
	}
	in.checks, in.newTable = f.checks, f.newTable
	live, in.nnChecks, in.filling = normalizeRecipes(live, tp.Want, f)
	in.notNullTwins()
	var recipeNotes []string
	for _, c := range in.filling {
		recipeNotes = append(recipeNotes, fmt.Sprintf("column %s added, its fill in flight", c.Name))
	}
	for chk, col := range tp.Inflight.nnChecks {
		recipeNotes = append(recipeNotes, fmt.Sprintf("check %s (SET NOT NULL of %s in flight)", chk, col))
	}
	for name := range f.notValid {
		if declaredInFlight(live, tp.Want, name) {
			recipeNotes = append(recipeNotes, fmt.Sprintf("constraint %s NOT VALID (validated next)", name))
		}
	}
	slices.Sort(recipeNotes)
	tp.Inflight.notes = append(tp.Inflight.notes, recipeNotes...)
	return live, in
}

// planChanges renders the diff, the widenings apart from the rest
// (splitWidenings), and plans the phases that apply them.
func planChanges(pc *core.PlanContext, tp *pgTablePlan, size tableSize, pre prelude, changes []schema.Change) error {
	rest, widen := splitWidenings(changes)
	var stmts, widenSQL []string
	var err error
	if len(widen) > 0 {
		if widenSQL, err = pc.Render(&schema.ModifyTable{T: tp.Want, Changes: widen}); err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
	}
	if len(rest) > 0 {
		if stmts, err = pc.Render(&schema.ModifyTable{T: tp.Want, Changes: rest}); err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
	}
	return planPhases(pc, tp, size, pre, append(pre.sql(), stmts...), widenSQL)
}

// fillStatements are the UPDATEs that apply fills on PostgreSQL, run before
// the ALTER in the same transaction.
func fillStatements(schemaName string, live, want *schema.Table) []string {
	var out []string
	for _, c := range want.Columns {
		if v, ok := core.Fills(live, want)[c.Name]; ok {
			col := dialect.QuoteIdent(c.Name)
			out = append(out, fmt.Sprintf("UPDATE %s.%s SET %s = %s WHERE %s IS NULL",
				dialect.QuoteIdent(schemaName), dialect.QuoteIdent(want.Name), col, v, col))
		}
	}
	return out
}

// planPhases chooses the path by the live table's size and turns one table's
// diff into phases: alter is the single transaction's ALTERs (the prelude
// first), widen its type widenings.
func planPhases(pc *core.PlanContext, tp *pgTablePlan, size tableSize, pre prelude, alter, widen []string) error {
	if len(alter) == 0 && len(widen) == 0 && !tp.Inflight.any() && len(tp.Inflight.twins) == 0 {
		return nil
	}
	online := size.bytes >= pc.OnlineAbove
	why := fmt.Sprintf("table is %s, at or above the online threshold %s: online phases", size, byteSize(pc.OnlineAbove))
	switch {
	case tp.Inflight.any():
		online, why = true, "resuming an online upgrade ("+strings.Join(tp.Inflight.notes, "; ")+")"
	case online && size.version < 140000:
		// The batched copy walks the table by ctid ranges (TID range scans, PG 14).
		online, why = false, fmt.Sprintf("table is %s, but the server is older than PostgreSQL 14: single transaction", size)
	case !online:
		why = fmt.Sprintf("table is %s, under the online threshold %s: single transaction", size, byteSize(pc.OnlineAbove))
	}
	if tp.Inflight != nil && len(tp.Inflight.twins) > 0 {
		why += "; under a declared name: " + strings.Join(tp.Inflight.twins, "; ")
	}
	if !online {
		rest, widened := splitWidenings(tp.Changes)
		if len(alter) > 0 {
			lock, scans := ops.LockCatalog, !pre.catalogOnly() || slices.ContainsFunc(rest, pgScans)
			if scans {
				lock = ops.LockRewrite
			}
			tp.Phases = append(tp.Phases, ops.Phase{Step: core.StepShape, Name: ops.PhaseAlter, Kind: ops.KindStatements, Table: tp.Table, SQL: alter, Transactional: true, Lock: lock, Scans: scans, Detail: why})
		}
		if len(widen) > 0 {
			// A widening PostgreSQL makes in the catalog (varchar(n) growth,
			// varchar → text, …) neither scans nor rewrites.
			lock, scans := ops.LockCatalog, slices.ContainsFunc(widened, func(c schema.Change) bool {
				m := c.(*schema.ModifyColumn)
				return !typechange.BinaryCoercible(m.From.Type.Type, m.To.Type.Type)
			})
			if scans {
				lock = ops.LockRewrite
			}
			tp.Phases = append(tp.Phases, ops.Phase{Step: core.StepWiden, Name: ops.PhaseWiden, Kind: ops.KindStatements, Table: tp.Table, SQL: widen, Transactional: true, Lock: lock, Scans: scans, Detail: why})
		}
		return nil
	}
	return planOnline(pc, tp, pre, why)
}

// onlineWidening chooses between the shadow-table rebuild and the column
// copy for the columns, and plans what a rebuild in flight needs: its last
// phase after a swap, or its abandonment when its table changed under it or
// the rebuild no longer applies.
func onlineWidening(schemaName string, tp *pgTablePlan, cols []*schema.Column, indexes []rebuild.LiveIndex, why string) []ops.Phase {
	rb := tp.Inflight.rebuild
	if rb == nil {
		rb = &rebuild.Facts{}
	}
	if rb.State.Swapped {
		return []ops.Phase{rebuild.FinishPhase(schemaName, tp.Table, rb.State.Validate, why)}
	}
	var phases []ops.Phase
	if len(cols) == 0 {
		if rb.Inflight() {
			phases = append(phases, rebuild.AbandonPhase(schemaName, tp.Table, why+"; nothing left to widen"))
		}
		return phases
	}
	// The widening runs after the shape phases, on the table with its
	// declared primary key: the rebuild logs changed rows by that one.
	live := tp.Live
	if tp.Want.PrimaryKey != nil && (live.PrimaryKey == nil || !slices.Equal(describe.ColumnNames(live.PrimaryKey), describe.ColumnNames(tp.Want.PrimaryKey))) {
		after := *live
		after.PrimaryKey = tp.Want.PrimaryKey
		live = &after
	}
	reason := ""
	switch {
	case tp.Inflight.shadows:
		reason = "a column copy is in flight"
	case rebuild.Rebuildable(live) != "":
		reason = rebuild.Rebuildable(live)
	case len(rb.Blockers) > 0:
		reason = strings.Join(rb.Blockers, "; ")
	}
	if twins := tp.Inflight.newTable.twins(cols, indexes); rb.Inflight() && reason == "" && len(twins) > 0 {
		// Not this rebuild's own: started again, rather than swapped in.
		tp.Inflight.twins = append(tp.Inflight.twins, twins...)
		return append([]ops.Phase{rebuild.AbandonPhase(schemaName, tp.Table, why+"; the rebuild's new table is not its own ("+strings.Join(twins, "; ")+"): starting again")},
			rebuild.Phases(schemaName, live, tp.Want, cols, rb, indexes, why)...)
	}
	if rb.Inflight() {
		switch {
		case reason != "":
			phases = append(phases, rebuild.AbandonPhase(schemaName, tp.Table, why+"; the rebuild no longer applies: "+reason))
		case !rb.StateExists || rb.State.Fingerprint != rb.Fingerprint:
			phases = append(phases, rebuild.AbandonPhase(schemaName, tp.Table, why+"; "+rebuild.Changed))
		}
	}
	if reason != "" {
		return append(phases, widenPhases(schemaName, tp.Table, cols, tp.Inflight.replace, why+"; not rebuilt ("+reason+"): column copy")...)
	}
	return append(phases, rebuild.Phases(schemaName, live, tp.Want, cols, rb, indexes, why)...)
}
