package reconcile_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// The shadow-table rebuild sees every change to its source: a TRUNCATE (of
// the table, or of its parent CASCADE), a rewrite (VACUUM FULL, CLUSTER, an
// ALTER that rewrites) and an ALTER of the catalog alone, made by the host
// or an operator while the copy is part way. The reconcile it happened in
// still ends with the declared shape and exactly the rows the table holds:
// none of those the change removed comes back, none written after it is
// lost, nothing an operator added is dropped, and nothing of the rebuild is
// left.

// afterTruncate is what the host writes once its TRUNCATE committed.
const afterTruncate = `INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, is_async, total_tokens, source, observed_at, updated_at)
 VALUES ('after_1', 's1', 'k1', 'toolu_after_1', 0, 7, 'live', '2026-07-31 00:00:00+00:00', '2026-07-31 00:00:00+00:00'),
        ('after_2', 's1', 'k1', 'toolu_after_2', 1, NULL, 'live', '2026-07-31 00:00:01+00:00', '2026-07-31 00:00:01+00:00')`

// lateWrites is what the host writes at the next copy batch after the
// change: in the rebuild begun again, or in the one going on.
const lateWrites = `INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, is_async, duration_ms, source, observed_at, updated_at)
 VALUES ('late_1', 's1', 'k1', 'toolu_late_1', 0, 2147483647, 'live', '2026-07-31 00:00:02+00:00', '2026-07-31 00:00:02+00:00');
UPDATE task_session_subagents SET tool_status = 'late', total_tokens = 9 WHERE id IN ('after_1', 'g2', 'r1')`

var sourceChanges = []struct {
	name   string
	change string
	// kept reads what an operator's change added, which must survive.
	kept string
	// refused: the change adds a column schema.hcl does not declare, which
	// the reconcile refuses to drop (resolved afterwards by dropping it).
	refused string
	// catalog: the change leaves the heap file as it was, or comes once
	// the copy is done, so the swap refuses; any other stops the copy's
	// next batch.
	catalog bool
	// at is the failpoint the change runs at, once: the third copy batch
	// when empty.
	at string
}{
	{name: "truncate", change: `TRUNCATE task_session_subagents;` + afterTruncate},
	// Once the copy is done, the swap's check under its lock sees it.
	{name: "truncate_after_the_index_builds", catalog: true, at: hooks.FailpointAfterPhase("task_session_subagents.rebuild_index"),
		change: `TRUNCATE task_session_subagents;` + afterTruncate},
	{name: "truncate_parent_cascade", change: `TRUNCATE task_sessions CASCADE;
INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1');` + afterTruncate},
	// Deleted rows leave room at the front of the heap: the rewrite moves
	// rows from pages the copy has not reached into pages it has.
	{name: "vacuum_full", change: `DELETE FROM task_session_subagents WHERE id LIKE 'g1%';
VACUUM FULL task_session_subagents`},
	{name: "cluster", change: `CLUSTER task_session_subagents USING task_session_subagents_pkey`},
	{name: "alter_of_the_catalog", catalog: true, change: `ALTER TABLE task_session_subagents ADD CONSTRAINT operator_async CHECK (is_async IN (0, 1)), ALTER COLUMN model SET STATISTICS 500`,
		kept: `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'task_session_subagents'::regclass AND conname = 'operator_async'
 UNION ALL SELECT attstattarget::text FROM pg_attribute WHERE attrelid = 'task_session_subagents'::regclass AND attname = 'model'`},
	{name: "alter_adding_a_column", refused: "operator_note", catalog: true,
		change: `ALTER TABLE task_session_subagents ADD COLUMN operator_note text;
UPDATE task_session_subagents SET operator_note = 'noted ' || id WHERE id LIKE 'g2%'`,
		kept: `SELECT id || '=' || COALESCE(operator_note, 'NULL') FROM task_session_subagents ORDER BY id`},
	// A USING expression rewrites the table, though the type stays.
	{name: "alter_that_rewrites", change: `ALTER TABLE task_session_subagents ALTER COLUMN turn_id TYPE text USING turn_id || ''`},
	{name: "alter_adding_a_column_by_a_rewrite", refused: "operator_seq",
		change: `CREATE SEQUENCE operator_seq;
ALTER TABLE task_session_subagents ADD COLUMN operator_seq bigint NOT NULL DEFAULT nextval('operator_seq')`,
		kept: `SELECT id || '=' || operator_seq FROM task_session_subagents ORDER BY id`},
}

func TestOnline_RebuildSeesEveryChangeToItsSource(t *testing.T) {
	fresh := freshIndexSet(t, openPostgres(t).Dialect)
	for _, tc := range sourceChanges {
		t.Run(tc.name, func(t *testing.T) {
			db := openPostgres(t).Host(t).Legacy(t)
			seedLegacy(t, db)
			seedMany(t, db, 2000)
			var after, kept []string
			batches := 0
			hook := reconcile.WithFailpoint(func(p string) error {
				switch {
				case tc.at == "" && p == hooks.FailpointCopyBatch:
					batches++
				case tc.at != "" && p == tc.at && after == nil:
					batches = 3
				default:
					return nil
				}
				switch batches {
				case 3:
					db.Exec(t, tc.change)
				case 4:
					db.Exec(t, lateWrites)
				default:
					return nil
				}
				after = snapshot(t, db)
				if tc.kept != "" {
					kept = db.Strings(t, tc.kept)
				}
				return nil
			})
			rep, err := reconcile.Reconcile(ctx, db.DB, append(append([]reconcile.Option{}, online...), hook)...)
			require.NotNil(t, after, "the change ran mid-copy")
			stopped := "rebuild_copy: copy pages 3–4: the table was truncated or rewritten since its rebuild began"
			if tc.catalog {
				stopped = "rebuild_swap: DO $schemastate$ BEGIN IF: ERROR: task_session_subagents was truncated or rewritten, or its indexes, constraints, columns, grants or dependents changed"
			}
			require.Contains(t, rep.Step(reconcile.StepWiden).Detail, stopped)
			if tc.refused != "" {
				// The table is left as the operator made it, without the
				// rebuild: no trigger logging its writes, no copy.
				require.ErrorIs(t, err, ops.ErrRefused, describe(rep))
				require.Contains(t, rep.Step(reconcile.StepRefused).Detail, "would drop column "+tc.refused)
				require.Contains(t, rep.Step(reconcile.StepWiden).Phases, "task_session_subagents.rebuild_abandon")
				require.Equal(t, "integer", columnType(t, db, "total_tokens"))
				require.Equal(t, after, snapshot(t, db))
				require.Equal(t, kept, db.Strings(t, tc.kept), "the operator's column and its values")
				requireNoRebuildLeft(t, db)
				requireDeclaredForeignKey(t, db)
				db.Exec(t, `ALTER TABLE task_session_subagents DROP COLUMN `+tc.refused)
				kept = nil
				rep, err = reconcile.Reconcile(ctx, db.DB, online...)
			}
			require.NoError(t, err, describe(rep))
			require.Equal(t, after, snapshot(t, db), "exactly the rows the table held after the change")
			if tc.at == "" && tc.refused == "" {
				require.GreaterOrEqual(t, batches, 4, "a batch after the change")
			}
			if batches >= 4 {
				require.Equal(t, 1, count(t, db, `SELECT count(*) FROM task_session_subagents WHERE id = 'late_1'`), "the write after the change")
			}
			if kept != nil {
				require.Equal(t, kept, db.Strings(t, tc.kept), "what the operator added is carried")
			}
			requireRebuiltAsDeclared(t, db, fresh)
			requireNoDDL(t, db)
		})
	}
}

// requireRebuiltAsDeclared requires the widened table in its declared shape,
// its foreign key declared and validated, and nothing of the rebuild left.
func requireRebuiltAsDeclared(t *testing.T, db *dbtest.DB, fresh []string) {
	t.Helper()
	requireAC33(t, db, fresh)
	for _, c := range []string{"total_tokens", "tool_use_count", "duration_ms"} {
		require.Equal(t, "bigint", columnType(t, db, c), c)
	}
	requireDeclaredForeignKey(t, db)
	requireNoRebuildLeft(t, db)
}

// requireDeclaredForeignKey requires the table's one foreign key, as
// declared and validated.
func requireDeclaredForeignKey(t *testing.T, db *dbtest.DB) {
	t.Helper()
	require.Equal(t, []string{"task_session_subagents_task_session_id_fkey FOREIGN KEY (task_session_id) REFERENCES task_sessions(id) ON DELETE CASCADE:true"},
		db.Strings(t, `SELECT conname || ' ' || pg_get_constraintdef(oid) || ':' || convalidated FROM pg_constraint WHERE conrelid = 'task_session_subagents'::regclass AND contype = 'f'`))
}

// requireNoRebuildLeft requires none of the rebuild's tables, function or
// trigger in the catalog.
func requireNoRebuildLeft(t *testing.T, db *dbtest.DB) {
	t.Helper()
	require.Empty(t, db.Strings(t, `SELECT relname::text FROM pg_class WHERE relname LIKE 'schemastate\_%' AND relkind IN ('r', 'S', 'i')
 UNION ALL SELECT proname::text FROM pg_proc WHERE proname LIKE 'schemastate\_%'
 UNION ALL SELECT tgname::text FROM pg_trigger WHERE tgname LIKE 'schemastate\_%'`), "nothing of the rebuild left")
}

// A copy stopped part way by one boot, its table truncated before the next:
// the next boot finds the fingerprint changed, drops the rebuild and begins
// it again, and none of the rows copied before the TRUNCATE comes back.
func TestOnline_RebuildTruncatedBetweenBootsBeginsAgain(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedMany(t, db, 2000)
	_, err := reconcile.Reconcile(ctx, db.DB, append(append([]reconcile.Option{}, online...), failAt(hooks.FailpointCopyBatch))...)
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
	require.Positive(t, count(t, db, `SELECT count(*) FROM schemastate_new_task_session_subagents`), "rows copied before the TRUNCATE")
	db.Exec(t, `TRUNCATE task_session_subagents;`+afterTruncate)
	after := snapshot(t, db)

	plan, err := reconcile.Plan(ctx, db.DB, online...)
	require.NoError(t, err)
	require.Contains(t, phaseIDs(plan.Phases()), "task_session_subagents.rebuild_abandon")
	rep := mustReconcile(t, db, online...)
	require.Contains(t, rep.Step(reconcile.StepWiden).Detail, "truncated, rewritten or altered since its rebuild began")
	require.Equal(t, after, snapshot(t, db))
	requireRebuiltAsDeclared(t, db, freshIndexSet(t, db.Dialect))
	requireNoDDL(t, db)
}

// A rebuild swapped in, its finish not yet run, on a table an operator then
// gives a column the declaration does not have: the table's shape is
// refused, and the finish still runs — the foreign key the swap carried NOT
// VALID is validated and the state dropped — so nothing of the rebuild
// waits on the refusal.
func TestOnline_RefusedTableStillFinishesItsSwappedRebuild(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedMany(t, db, 300)
	before := snapshot(t, db)
	_, err := reconcile.Reconcile(ctx, db.DB, append(append([]reconcile.Option{}, online...), failAt(hooks.FailpointAfterPhase("task_session_subagents.rebuild_swap")))...)
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
	require.Equal(t, []string{"false"}, db.Strings(t, `SELECT convalidated::text FROM pg_constraint WHERE conrelid = 'task_session_subagents'::regclass AND contype = 'f'`), "carried NOT VALID")
	db.Exec(t, `ALTER TABLE task_session_subagents ADD COLUMN operator_note text`)

	rep, err := reconcile.Reconcile(ctx, db.DB, online...)
	require.ErrorIs(t, err, ops.ErrRefused, describe(rep))
	require.Equal(t, []string{"task_session_subagents.rebuild_finish"}, rep.Step(reconcile.StepWiden).Phases)
	requireDeclaredForeignKey(t, db)
	requireNoRebuildLeft(t, db)
	require.Equal(t, before, snapshot(t, db))
	require.Equal(t, "bigint", columnType(t, db, "total_tokens"))
}

// The replay after the copy, on the unindexed new table where each chunk
// scans it whole, replays what was logged up to its start — every row the
// copy may have seen twice — and leaves what writers log meanwhile to the
// indexed replay; the upgrade still ends with every row and value.
func TestOnline_ReplayAfterCopyStopsAtTheLogAsItBegan(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedMany(t, db, 2500)
	metrics := `SELECT id || ':' || COALESCE(total_tokens::text, 'NULL') || ':' || COALESCE(tool_use_count::text, 'NULL') || ':' || COALESCE(duration_ms::text, 'NULL') || ':' || COALESCE(tool_status, 'NULL') FROM task_session_subagents ORDER BY id`
	var moved, replayed bool
	left := -1
	hook := reconcile.WithFailpoint(func(p string) error {
		switch {
		case p == hooks.FailpointCopyBatch && !moved:
			moved = true // more than replayShort entries before the copy ends
			_, err := db.DB.Exec(`UPDATE task_session_subagents SET tool_status = 'moved'`)
			return err
		case p == hooks.FailpointReplayBatch && !replayed:
			replayed = true // as many again, logged after the replay began
			_, err := db.DB.Exec(`UPDATE task_session_subagents SET tool_status = 'again'`)
			return err
		case p == hooks.FailpointAfterPhase("task_session_subagents.rebuild_replay.copied"):
			left = count(t, db, `SELECT COUNT(*) FROM schemastate_log_task_session_subagents`)
		}
		return nil
	})
	rep, err := reconcile.Reconcile(ctx, db.DB, append(append([]reconcile.Option{}, online...), hook)...)
	require.NoError(t, err, describe(rep))
	require.True(t, replayed)
	require.Equal(t, count(t, db, `SELECT COUNT(*) FROM task_session_subagents`), left, "the entries logged after the replay began are left to the indexed replay")
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	require.Equal(t, "bigint", columnType(t, db, "total_tokens"))
	got := db.Strings(t, metrics)
	require.Len(t, got, 2503)
	for _, r := range got {
		require.True(t, strings.HasSuffix(r, ":again"), "every row as last written: %s", r)
	}
}

// Every transaction of the rebuild's copy and of its replays hands the pages
// it dirties to the kernel's writeback as it writes them (backend_flush_after,
// SET LOCAL), so a checkpoint never finds the new heap dirty at once. A
// statement trigger on the new table records the setting each of their
// INSERTs ran under. Fails with either SET LOCAL removed, or made a session SET.
func TestOnline_CopyAndReplayFlushAsTheyWrite(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedMany(t, db, 300)
	db.Exec(t, `CREATE TABLE flush_seen (query text, setting text, isolation text)`)
	var moved bool
	hook := reconcile.WithFailpoint(func(p string) error {
		switch {
		case p == hooks.FailpointAfterPhase("task_session_subagents.rebuild_prepare"):
			_, err := db.DB.Exec(`CREATE FUNCTION flush_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO flush_seen VALUES (current_query(), current_setting('backend_flush_after'), current_setting('transaction_isolation')); RETURN NULL; END $$;
CREATE TRIGGER flush_seen AFTER INSERT ON schemastate_new_task_session_subagents FOR EACH STATEMENT EXECUTE FUNCTION flush_seen()`)
			return err
		case p == hooks.FailpointCopyBatch && !moved:
			moved = true // rows for the replays to copy again
			_, err := db.DB.Exec(`UPDATE task_session_subagents SET tool_status = 'moved'`)
			return err
		}
		return nil
	})
	mustReconcile(t, db, append(append([]reconcile.Option{}, online...), hook)...)
	db.Exec(t, `DROP TRIGGER flush_seen ON task_session_subagents`)
	copies := db.Strings(t, `SELECT setting FROM flush_seen WHERE query LIKE '%ctid%'`)
	// The replays run at REPEATABLE READ; the swap's replay of the last few
	// entries, under its lock, is not one of them.
	replays := db.Strings(t, `SELECT setting FROM flush_seen WHERE query LIKE '%IN (SELECT id FROM %schemastate_log_%' AND isolation = 'repeatable read'`)
	require.Greater(t, len(copies), 1, "the copy ran in batches")
	require.GreaterOrEqual(t, len(replays), 2, "the replay after the copy and the indexed one")
	for _, s := range append(copies, replays...) {
		require.Equal(t, "256kB", s)
	}
	// What runs after them on the same connection — the swap's replay of the
	// last entries and the backfill's INSERT, both READ COMMITTED — runs
	// under the server's own setting: the SET LOCAL ended with its transaction.
	after := db.Strings(t, `SELECT setting FROM flush_seen WHERE isolation = 'read committed' AND query NOT LIKE '%ctid%'`)
	require.NotEmpty(t, after)
	for _, s := range after {
		require.Equal(t, "0", s)
	}
}
