// Package rebuild plans PostgreSQL's online widening as a shadow-table
// rebuild (rebuild.go) from the catalog facts it reads (rebuild_facts.go).
package rebuild

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
)

// The online widening as a shadow-table rebuild (pg_repack's algorithm).
//
// Widening a column in place rewrites every row: a batched UPDATE misses HOT
// on freshly loaded pages, writes a new tuple and an entry in every index,
// doubles heap and indexes and takes each row's lock from the host's
// writers. The rebuild instead fills a new table already in the final shape:
//
//	rebuild_prepare  the new table (LIKE the live one, widened, no indexes), a
//	                 changed-id log and the AFTER INSERT/UPDATE/DELETE trigger
//	                 on the live table that feeds it, and a state row (the
//	                 pages to copy, the catalog fingerprint)    one short transaction
//	rebuild_copy     INSERT … SELECT by ctid range, one batch per transaction,
//	                 the progress in the state row              no lock a host waits on
//	rebuild_replay   the logged ids: delete them from the new table, copy them
//	                 again from the live one, forget them — which also
//	                 removes the duplicates a row moved during the copy left
//	rebuild_index    every index, plain CREATE INDEX on the private table,
//	                 two builds at a time, each in a transaction of its own;
//	                 then ANALYZE it
//	rebuild_replay   again, on the indexed table, until the log is short
//	rebuild_swap     LOCK the live table, check the fingerprint, replay the
//	                 remainder, drop the live table, rename the new one in its
//	                 place, attach its keys, carry over foreign keys (NOT
//	                 VALID), grants, owner, comments, sequences   one short transaction
//	rebuild_finish   VALIDATE the carried foreign keys, drop the state
//
// The key change stays before the rebuild, in the shape step: writers need
// the three-column key from the boot on, and the rebuilt table carries the
// same key under the same name, so the live writer's ON CONFLICT (3 columns)
// resolves on either side of the swap. A statement queued behind the swap's
// lock re-resolves the table's name once it gets it, and finds the new table.
//
// A table the rename cannot carry whole — a view or rule over it (views bind
// by OID), a foreign key into it, a trigger, policy, publication, identity
// column, inheritance, storage parameters, column privileges — takes the
// column-copy path instead (widenPhases), the reason named in the phase
// detail. Anything added to the table while the rebuild runs changes the
// fingerprint: the swap refuses, and the next boot abandons the rebuild and
// starts again, so nothing an operator added is lost.

// Rebuild artefact names, all within PostgreSQL's 63-byte identifiers for
// the owned tables' names.
func NewTable(table string) string   { return "schemastate_new_" + table }
func LogTable(table string) string   { return "schemastate_log_" + table }
func StateTable(table string) string { return "schemastate_state_" + table }

// TempIndex names an index of the new table until the swap gives it
// its final name (the live table's index holds that name until then).
func TempIndex(name string) string {
	sum := sha1.Sum([]byte(name))
	return "schemastate_ix_" + hex.EncodeToString(sum[:8])
}

// ErrSourceChanged stops a rebuild's copy whose table no longer has
// the heap file the copy's page ranges were read from.
var ErrSourceChanged = errors.New("the table was truncated or rewritten since its rebuild began")

// Changed ends the detail of the abandonment planned for a rebuild
// whose table changed under it.
const Changed = "the table was truncated, rewritten or altered since its rebuild began: starting again"

// replayChunk is how many logged ids one replay transaction takes, and
// ReplayShort the log length at which the replay leaves the rest to the swap.
const (
	replayChunk = 20000
	ReplayShort = 2000
)

// AbandonPhase drops a rebuild's artefacts: a rebuild whose table changed
// under it, or that now has a blocker, starts again or takes the column copy.
func AbandonPhase(schemaName, table, why string) ops.Phase {
	qt := pgsql.Qualified(schemaName, table)
	trig := dialect.QuoteIdent(LogTable(table))
	return ops.Phase{Step: core.StepWiden, Name: ops.PhaseRebuildAbandon, Kind: ops.KindStatements, Table: table, Transactional: true, Lock: ops.LockCatalog,
		SQL: []string{
			fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", trig, qt),
			fmt.Sprintf("DROP FUNCTION IF EXISTS %s()", pgsql.Qualified(schemaName, LogTable(table))),
			fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s", pgsql.Qualified(schemaName, NewTable(table)), pgsql.Qualified(schemaName, LogTable(table)), pgsql.Qualified(schemaName, StateTable(table))),
		},
		DoneWhen: fmt.Sprintf("SELECT to_regclass(%s) IS NULL AND to_regclass(%s) IS NULL AND to_regclass(%s) IS NULL AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND tgname = %s)",
			pgsql.Literal(pgsql.Qualified(schemaName, NewTable(table))), pgsql.Literal(pgsql.Qualified(schemaName, LogTable(table))), pgsql.Literal(pgsql.Qualified(schemaName, StateTable(table))), pgsql.Literal(qt), pgsql.Literal(LogTable(table))),
		Detail: why}
}

// FinishPhase validates the foreign keys the swap carried NOT VALID and
// drops the rebuild's state (the new table was analysed before the swap).
func FinishPhase(schemaName, table string, validate []string, why string) ops.Phase {
	qt := pgsql.Qualified(schemaName, table)
	var sqls []string
	for _, fk := range validate {
		sqls = append(sqls, fmt.Sprintf("ALTER TABLE %s VALIDATE CONSTRAINT %s", qt, dialect.QuoteIdent(fk)))
	}
	sqls = append(sqls, "DROP TABLE IF EXISTS "+pgsql.Qualified(schemaName, StateTable(table)))
	return ops.Phase{Step: core.StepWiden, Name: ops.PhaseRebuildFinish, Kind: ops.KindConcurrent, Table: table, SQL: sqls, Lock: ops.LockShareUpdateExclusive, Scans: len(validate) > 0,
		DoneWhen: fmt.Sprintf("SELECT to_regclass(%s) IS NULL", pgsql.Literal(pgsql.Qualified(schemaName, StateTable(table)))),
		Detail:   why}
}

// rebuildNames are the names and lists a rebuild's phases share.
type rebuildNames struct {
	schema, table string
	// qt, qn, ql, qs: the live table, the new table, the log, the state.
	qt, qn, ql, qs string
	trig, fn       string // the logging trigger and its function
	qid            string // the row key the log names rows by
	colList        string // every column copied
	names          []string
	detail         string
}

func newRebuildNames(schemaName string, live, want *schema.Table, cols []*schema.Column, why string) rebuildNames {
	table := live.Name
	n := rebuildNames{schema: schemaName, table: table,
		qt: pgsql.Qualified(schemaName, table), qn: pgsql.Qualified(schemaName, NewTable(table)),
		ql: pgsql.Qualified(schemaName, LogTable(table)), qs: pgsql.Qualified(schemaName, StateTable(table)),
		trig: dialect.QuoteIdent(LogTable(table)), fn: pgsql.Qualified(schemaName, LogTable(table)),
		qid: dialect.QuoteIdent(rebuildRowKey(live))}
	for _, c := range cols {
		n.names = append(n.names, pgsql.Literal(c.Name))
	}
	// The live columns, and those the shape phases add before the rebuild.
	var all []string
	for _, c := range live.Columns {
		all = append(all, dialect.QuoteIdent(c.Name))
	}
	for _, c := range want.Columns {
		if _, ok := live.Column(c.Name); !ok {
			all = append(all, dialect.QuoteIdent(c.Name))
		}
	}
	n.colList = strings.Join(all, ", ")
	n.detail = why + "; columns " + strings.Join(n.names, ", ") + ", by rebuilding the table"
	return n
}

// stateDone is the catalog check that the state table holds cond.
func (n rebuildNames) stateDone(cond string) string {
	return fmt.Sprintf("SELECT to_regclass(%s) IS NOT NULL AND (SELECT %s FROM %s)", pgsql.Literal(n.qs), cond, n.qs)
}

// Phases plans the rebuild of a live table whose columns cols widen
// and whose indexes are indexes (afterShape).
func Phases(schemaName string, live, want *schema.Table, cols []*schema.Column, f *Facts, indexes []LiveIndex, why string) []ops.Phase {
	n := newRebuildNames(schemaName, live, want, cols, why)
	phases := []ops.Phase{n.prepare(cols, f),
		pgsql.LoopPhase(ops.Phase{Step: core.StepWiden, Name: ops.PhaseRebuildCopy, Kind: ops.KindRebuildCopy, Table: n.table, Lock: ops.LockNone, Scans: true,
			DoneWhen: n.stateDone("next_page >= pages"), Detail: n.detail},
			ops.Loop{
				Batch: fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE ctid >= $1::text::tid AND ctid < $2::text::tid", n.qn, n.colList, n.colList, n.qt),
				// Recorded only while the table's heap file is the one the
				// copy began on (rebuildCopy stops when it is not).
				Progress: fmt.Sprintf("UPDATE %s SET next_page = $1, rows = rows + $2 WHERE relfilenode = (SELECT relfilenode FROM pg_class WHERE oid = %s::regclass)", n.qs, pgsql.Literal(n.qt)),
			}),
		replayPhase(n.table, "copied", n.qn, n.ql, n.qt, n.qid, n.colList, n.detail),
	}
	builds, built, attach, validate := n.indexes(indexes, f)
	// The index builds, the longest first, run over rebuildIndexConns
	// connections (rebuildIndexes); then statistics for the new table once
	// it is indexed: the replay that follows then finds its ids by index,
	// not by a scan of the whole table, and the table is swapped in with
	// them (ANALYZE samples; it does not read every row).
	if len(builds) > 0 {
		slices.SortStableFunc(builds, func(a, b string) int { return buildWeight(b) - buildWeight(a) })
		phases = append(phases, pgsql.LoopPhase(ops.Phase{Step: core.StepWiden, Name: ops.PhaseRebuildIndex, Kind: ops.KindRebuildIndex, Table: n.table, Lock: ops.LockNone, Scans: true,
			DoneWhen: "SELECT " + strings.Join(built, " AND "),
			Detail:   n.detail}, ops.Loop{Builds: builds, Analyze: "ANALYZE " + n.qn}))
	}
	phases = append(phases, replayPhase(n.table, "indexed", n.qn, n.ql, n.qt, n.qid, n.colList, n.detail))
	// Done once the state row says so and the live table's catalog agrees:
	// the table under the live name has every widened column as bigint.
	swapped := fmt.Sprintf("%s AND (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname IN (%s) AND atttypid = 'bigint'::regtype AND NOT attisdropped) = %d",
		n.stateDone("swapped"), pgsql.Literal(n.qt), strings.Join(n.names, ", "), len(cols))
	return append(phases,
		ops.Phase{Step: core.StepWiden, Name: ops.PhaseRebuildSwap, Kind: ops.KindStatements, Table: n.table, Transactional: true, Lock: ops.LockCatalog, SQL: n.swap(f, attach, validate),
			DoneWhen: swapped, Detail: n.detail},
		FinishPhase(schemaName, n.table, validate, n.detail))
}

// prepare is the rebuild's first phase: the new table with the widened
// types, the log, its trigger, the state row.
func (n rebuildNames) prepare(cols []*schema.Column, f *Facts) ops.Phase {
	var types []string
	for _, c := range cols {
		types = append(types, fmt.Sprintf("ALTER COLUMN %s TYPE bigint", dialect.QuoteIdent(c.Name)))
	}
	return ops.Phase{Step: core.StepWiden, Name: ops.PhaseRebuildPrepare, Kind: ops.KindStatements, Table: n.table, Transactional: true, Lock: ops.LockCatalog,
		SQL: slices.Concat([]string{
			fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION INCLUDING STATISTICS INCLUDING COMMENTS)", n.qn, n.qt),
			fmt.Sprintf("ALTER TABLE %s %s", n.qn, strings.Join(types, ", ")),
		}, f.columnOptions, []string{
			fmt.Sprintf("CREATE TABLE %s (n bigserial PRIMARY KEY, id text NOT NULL)", n.ql),
			fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $schemastate$ BEGIN
 IF TG_OP <> 'INSERT' THEN INSERT INTO %s (id) VALUES (OLD.%s); END IF;
 IF TG_OP <> 'DELETE' AND (TG_OP = 'INSERT' OR NEW.%s IS DISTINCT FROM OLD.%s) THEN INSERT INTO %s (id) VALUES (NEW.%s); END IF;
 RETURN NULL; END $schemastate$`, n.fn, n.ql, n.qid, n.qid, n.qid, n.ql, n.qid),
			fmt.Sprintf("CREATE TRIGGER %s AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION %s()", n.trig, n.qt, n.fn),
			// The pages to copy are the table's when the trigger began logging:
			// every row written since is in the log, wherever it lands.
			// The fingerprint is the table's as the rebuild begins (the swap
			// refuses when it no longer is), relfilenode the heap file the
			// pages are of (each batch checks it).
			fmt.Sprintf(`CREATE TABLE %s AS SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int AS pages, 0::bigint AS next_page, 0::bigint AS rows,
 (%s)::text AS fingerprint, false AS swapped, NULL::text[] AS validate, (SELECT relfilenode FROM pg_class WHERE oid = %s::regclass) AS relfilenode`, n.qs, pgsql.Literal(n.qt), fingerprintSQL(n.qt, n.table), pgsql.Literal(n.qt)),
		}),
		DoneWhen: fmt.Sprintf("SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND tgname = %s)",
			pgsql.Literal(n.qn), pgsql.Literal(n.ql), pgsql.Literal(n.qs), pgsql.Literal(n.qt), pgsql.Literal(LogTable(n.table))),
		BlockedBy: fmt.Sprintf("SELECT x FROM (%s) b(x)", strings.NewReplacer("$1", pgsql.Literal(n.qt), "$2", pgsql.Literal(LogTable(n.table))).Replace(rebuildBlockersQuery)),
		Detail:    n.detail}
}

// indexes are the new table's index builds (with the catalog checks that
// they are built), the statements that attach them and the foreign keys to
// the swapped-in table, and the foreign keys the finish validates.
func (n rebuildNames) indexes(indexes []LiveIndex, f *Facts) (builds, built, attach, validate []string) {
	for _, ix := range indexes {
		tmp := TempIndex(ix.Name)
		qtmp := pgsql.Qualified(n.schema, tmp)
		// ReadFacts made sure the definition reads this way. IF NOT
		// EXISTS: each build commits on its own, so a resumed phase skips
		// the builds that already committed (a plain CREATE INDEX in a
		// transaction leaves no invalid index behind).
		at := strings.Index(ix.Def, ix.Prefix)
		builds = append(builds, ix.Def[:at]+"INDEX IF NOT EXISTS "+dialect.QuoteIdent(tmp)+" ON "+n.qn+" "+ix.Def[at+len(ix.Prefix):])
		built = append(built, rebuiltIndexIs(qtmp, ix.Def))
		switch ix.Contype {
		case "p":
			attach = append(attach, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s PRIMARY KEY USING INDEX %s", n.qt, dialect.QuoteIdent(ix.ConstraintName), dialect.QuoteIdent(tmp)))
		case "u":
			attach = append(attach, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s UNIQUE USING INDEX %s", n.qt, dialect.QuoteIdent(ix.ConstraintName), dialect.QuoteIdent(tmp)))
		default:
			attach = append(attach, fmt.Sprintf("ALTER INDEX %s RENAME TO %s", qtmp, dialect.QuoteIdent(ix.Name)))
		}
	}
	for _, fk := range f.foreignKeys {
		def := fk.def
		if fk.validated {
			def += " NOT VALID"
			validate = append(validate, fk.name)
		}
		attach = append(attach, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s %s", n.qt, dialect.QuoteIdent(fk.name), def))
	}
	return builds, built, attach, validate
}

// swap is the swap phase's statements: under ACCESS EXCLUSIVE, the
// fingerprint checked, the last logged rows replayed, the trigger dropped,
// the new table's grants made the live one's, the live table dropped and
// the new one renamed to it, its keys, indexes, foreign keys and the rest
// carried attached, the state row marked.
func (n rebuildNames) swap(f *Facts, attach, validate []string) []string {
	swap := []string{
		fmt.Sprintf("LOCK TABLE %s IN ACCESS EXCLUSIVE MODE", n.qt),
		fmt.Sprintf(`DO $schemastate$ BEGIN IF (%s) IS DISTINCT FROM (SELECT fingerprint FROM %s) THEN
 RAISE EXCEPTION '%s was truncated or rewritten, or its indexes, constraints, columns, grants or dependents changed, since its rebuild began: the rebuild starts again'; END IF; END $schemastate$`,
			fingerprintSQL(n.qt, n.table), n.qs, strings.ReplaceAll(n.table, "'", "''")),
		fmt.Sprintf("DELETE FROM %s WHERE %s IN (SELECT id FROM %s)", n.qn, n.qid, n.ql),
		fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s IN (SELECT id FROM %s)", n.qn, n.colList, n.colList, n.qt, n.qid, n.ql),
		fmt.Sprintf("DROP TRIGGER %s ON %s", n.trig, n.qt),
		fmt.Sprintf("DROP FUNCTION %s()", n.fn),
	}
	var validated []string
	for _, v := range validate {
		validated = append(validated, pgsql.Literal(v))
	}
	// The new table's grants start empty (default privileges may have
	// granted some at its creation), then get the live table's exactly.
	revoke := fmt.Sprintf(`DO $schemastate$ DECLARE r record; BEGIN
 FOR r IN SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = %s::regclass LOOP
  EXECUTE format('REVOKE ALL ON TABLE %s FROM %%s', CASE WHEN r.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
 END LOOP; END $schemastate$`, pgsql.Literal(n.qn), strings.ReplaceAll(n.qn, "'", "''"))
	for _, c := range f.carry {
		if strings.HasPrefix(c, "ALTER SEQUENCE ") {
			// Before the live table is dropped, which would drop the sequence.
			swap = append(swap, strings.Replace(c, " OWNED BY "+n.qt+".", " OWNED BY "+n.qn+".", 1))
		}
	}
	swap = append(swap, revoke,
		"DROP TABLE "+n.qt,
		fmt.Sprintf("ALTER TABLE %s RENAME TO %s", n.qn, dialect.QuoteIdent(n.table)))
	swap = append(swap, attach...)
	for _, c := range f.carry {
		if !strings.HasPrefix(c, "ALTER SEQUENCE ") {
			swap = append(swap, c)
		}
	}
	return append(swap, "DROP TABLE "+n.ql,
		fmt.Sprintf("UPDATE %s SET swapped = true, validate = ARRAY[%s]::text[]", n.qs, strings.Join(validated, ", ")))
}

// replayPhase replays the log: after the copy (which/what: "copied") and
// once the new table is indexed ("indexed").
func replayPhase(table, after, qn, ql, qt, qid, colList, detail string) ops.Phase {
	return pgsql.LoopPhase(ops.Phase{Step: core.StepWiden, Name: ops.PhaseRebuildReplay, Kind: ops.KindRebuildReplay, Table: table, Object: after, Lock: ops.LockNone, Scans: true,
		Detail: detail}, ops.Loop{
		Bound:  fmt.Sprintf("SELECT coalesce(max(n), 0) FROM (SELECT n FROM %s ORDER BY n LIMIT %d) c", ql, replayChunk),
		Delete: fmt.Sprintf("DELETE FROM %s WHERE %s IN (SELECT id FROM %s WHERE n <= $1)", qn, qid, ql),
		Copy:   fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s IN (SELECT id FROM %s WHERE n <= $1)", qn, colList, colList, qt, qid, ql),
		Forget: fmt.Sprintf("DELETE FROM %s WHERE n <= $1", ql),
	})
}

// buildWeight ranks an index build by its likely cost: a unique build
// checks every key, and each key column adds to every comparison.
func buildWeight(def string) int {
	w := 1 + strings.Count(def[strings.LastIndex(def, "("):], ",")
	if strings.HasPrefix(def, "CREATE UNIQUE ") {
		w++
	}
	return w
}

// rebuildRowKey is the column the log records: the primary key's, which
// Rebuildable requires to be one column.
func rebuildRowKey(live *schema.Table) string {
	return live.PrimaryKey.Parts[0].C.Name
}

// Rebuildable reports whether the rebuild can key its log on the table's
// primary key: one text column.
func Rebuildable(live *schema.Table) string {
	pk := live.PrimaryKey
	if pk == nil || len(pk.Parts) != 1 || pk.Parts[0].C == nil {
		return "it has no single-column primary key to log changed rows by"
	}
	if t, ok := pk.Parts[0].C.Type.Type.(*schema.StringType); !ok || !strings.EqualFold(t.T, "text") {
		return "its primary key is not a text column"
	}
	return ""
}

// rebuiltIndexIs is the done-check that the rebuild's index qtmp is built,
// valid, and of the live index's definition def (pg_get_indexdef): the
// same uniqueness, and the same text from its access method on.
func rebuiltIndexIs(qtmp, def string) string {
	unique := strings.HasPrefix(def, "CREATE UNIQUE ")
	tail := def
	if i := strings.Index(def, " USING "); i >= 0 {
		tail = def[i+len(" USING "):]
	}
	return fmt.Sprintf("EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(%s) AND indisvalid AND indisunique = %t AND split_part(pg_get_indexdef(indexrelid), ' USING ', 2) = %s)",
		pgsql.Literal(qtmp), unique, pgsql.Literal(tail))
}
