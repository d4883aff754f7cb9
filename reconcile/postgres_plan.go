package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
)

// PostgreSQL planning: the single-transaction path and the online phases.
//
// A small table keeps the single transaction it always had (one ALTER TABLE,
// then one ALTER COLUMN … TYPE): its exclusive lock lasts milliseconds
// anyway, and every step is all-or-nothing. A table at or above the online
// threshold (WithOnlineAbove, measured on the live table) is changed in
// phases whose every exclusive lock is catalog-only:
//
//	alter          ADD COLUMN … NOT NULL DEFAULT 'unknown'      catalog-only on PG ≥ 11
//	build_index    CREATE UNIQUE INDEX CONCURRENTLY              no transaction; readers and writers proceed
//	swap_key       DROP CONSTRAINT <old>, ADD CONSTRAINT … USING INDEX   one short transaction
//	widen_expand   bigint shadow columns + a trigger keeping them equal
//	widen_copy     the rows, in short batched transactions
//	widen_contract DROP COLUMN <old>, RENAME COLUMN <shadow> TO <old>    one short transaction
//
// Every intermediate state is the old shape plus additive objects: the key
// stays the two-column one until swap_key commits, so AC-33's end state, and
// with it execution_since, is reached in exactly one transaction. A boot that
// stops between phases (a crash, a lock it could not get) leaves those
// objects; the next boot recognises them in the catalog (resumeOnline),
// plans from there and continues online whatever the table's size.

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
	rebuild *rebuildFacts
	// renamed maps a live unique constraint the shape step renames to its
	// declared name (renameEquivalentUniques).
	renamed map[string]string
}

func (f *inflight) any() bool { return f != nil && len(f.notes) > 0 }

// resumeOnline removes from an inspected live table the artefacts of an
// online upgrade in flight — shadow columns, INVALID indexes, an index built
// but not yet attached as the declared key — so the diff plans the remaining
// changes as if they were not there. invalid names the table's INVALID
// indexes (tableFacts).
func resumeOnline(live, want *schema.Table, invalid []string) *inflight {
	f := &inflight{invalid: map[string]bool{}}
	cols := live.Columns[:0:0]
	for _, c := range live.Columns {
		if base, ok := strings.CutSuffix(c.Name, shadowSuffix); ok {
			f.notes = append(f.notes, fmt.Sprintf("shadow column %s (widening of %s in flight)", c.Name, base))
			f.shadows = true
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
		if w, declared := want.Index(idx.Name); declared && isUniqueConstraint(w) && idx.Unique && !isUniqueConstraint(idx) && sameColumns(idx, w) && !hasPredicate(idx) {
			f.notes = append(f.notes, fmt.Sprintf("index %s built, not yet the key", idx.Name))
			continue
		}
		idxs = append(idxs, idx)
	}
	live.Indexes = idxs
	return f
}

// tableSize is what the path is chosen from.
type tableSize struct {
	bytes   int64
	rows    int64 // the planner's estimate (pg_class.reltuples); -1 when never analysed
	version int   // server_version_num
}

func (s tableSize) String() string {
	if s.rows < 0 {
		return fmt.Sprintf("%s, rows not yet estimated", byteSize(s.bytes))
	}
	return fmt.Sprintf("%s, ~%d rows", byteSize(s.bytes), s.rows)
}

func readTableSize(ctx context.Context, q dialect.Querier, schemaName, table string) (tableSize, error) {
	var s tableSize
	var rows float64
	err := q.QueryRowContext(ctx, `SELECT pg_table_size(c.oid), c.reltuples, current_setting('server_version_num')::int
 FROM pg_class c WHERE c.oid = to_regclass($1)`, qualified(schemaName, table)).Scan(&s.bytes, &rows, &s.version)
	s.rows = int64(rows)
	return s, err
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d kB", n>>10)
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
func (postgresDriver) planTable(pc *planContext, tp *tablePlan, f tableFacts) error {
	if tp.Live == nil {
		stmts, err := pc.render(&schema.AddTable{T: tp.Want})
		if err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
		if len(stmts) > 0 {
			tp.Phases = []Phase{{Step: StepShape, Name: PhaseCreate, Table: tp.Table, SQL: stmts, Transactional: true, Lock: LockCatalog,
				Detail: "new table"}}
		}
		return nil
	}
	tp.Inflight = resumeOnline(tp.Live, tp.Want, f.invalid)
	if tp.Inflight.rebuild = f.rebuild; f.rebuild.inflight() {
		tp.Inflight.notes = append(tp.Inflight.notes, f.rebuild.notes(tp.Table)...)
	}
	pre := prelude{replaced: replaceDeferrableKeys(pc.schema, tp.Live, tp.Want, f.deferrable)}
	names := make([]string, len(tp.Live.Indexes))
	for i, idx := range tp.Live.Indexes {
		names[i] = idx.Name
	}
	pre.renames = renameEquivalentUniques(pc.schema, tp.Live, tp.Want, f.deferrable)
	tp.Inflight.renamed = map[string]string{}
	for i, idx := range tp.Live.Indexes {
		if i < len(names) && names[i] != idx.Name {
			tp.Inflight.renamed[names[i]] = idx.Name
		}
	}
	changes, _, err := pc.diff(tp)
	if err != nil || len(tp.Refused) > 0 {
		return err
	}
	pre.fills = fillStatements(pc.schema, tp.Live, tp.Want)
	rest, widen := splitWidenings(changes)
	var stmts, widenSQL []string
	if len(widen) > 0 {
		if widenSQL, err = pc.render(&schema.ModifyTable{T: tp.Want, Changes: widen}); err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
	}
	if len(rest) > 0 {
		if stmts, err = pc.render(&schema.ModifyTable{T: tp.Want, Changes: rest}); err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
	}
	return planPhases(pc, tp, f.size, pre, append(pre.sql(), stmts...), widenSQL)
}

// fillStatements are the UPDATEs that apply fills on PostgreSQL, run before
// the ALTER in the same transaction.
func fillStatements(schemaName string, live, want *schema.Table) []string {
	var out []string
	for _, c := range want.Columns {
		if v, ok := fills(live, want)[c.Name]; ok {
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
func planPhases(pc *planContext, tp *tablePlan, size tableSize, pre prelude, alter, widen []string) error {
	if len(alter) == 0 && len(widen) == 0 && !tp.Inflight.any() {
		return nil
	}
	online := size.bytes >= pc.onlineAbove
	why := fmt.Sprintf("table is %s, at or above the online threshold %s: online phases", size, byteSize(pc.onlineAbove))
	switch {
	case tp.Inflight.any():
		online, why = true, "resuming an online upgrade ("+strings.Join(tp.Inflight.notes, "; ")+")"
	case online && size.version < 140000:
		// The batched copy walks the table by ctid ranges (TID range scans, PG 14).
		online, why = false, fmt.Sprintf("table is %s, but the server is older than PostgreSQL 14: single transaction", size)
	case !online:
		why = fmt.Sprintf("table is %s, under the online threshold %s: single transaction", size, byteSize(pc.onlineAbove))
	}
	if !online {
		if len(alter) > 0 {
			tp.Phases = append(tp.Phases, Phase{Step: StepShape, Name: PhaseAlter, Table: tp.Table, SQL: alter, Transactional: true, Lock: LockRewrite, Detail: why})
		}
		if len(widen) > 0 {
			tp.Phases = append(tp.Phases, Phase{Step: StepWiden, Name: PhaseWiden, Table: tp.Table, SQL: widen, Transactional: true, Lock: LockRewrite, Detail: why})
		}
		return nil
	}
	return planOnline(pc, tp, pre, why)
}

// planOnline classifies the table's changes into the online phases.
func planOnline(pc *planContext, tp *tablePlan, pre prelude, why string) error {
	schemaName := pc.schema
	table := qualified(schemaName, tp.Table)
	qt := dialect.QuoteIdent(schemaName) + "." + dialect.QuoteIdent(tp.Table)
	var (
		other       []schema.Change
		builds      []*schema.Index
		dropKeys    []*schema.Index
		dropIndexes []*schema.Index
		widenOnline []*schema.Column
		widenOther  []schema.Change
		// A fill reads every row; a deferrable key rebuilt as declared
		// builds its index: neither is catalog-only. A rename is.
		catalogOnly = pre.catalogOnly()
	)
	for _, c := range tp.Changes {
		switch c := c.(type) {
		case *schema.AddIndex:
			if buildable(c.I) {
				builds = append(builds, c.I)
				continue
			}
			catalogOnly = false
		case *schema.DropIndex:
			if isUniqueConstraint(c.I) {
				dropKeys = append(dropKeys, c.I)
			} else {
				dropIndexes = append(dropIndexes, c.I)
			}
			continue
		case *schema.ModifyColumn:
			if c.Change == schema.ChangeType && widens(c.From.Type.Type, c.To.Type.Type) {
				if widenableOnline(tp.Live, c) {
					widenOnline = append(widenOnline, c.To)
				} else {
					widenOther = append(widenOther, c)
				}
				continue
			}
			catalogOnly = false
		case *schema.AddColumn:
			if !c.C.Type.Null && !constantDefault(c.C) {
				catalogOnly = false
			}
		default:
			catalogOnly = false
		}
		other = append(other, c)
	}

	alter := pre.sql()
	if len(other) > 0 {
		stmts, err := pc.render(&schema.ModifyTable{T: tp.Want, Changes: other})
		if err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
		alter = append(alter, stmts...)
	}
	if len(alter) > 0 {
		lock := LockCatalog
		if !catalogOnly {
			lock = LockRewrite
		}
		tp.Phases = append(tp.Phases, Phase{Step: StepShape, Name: PhaseAlter, Table: tp.Table, SQL: alter, Transactional: true, Lock: lock, Detail: why})
	}
	var attach []string
	for _, idx := range builds {
		name := qualified(schemaName, idx.Name)
		var sqls []string
		if tp.Inflight != nil && tp.Inflight.invalid[idx.Name] {
			sqls = append(sqls, "DROP INDEX CONCURRENTLY IF EXISTS "+name)
		}
		unique := ""
		if idx.Unique {
			unique = "UNIQUE "
		}
		sqls = append(sqls, fmt.Sprintf("CREATE %sINDEX CONCURRENTLY %s ON %s (%s)", unique, dialect.QuoteIdent(idx.Name), qt, indexColumns(idx)))
		var key []string
		if idx.Unique {
			key = columnNames(idx)
		}
		tp.Phases = append(tp.Phases, Phase{Step: StepShape, Name: PhaseBuildIndex, Table: tp.Table, Object: idx.Name, SQL: sqls,
			Key: key, Lock: LockShareUpdateExclusive,
			DoneWhen: fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(%s) AND indisvalid)", literal(name)),
			Cleanup:  []string{"DROP INDEX CONCURRENTLY IF EXISTS " + name},
			Detail:   why})
		if isUniqueConstraint(idx) {
			attach = append(attach, idx.Name)
		}
	}
	if len(dropKeys) > 0 || len(attach) > 0 {
		var clauses, present, absent []string
		for _, idx := range dropKeys {
			clauses = append(clauses, "DROP CONSTRAINT "+dialect.QuoteIdent(idx.Name))
			absent = append(absent, literal(idx.Name))
		}
		for _, n := range attach {
			clauses = append(clauses, fmt.Sprintf("ADD CONSTRAINT %s UNIQUE USING INDEX %s", dialect.QuoteIdent(n), dialect.QuoteIdent(n)))
			present = append(present, literal(n))
		}
		done := fmt.Sprintf("SELECT (SELECT count(*) FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'u' AND conname IN (%s)) = %d",
			literal(table), orNone(present), len(present))
		if len(absent) > 0 {
			done += fmt.Sprintf(" AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass(%s) AND conname IN (%s))", literal(table), strings.Join(absent, ", "))
		}
		tp.Phases = append(tp.Phases, Phase{Step: StepShape, Name: PhaseSwapKey, Table: tp.Table,
			SQL:           []string{"ALTER TABLE " + qt + " " + strings.Join(clauses, ", ")},
			Transactional: true, Lock: LockCatalog, DoneWhen: done, Detail: why})
	}
	for _, idx := range dropIndexes {
		name := qualified(schemaName, idx.Name)
		tp.Phases = append(tp.Phases, Phase{Step: StepShape, Name: PhaseDropIndex, Table: tp.Table, Object: idx.Name,
			SQL:  []string{"DROP INDEX CONCURRENTLY IF EXISTS " + name},
			Lock: LockShareUpdateExclusive, DoneWhen: fmt.Sprintf("SELECT to_regclass(%s) IS NULL", literal(name)), Detail: why})
	}
	if len(widenOther) > 0 {
		stmts, err := pc.render(&schema.ModifyTable{T: tp.Want, Changes: widenOther})
		if err != nil {
			return fmt.Errorf("plan %s: %w", tp.Table, err)
		}
		tp.Phases = append(tp.Phases, Phase{Step: StepWiden, Name: PhaseWiden, Table: tp.Table, SQL: stmts, Transactional: true, Lock: LockRewrite,
			Detail: why + "; these columns have no online widening (indexed, defaulted or NOT NULL)"})
	}
	tp.Phases = append(tp.Phases, onlineWidening(schemaName, tp, widenOnline, afterShape(schemaName, tp, builds, dropKeys, dropIndexes), why)...)
	return nil
}

// pgIdent quotes an identifier as PostgreSQL's quote_ident does for the
// names a declaration uses (bare when lower-case and not reserved), so the
// dry run prints the index definitions pg_get_indexdef will read back.
func pgIdent(name string) string {
	plain := name != ""
	for i, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			plain = false
		}
	}
	if !plain || reservedWords[name] {
		return dialect.QuoteIdent(name)
	}
	return name
}

// reservedWords are PostgreSQL's reserved key words (quote_ident quotes them).
var reservedWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`all analyse analyze and any array as asc asymmetric authorization binary both case cast check collate collation
 column concurrently constraint create cross current_catalog current_date current_role current_schema current_time current_timestamp
 current_user default deferrable desc distinct do else end except false fetch for foreign freeze from full grant group having ilike in
 initially inner intersect into is isnull join lateral leading left like limit localtime localtimestamp natural not notnull null offset
 on only or order outer overlaps placing primary references returning right select session_user similar some symmetric system_user table
 tablesample then to trailing true union unique user using variadic verbose when where window with`) {
		m[w] = true
	}
	return m
}()

// afterShape is the live table's index set as the shape phases leave it —
// what the rebuild then carries. (Reconcile plans the widening again once
// the shape step has applied, from the catalog; this keeps the dry run's
// phases the ones it runs.)
func afterShape(schemaName string, tp *tablePlan, builds, dropKeys, dropIndexes []*schema.Index) []liveIndex {
	rb := tp.Inflight.rebuild
	if rb == nil {
		return nil
	}
	gone := map[string]bool{}
	for _, idx := range append(append([]*schema.Index(nil), dropKeys...), dropIndexes...) {
		gone[idx.Name] = true
	}
	var out []liveIndex
	for _, ix := range rb.indexes {
		if to, ok := tp.Inflight.renamed[ix.name]; ok {
			ix.name, ix.constraintName = to, to
		}
		if !gone[ix.name] {
			out = append(out, ix)
		}
	}
	for _, idx := range builds {
		ix := liveIndex{name: idx.Name, prefix: "INDEX " + dialect.QuoteIdent(idx.Name) + " ON " + qualified(schemaName, tp.Table) + " "}
		unique := ""
		if idx.Unique {
			unique = "UNIQUE "
		}
		cols := make([]string, len(idx.Parts))
		for i, part := range idx.Parts {
			cols[i] = pgIdent(part.C.Name)
			if part.Desc {
				cols[i] += " DESC"
			}
		}
		ix.def = "CREATE " + unique + ix.prefix + "USING btree (" + strings.Join(cols, ", ") + ")"
		if isUniqueConstraint(idx) {
			ix.contype, ix.constraintName = "u", idx.Name
		}
		out = append(out, ix)
	}
	slices.SortFunc(out, func(a, b liveIndex) int { return strings.Compare(a.name, b.name) })
	return out
}

// onlineWidening chooses between the shadow-table rebuild and the column
// copy for the columns, and plans what a rebuild in flight needs: its last
// phase after a swap, or its abandonment when its table changed under it or
// the rebuild no longer applies.
func onlineWidening(schemaName string, tp *tablePlan, cols []*schema.Column, indexes []liveIndex, why string) []Phase {
	rb := tp.Inflight.rebuild
	if rb == nil {
		rb = &rebuildFacts{}
	}
	if rb.state.swapped {
		return []Phase{finishPhase(schemaName, tp.Table, rb.state.validate, why)}
	}
	var phases []Phase
	if len(cols) == 0 {
		if rb.inflight() {
			phases = append(phases, abandonPhase(schemaName, tp.Table, why+"; nothing left to widen"))
		}
		return phases
	}
	reason := ""
	switch {
	case tp.Inflight.shadows:
		reason = "a column copy is in flight"
	case rebuildable(tp.Live) != "":
		reason = rebuildable(tp.Live)
	case len(rb.blockers) > 0:
		reason = strings.Join(rb.blockers, "; ")
	}
	if rb.inflight() {
		switch {
		case reason != "":
			phases = append(phases, abandonPhase(schemaName, tp.Table, why+"; the rebuild no longer applies: "+reason))
		case !rb.stateExists || rb.state.fingerprint != rb.fingerprint:
			phases = append(phases, abandonPhase(schemaName, tp.Table, why+"; the table changed since its rebuild began: starting again"))
		}
	}
	if reason != "" {
		return append(phases, widenPhases(schemaName, tp.Table, cols, why+"; not rebuilt ("+reason+"): column copy")...)
	}
	return append(phases, rebuildPhases(schemaName, tp.Live, tp.Want, cols, rb, indexes, why)...)
}

// widenPhases are expand, copy and contract for the columns.
func widenPhases(schemaName, table string, cols []*schema.Column, why string) []Phase {
	qt := dialect.QuoteIdent(schemaName) + "." + dialect.QuoteIdent(table)
	fn := dialect.QuoteIdent(schemaName) + "." + dialect.QuoteIdent(widenTrigger(table))
	trig := dialect.QuoteIdent(widenTrigger(table))
	var adds, assigns, sets, differ, drops, renames, names, shadows []string
	for _, c := range cols {
		col, sh := dialect.QuoteIdent(c.Name), dialect.QuoteIdent(c.Name+shadowSuffix)
		adds = append(adds, "ADD COLUMN IF NOT EXISTS "+sh+" bigint")
		assigns = append(assigns, fmt.Sprintf("NEW.%s := NEW.%s;", sh, col))
		sets = append(sets, sh+" = "+col)
		differ = append(differ, sh+" IS DISTINCT FROM "+col)
		drops = append(drops, "DROP COLUMN "+col)
		renames = append(renames, fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", qt, sh, col))
		names = append(names, literal(c.Name))
		shadows = append(shadows, literal(c.Name+shadowSuffix))
	}
	tbl := literal(qualified(schemaName, table))
	// Views (rules) reading a column about to be replaced: DROP COLUMN would
	// fail on them, so the widening stops, named, before it adds anything.
	blocked := fmt.Sprintf(`SELECT DISTINCT format('view %%s reads column %%s', v.oid::regclass, a.attname)
 FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid JOIN pg_class v ON v.oid = w.ev_class
 JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
 WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = to_regclass(%s) AND v.oid <> d.refobjid AND a.attname IN (%s)`, tbl, strings.Join(names, ", "))
	hasShadows := fmt.Sprintf("(SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname IN (%s) AND NOT attisdropped)", tbl, strings.Join(shadows, ", "))
	detail := why + "; columns " + strings.Join(names, ", ")
	return []Phase{
		{Step: StepWiden, Name: PhaseWidenExpand, Table: table, Transactional: true, Lock: LockCatalog,
			SQL: []string{
				"ALTER TABLE " + qt + " " + strings.Join(adds, ", "),
				fmt.Sprintf("CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $schemastate$ BEGIN %s RETURN NEW; END $schemastate$", fn, strings.Join(assigns, " ")),
				// Every INSERT and every UPDATE, whatever columns it sets: an
				// update of any column writes a new tuple, possibly at a ctid
				// past the pages the copy walks, and only the trigger can
				// keep that tuple's shadows equal. (An earlier trigger fired
				// on UPDATE OF the originals alone; its DoneWhen below is
				// false, so a resumed boot replaces it.)
				fmt.Sprintf("CREATE OR REPLACE TRIGGER %s BEFORE INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s()", trig, qt, fn),
			},
			DoneWhen: fmt.Sprintf("SELECT %s = %d AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND tgname = %s AND tgattr::text = '')",
				hasShadows, len(cols), tbl, literal(widenTrigger(table))),
			BlockedBy: blocked, Detail: detail},
		{Step: StepWiden, Name: PhaseWidenCopy, Table: table, Lock: LockRows,
			SQL: []string{fmt.Sprintf("UPDATE %s SET %s WHERE ctid >= $1::text::tid AND ctid < $2::text::tid AND (%s)",
				qt, strings.Join(sets, ", "), strings.Join(differ, " OR "))},
			DoneWhen: fmt.Sprintf("SELECT NOT EXISTS (SELECT 1 FROM %s WHERE %s)", qt, strings.Join(differ, " OR ")),
			Detail:   detail},
		{Step: StepWiden, Name: PhaseWidenContract, Table: table, Transactional: true, Lock: LockCatalog,
			SQL: append([]string{
				fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", trig, qt),
				fmt.Sprintf("DROP FUNCTION IF EXISTS %s()", fn),
				"ALTER TABLE " + qt + " " + strings.Join(drops, ", "),
			}, renames...),
			DoneWhen: fmt.Sprintf("SELECT %s = 0 AND (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname IN (%s) AND atttypid = 'bigint'::regtype AND NOT attisdropped) = %d",
				hasShadows, tbl, strings.Join(names, ", "), len(cols)),
			BlockedBy: blocked, Detail: detail},
	}
}

// widenableOnline reports a widening the expand/contract phases can make: an
// integer column becoming bigint that is nullable, has no default, and takes
// part in no index, key or constraint (replacing the column would drop them).
func widenableOnline(live *schema.Table, m *schema.ModifyColumn) bool {
	from, ok1 := m.From.Type.Type.(*schema.IntegerType)
	to, ok2 := m.To.Type.Type.(*schema.IntegerType)
	if !ok1 || !ok2 || !strings.EqualFold(to.T, "bigint") || !m.From.Type.Null || !m.To.Type.Null || m.From.Default != nil || m.To.Default != nil {
		return false
	}
	_ = from
	uses := func(parts []*schema.IndexPart) bool {
		for _, p := range parts {
			if p.C != nil && p.C.Name == m.From.Name || p.X != nil {
				return true
			}
		}
		return false
	}
	if live.PrimaryKey != nil && uses(live.PrimaryKey.Parts) {
		return false
	}
	for _, idx := range live.Indexes {
		if uses(idx.Parts) {
			return false
		}
	}
	for _, fk := range live.ForeignKeys {
		for _, c := range fk.Columns {
			if c.Name == m.From.Name {
				return false
			}
		}
	}
	for _, a := range live.Attrs {
		if _, ok := a.(*schema.Check); ok {
			return false
		}
	}
	return true
}

// buildable reports an index CREATE INDEX CONCURRENTLY can build as
// rendered here: plain columns, no predicate.
func buildable(idx *schema.Index) bool {
	if hasPredicate(idx) || len(idx.Parts) == 0 {
		return false
	}
	for _, p := range idx.Parts {
		if p.C == nil {
			return false
		}
	}
	return true
}

func indexColumns(idx *schema.Index) string {
	cols := make([]string, len(idx.Parts))
	for i, p := range idx.Parts {
		cols[i] = dialect.QuoteIdent(p.C.Name)
		if p.Desc {
			cols[i] += " DESC"
		}
	}
	return strings.Join(cols, ", ")
}

func constantDefault(c *schema.Column) bool {
	_, ok := c.Default.(*schema.Literal)
	return ok
}

// qualified is schema.name, quoted, for to_regclass and messages.
func qualified(schemaName, name string) string {
	return dialect.QuoteIdent(schemaName) + "." + dialect.QuoteIdent(name)
}

// literal quotes s as an SQL string literal (catalog names in a plan's
// checks, which are printed and must read standalone).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "NULL"
	}
	return strings.Join(xs, ", ")
}

// renameEquivalentUniques finds, on PostgreSQL, a live UNIQUE constraint that
// is a declared one under another name — the host's own DDL leaves the
// three-column key auto-named — and plans a RENAME CONSTRAINT instead of the
// drop and re-add a name-based diff would plan (which rebuilds the unique
// index under an ACCESS EXCLUSIVE lock). The live table is updated to the
// declared name so the diff sees the same constraint. A partial index, a
// plain unique index and a column order that differs are never equivalent.
func renameEquivalentUniques(schemaName string, live, want *schema.Table, deferrable map[string]bool) []string {
	var stmts []string
	for _, idx := range live.Indexes {
		if !isUniqueConstraint(idx) || deferrable[idx.Name] {
			continue
		}
		if _, declared := want.Index(idx.Name); declared {
			continue
		}
		for _, w := range want.Indexes {
			if _, taken := live.Index(w.Name); taken || !w.Unique || !sameColumns(idx, w) || hasPredicate(idx) {
				continue
			}
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s RENAME CONSTRAINT %s TO %s",
				dialect.QuoteIdent(schemaName), dialect.QuoteIdent(live.Name), dialect.QuoteIdent(idx.Name), dialect.QuoteIdent(w.Name)))
			idx.Name = w.Name
			idx.Attrs = append([]schema.Attr(nil), w.Attrs...)
			break
		}
	}
	return stmts
}

func isUniqueConstraint(idx *schema.Index) bool {
	for _, a := range idx.Attrs {
		if c, ok := a.(*postgres.Constraint); ok && c.T == "u" {
			return idx.Unique
		}
	}
	return false
}

func hasPredicate(idx *schema.Index) bool {
	for _, a := range idx.Attrs {
		if _, ok := a.(*postgres.IndexPredicate); ok {
			return true
		}
	}
	return false
}

// dropDeferrableUniques removes DEFERRABLE unique constraints from an
// inspected PostgreSQL table before the end state is observed. Atlas does not
// model deferrability, and INSERT … ON CONFLICT cannot use a deferrable
// constraint as its arbiter, so such a constraint is not AC-33 clause 2: the
// live upsert would fail against it, and execution_since must not be published.
func dropDeferrableUniques(ctx context.Context, q dialect.Querier, live *schema.Table) error {
	if live == nil {
		return nil
	}
	deferrable, err := deferrableUniques(ctx, q, live.Name)
	if err != nil {
		return err
	}
	kept := live.Indexes[:0:0]
	for _, idx := range live.Indexes {
		if !deferrable[idx.Name] {
			kept = append(kept, idx)
		}
	}
	live.Indexes = kept
	return nil
}

// replaceDeferrableKeys plans, on PostgreSQL, replacing a declared unique
// constraint that is live but DEFERRABLE: it is not the declared key (no ON
// CONFLICT arbiter, see dropDeferrableUniques), yet Atlas's diff, blind to
// deferrability, sees no change, and every boot would observe the end state
// missing and change nothing. The constraint is removed from the live table,
// so the diff adds the declared one, and dropped first by the returned
// statement, in the same transaction. deferrable names every deferrable
// unique (tableFacts), which renameEquivalentUniques never adopts either.
func replaceDeferrableKeys(schemaName string, live, want *schema.Table, deferrable map[string]bool) []string {
	var stmts []string
	kept := live.Indexes[:0:0]
	for _, idx := range live.Indexes {
		if _, declared := want.Index(idx.Name); declared && deferrable[idx.Name] {
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s DROP CONSTRAINT %s",
				dialect.QuoteIdent(schemaName), dialect.QuoteIdent(live.Name), dialect.QuoteIdent(idx.Name)))
			continue
		}
		kept = append(kept, idx)
	}
	live.Indexes = kept
	return stmts
}

func deferrableUniques(ctx context.Context, q querier, table string) (map[string]bool, error) {
	names, err := queryStrings(ctx, q, `SELECT con.conname FROM pg_constraint con
  JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = current_schema() AND c.relname = $1 AND con.contype = 'u' AND con.condeferrable`, table)
	if err != nil {
		return nil, err
	}
	deferrable := map[string]bool{}
	for _, n := range names {
		deferrable[n] = true
	}
	return deferrable, nil
}
