package reconcile_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
	"github.com/schemastate/schemastate/reconcile"
)

// hostAmendedDDL is task_session_subagents as a host's own schema init writes
// the amended shape (the host fixture of installed-base state 6: the key as
// an inline UNIQUE, a TEXT primary key without NOT NULL, INTEGER metrics on
// both dialects, one row 'host-row-1'), with the inline UNIQUE over uniq.
func hostAmendedDDL(t testing.TB, uniq string) string {
	t.Helper()
	ddl, err := fixtures.HostAmendedFixture(string(dialect.SQLite)) // the same text on both dialects
	require.NoError(t, err)
	const key = "UNIQUE (task_session_id, agent_execution_id, tool_call_id)"
	require.Contains(t, ddl, key)
	return strings.Replace(ddl, key, "UNIQUE ("+uniq+")", 1)
}

// AC-7, "the one shape a builder must not get wrong": after a reconcile, a row
// inserted without the three metric columns holds NULL in each — on a fresh
// table, on a rebuilt (SQLite) or swapped (PostgreSQL) pre-amendment table,
// and on the host's own amended table, on both dialects. Both writers bind
// NULL explicitly, so only an insert that leaves the columns out sees a
// DEFAULT 0 in the declaration or the rebuild.
func TestReconcile_AC7_OmittedMetricsStoreNull(t *testing.T) {
	stores := []struct {
		name string
		seed func(t *testing.T, db *dbtest.DB)
	}{
		{"fresh", func(*testing.T, *dbtest.DB) {}},
		{"pre-amendment", func(t *testing.T, db *dbtest.DB) { db.Legacy(t); seedLegacy(t, db) }},
		{"host-ddl", func(t *testing.T, db *dbtest.DB) {
			db.Exec(t, hostAmendedDDL(t, "task_session_id, agent_execution_id, tool_call_id"))
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				db.Host(t)
				st.seed(t, db)
				mustReconcile(t, db, quiet)
				db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s-metrics', 'k-metrics');
INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, agent_status, is_async, observed_at, updated_at)
 VALUES ('r-async', 's-metrics', 'k-metrics', 'unknown', 'toolu_async', 'async_launched', 1, '2026-08-01 00:00:00+00:00', '2026-08-01 00:00:00+00:00')`)
				require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE id = 'r-async'
 AND total_tokens IS NULL AND tool_use_count IS NULL AND duration_ms IS NULL`), "every metric NULL, none 0")
			})
		})
	}
}

// hostAmendedDDLNotNullID is hostAmendedDDL with the primary key spelled NOT
// NULL: on SQLite it then differs from the declaration only in how the key is
// spelled (an inline UNIQUE), which costs no rebuild.
func hostAmendedDDLNotNullID(t testing.TB, uniq string) string {
	t.Helper()
	return strings.Replace(hostAmendedDDL(t, uniq), "    id TEXT PRIMARY KEY,", "    id TEXT NOT NULL PRIMARY KEY,", 1)
}

// Installed-base state 6 reached through the host's own DDL: the first boot
// publishes execution_since (AC-33b) and keeps the row, and from then on a
// boot runs no DDL at all.
func TestAdversarial_State6_HostCreatedAmendedTableSettles(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		db.Exec(t, hostAmendedDDL(t, "task_session_id, agent_execution_id, tool_call_id"))
		require.True(t, observe(t, db).EndState.KeyBearing())

		mustReconcile(t, db)
		require.NotNil(t, readKeys(t, db).ExecutionSince)
		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE id = 'host-row-1' AND agent_execution_id = '6f1c2a9e-0000-4000-8000-000000000001'`))
		requireNoDDL(t, db)
	})
}

// Issue 22 §4: the host's `id TEXT PRIMARY KEY` inspects as nullable on SQLite
// (SQLite lets a non-INTEGER primary key hold NULL) while the declaration says
// NOT NULL. The reconcile enforces the declared shape: it rebuilds the table
// once, keeping every row, to a NOT NULL key and the fresh index set, and a
// boot after that runs no DDL. A row whose id is NULL cannot be copied: the
// rebuild refuses, naming the row, and leaves the table as it was until the
// row is given an id. (PostgreSQL's primary key is NOT NULL by construction;
// parity pins both dialects' end states identical.)
func TestReconcile_SQLiteNullableKeyRebuiltToDeclaredNotNull(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite).Host(t)
	db.Exec(t, hostAmendedDDL(t, "task_session_id, agent_execution_id, tool_call_id"))
	db.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, model, observed_at, updated_at) VALUES (NULL, 'host-session-1', 'host-task-1', 'unknown', 'toolu_null', 'kept', '2026-08-01 00:00:01+00:00', '2026-08-01 00:00:01+00:00')`)
	notNull := func() int {
		return count(t, db, `SELECT "notnull" FROM pragma_table_info('task_session_subagents') WHERE name = 'id'`)
	}
	require.Zero(t, notNull())
	rows := func() []string {
		return db.Strings(t, `SELECT quote(rowid) || '|' || quote(id) || '|' || tool_call_id || '|' || agent_execution_id || '|' || quote(model) FROM task_session_subagents ORDER BY rowid`)
	}
	tableSQL := func() []string {
		return db.Strings(t, `SELECT type || ' ' || name || ' ' || COALESCE(sql, '') FROM sqlite_master WHERE tbl_name = 'task_session_subagents' ORDER BY name`)
	}
	before, shapeBefore := rows(), tableSQL()

	rep, err := reconcile.Reconcile(ctx, db.DB, quiet)
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
	require.ErrorIs(t, err, ops.ErrNullRow)
	require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepShape).Status)
	require.Contains(t, err.Error(), `rowid "2"`, "the row is named")
	require.Contains(t, err.Error(), `tool_call_id "toolu_null"`)
	require.Contains(t, err.Error(), "holds NULL in id")
	require.Equal(t, before, rows(), "no row changed")
	require.Equal(t, shapeBefore, tableSQL(), "the table is as it was")
	require.False(t, rep.Certified)

	db.Exec(t, `UPDATE task_session_subagents SET id = 'host-row-2' WHERE id IS NULL`)
	rep = mustReconcile(t, db, quiet)
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
	require.Contains(t, rep.Step(reconcile.StepShape).Detail, "rebuilt task_session_subagents")
	require.Equal(t, 1, notNull())
	require.Equal(t, []string{`'host-row-1'|toolu_1|6f1c2a9e-0000-4000-8000-000000000001|NULL`, `'host-row-2'|toolu_null|unknown|'kept'`},
		db.Strings(t, `SELECT quote(id) || '|' || tool_call_id || '|' || agent_execution_id || '|' || quote(model) FROM task_session_subagents ORDER BY id`))
	requireAC33(t, db, freshIndexSet(t, db.Dialect))

	plan, err := reconcile.Plan(ctx, db.DB)
	require.NoError(t, err)
	require.Empty(t, plan.Statements())
	version := catalogVersion(t, db)
	rep = settle(t, db, quiet)
	require.True(t, rep.Certified)
	require.Equal(t, version, catalogVersion(t, db), "rebuilt once, never again")
}

// A pre-amendment table on which agent_execution_id was already added as a
// NULLABLE column (an ALTER TABLE … ADD COLUMN agent_execution_id TEXT with
// nothing else of the amendment). Its rows carry NULL — no execution identity
// — and tightening to NOT NULL failed on every boot on both dialects (SQLite's
// copy inserted the NULL, PostgreSQL's SET NOT NULL met it). AC-31 and AC-33
// clause 5: such a row ends with the shared 'unknown' sentinel; a real id
// already present is kept.
func TestAdversarial_AC33_NullableExecutionColumnFilledWithSentinel(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		legacyWith(t, db, "ALTER TABLE task_session_subagents ADD COLUMN agent_execution_id TEXT")
		seedLegacy(t, db)
		db.Exec(t, `UPDATE task_session_subagents SET agent_execution_id = '6f1c2a9e-0000-4000-8000-000000000002' WHERE id = 'r3'`)
		before := snapshot(t, db)

		reconcileToAC33(t, db)
		require.Equal(t, before, snapshot(t, db))
		require.Equal(t, 2, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE id IN ('r1', 'r2') AND agent_execution_id = 'unknown'`))
		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE id = 'r3' AND agent_execution_id = '6f1c2a9e-0000-4000-8000-000000000002'`))
	})
}

// TestStatus_InvalidKeyIndexIsNotTheEndState: while the key's unique index
// is INVALID (a concurrent build that failed), no upsert can use it (42P10):
// status must not report the end state, and the boot must not publish it.
func TestStatus_InvalidKeyIndexIsNotTheEndState(t *testing.T) {
	db := openPostgres(t)
	seedLegacyStore(t, db)
	mustReconcile(t, db, quiet)
	db.Exec(t, `ALTER TABLE task_session_subagents DROP CONSTRAINT `+keyName+`;
INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, agent_execution_id, source, observed_at, updated_at)
 SELECT 'dup', task_session_id, task_id, tool_call_id, agent_execution_id, source, observed_at, updated_at FROM task_session_subagents WHERE id = 'r1'`)
	_, err := db.DB.ExecContext(ctx, `CREATE UNIQUE INDEX CONCURRENTLY `+keyName+` ON task_session_subagents (task_session_id, agent_execution_id, tool_call_id)`)
	require.Error(t, err, "the build fails on the duplicate")
	db.Exec(t, `DELETE FROM task_session_subagents WHERE id = 'dup'`)
	require.Equal(t, []string{"false"}, db.Strings(t, `SELECT indisvalid::text FROM pg_index WHERE indexrelid = to_regclass('`+keyName+`')`))

	obs := observe(t, db)
	require.False(t, obs.EndState.ThreeColumnUnique, "an INVALID index is no key")
	require.False(t, obs.EndState.IndexesMatchDeclaration, "an INVALID index is not the declared one")
	require.False(t, obs.EndState.KeyBearing())

	_, err = db.DB.ExecContext(ctx, `INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, agent_execution_id, source, observed_at, updated_at)
 VALUES ('x', 's1', 'k1', 'toolu_x', 'e1', 'live', now(), now())
 ON CONFLICT (task_session_id, agent_execution_id, tool_call_id) DO NOTHING`)
	require.ErrorContains(t, err, "42P10", "the upsert cannot use an INVALID index")
}

// An index under a declared name whose part sorts by another collation than
// its column's is not the declared index: status does not report the
// indexes matching the declaration while it stands.
func TestStatus_IndexOfAnotherCollationIsNotTheDeclaredOne(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		mustReconcile(t, db, quiet)
		require.True(t, observe(t, db).EndState.IndexesMatchDeclaration)
		collation := map[dialect.Dialect]string{dialect.Postgres: `"C"`, dialect.SQLite: "NOCASE"}[db.Dialect]
		db.Exec(t, `DROP INDEX idx_subagents_task_id`)
		db.Exec(t, `CREATE INDEX idx_subagents_task_id ON task_session_subagents (task_id COLLATE `+collation+`)`)
		require.False(t, observe(t, db).EndState.IndexesMatchDeclaration, "an index of another collation is not the declared one")
		mustReconcile(t, db, quiet)
		require.True(t, observe(t, db).EndState.IndexesMatchDeclaration, "the boot replaced it")
	})
}
