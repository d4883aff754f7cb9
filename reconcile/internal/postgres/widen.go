package postgres

import (
	"fmt"
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/typechange"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
)

// viewsReading names the views (rules) reading a column about to be
// replaced: DROP COLUMN would fail on them, so the widening stops, named,
// before it adds anything. tbl is the table as a literal, names the
// columns' names as literals.
func viewsReading(tbl string, names []string) string {
	return fmt.Sprintf(`SELECT DISTINCT format('view %%s reads column %%s', v.oid::regclass, a.attname)
 FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid JOIN pg_class v ON v.oid = w.ev_class
 JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
 WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = to_regclass(%s) AND v.oid <> d.refobjid AND a.attname IN (%s)`, tbl, strings.Join(names, ", "))
}

// widenPhases are expand, copy and contract for the columns; replace names
// shadow columns live with another type than bigint, dropped and added
// again by the expand.
func widenPhases(schemaName, table string, cols []*schema.Column, replace map[string]bool, why string) []ops.Phase {
	qt := dialect.QuoteIdent(schemaName) + "." + dialect.QuoteIdent(table)
	fn := dialect.QuoteIdent(schemaName) + "." + dialect.QuoteIdent(widenTrigger(table))
	trig := dialect.QuoteIdent(widenTrigger(table))
	var adds, assigns, sets, differ, drops, renames, names, shadows, twins []string
	for _, c := range cols {
		col, sh := dialect.QuoteIdent(c.Name), dialect.QuoteIdent(c.Name+shadowSuffix)
		if replace[c.Name+shadowSuffix] {
			twins = append(twins, "ALTER TABLE "+qt+" DROP COLUMN IF EXISTS "+sh)
		}
		adds = append(adds, "ADD COLUMN IF NOT EXISTS "+sh+" bigint")
		assigns = append(assigns, fmt.Sprintf("NEW.%s := NEW.%s;", sh, col))
		sets = append(sets, sh+" = "+col)
		differ = append(differ, sh+" IS DISTINCT FROM "+col)
		drops = append(drops, "DROP COLUMN "+col)
		renames = append(renames, fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", qt, sh, col))
		names = append(names, pgsql.Literal(c.Name))
		shadows = append(shadows, pgsql.Literal(c.Name+shadowSuffix))
	}
	tbl := pgsql.Literal(pgsql.Qualified(schemaName, table))
	blocked := viewsReading(tbl, names)
	hasShadows := fmt.Sprintf("(SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname IN (%s) AND NOT attisdropped)", tbl, strings.Join(shadows, ", "))
	detail := why + "; columns " + strings.Join(names, ", ")
	return []ops.Phase{
		{Step: core.StepWiden, Name: ops.PhaseWidenExpand, Kind: ops.KindStatements, Table: table, Transactional: true, Lock: ops.LockCatalog,
			SQL: append(twins,
				"ALTER TABLE "+qt+" "+strings.Join(adds, ", "),
				fmt.Sprintf("CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $schemastate$ BEGIN %s RETURN NEW; END $schemastate$", fn, strings.Join(assigns, " ")),
				// Every INSERT and every UPDATE, whatever columns it sets: an
				// update of any column writes a new tuple, possibly at a ctid
				// past the pages the copy walks, and only the trigger can
				// keep that tuple's shadows equal. (An earlier trigger fired
				// on UPDATE OF the originals alone; its DoneWhen below is
				// false, so a resumed boot replaces it.)
				fmt.Sprintf("CREATE OR REPLACE TRIGGER %s BEFORE INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s()", trig, qt, fn),
			),
			// Done when every shadow is bigint: a shadow of another type
			// under the name is no shadow of this widening.
			DoneWhen: fmt.Sprintf("SELECT %s = %d AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND tgname = %s AND tgattr::text = '')",
				strings.Replace(hasShadows, "AND NOT attisdropped", "AND atttypid = 'bigint'::regtype AND NOT attisdropped", 1), len(cols), tbl, pgsql.Literal(widenTrigger(table))),
			BlockedBy: blocked, Detail: detail},
		pgsql.LoopPhase(ops.Phase{Step: core.StepWiden, Name: ops.PhaseWidenCopy, Kind: ops.KindBatched, Table: table, Lock: ops.LockRows, Scans: true,
			DoneWhen: fmt.Sprintf("SELECT NOT EXISTS (SELECT 1 FROM %s WHERE %s)", qt, strings.Join(differ, " OR ")),
			Detail:   detail},
			ops.Loop{Batch: fmt.Sprintf("UPDATE %s SET %s WHERE ctid >= $1::text::tid AND ctid < $2::text::tid AND (%s)",
				qt, strings.Join(sets, ", "), strings.Join(differ, " OR "))}),
		{Step: core.StepWiden, Name: ops.PhaseWidenContract, Kind: ops.KindStatements, Table: table, Transactional: true, Lock: ops.LockCatalog,
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

// splitWidenings separates, on PostgreSQL, the changes that only widen a
// column's type (integer → bigint, timestamp(3) → timestamp) from the rest.
// A widening rewrites the table and fails while a view reads the column; it
// is not part of AC-33's end state, so it must not hold the key change back:
// the shape step applies the rest (the constraint swap stays all-or-nothing,
// AC-33a) and the widen step applies the widenings in a transaction of their
// own, failing — named, rolled back, retried next boot — without costing the
// installation its execution identity.
func splitWidenings(changes []schema.Change) (rest, widen []schema.Change) {
	for _, c := range changes {
		if m, ok := c.(*schema.ModifyColumn); ok && m.Change == schema.ChangeType && typechange.Widens(m.From.Type.Type, m.To.Type.Type) {
			widen = append(widen, c)
			continue
		}
		rest = append(rest, c)
	}
	return rest, widen
}
