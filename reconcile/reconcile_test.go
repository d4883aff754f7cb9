package reconcile_test

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

func TestReconcile_AC17_AC33b_FreshDatabase(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		rep := mustReconcile(t, db)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
		require.Contains(t, rep.Step(reconcile.StepShape).Detail, "created task_session_subagents")
		// AC-33b: no rebuild fired, and the key is written anyway.
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepExecutionSince).Status)
		ks := readKeys(t, db)
		require.NotNil(t, ks.ExecutionSince)
		_, err := instant.Parse(*ks.ExecutionSince)
		require.NoError(t, err)
		obs := observeKeyBearing(t, db)
		require.True(t, obs.EndState.IndexesMatchDeclaration)
	})
}

func TestReconcile_AC17_AC33b_PredatesFeature(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1');
INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at) VALUES ('m1', 's1', 'k1', 't1', 'hello', '{}', '2026-07-30 01:39:37.271235+00:00', '2026-07-30 01:39:37.271235+00:00')`)
		before := messageSnapshot(t, db)
		mustReconcile(t, db)
		require.Equal(t, before, messageSnapshot(t, db), "AC-17: existing data unaffected")
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
	})
}

// messageSnapshot is every host message's id, metadata and created_at.
func messageSnapshot(t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	s := db.Strings(t, "SELECT id || '|' || metadata || '|' || created_at FROM task_session_messages ORDER BY id")
	require.NotEmpty(t, s, "the host has messages to keep")
	return s
}

// AC-33 clauses 1–6 after each of two runs, on both dialects (AC-18, AC-34:
// the end state, not merely stability).
func TestReconcile_AC33_AC34_PreAmendmentTableTwice(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		before := snapshot(t, db)
		fresh := freshIndexSet(t, db.Dialect)

		rep := mustReconcile(t, db)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
		requireAC33(t, db, fresh)
		// Clause 5: every row survives with all values intact, timestamps
		// byte for byte, and agent_execution_id = 'unknown'.
		require.Equal(t, before, snapshot(t, db))
		require.Equal(t, 3, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE agent_execution_id = 'unknown'`))
		key := *readKeys(t, db).ExecutionSince

		rep = mustReconcile(t, db)
		require.Equal(t, reconcile.Unchanged, rep.Step(reconcile.StepShape).Status, describe(rep))
		require.Zero(t, rep.Step(reconcile.StepShape).Statements)
		requireAC33(t, db, fresh)
		require.Equal(t, before, snapshot(t, db), "AC-34: no row duplicated, dropped or re-sentinelled")
		require.Equal(t, key, *readKeys(t, db).ExecutionSince, "write-once")
	})
}

func TestReconcile_AC33_IndexSetParityFreshVersusMigrated(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		mustReconcile(t, db)
		migrated := observe(t, db).Indexes
		fresh := dbtest.Open(t, db.Dialect).Host(t)
		mustReconcile(t, fresh)
		require.Equal(t, observe(t, fresh).Indexes, migrated)
		require.Equal(t, catalogIndexes(t, fresh), catalogIndexes(t, db), "catalog-level index definitions")
	})
}

// catalogIndexes reads index definitions straight from the catalog, without
// Atlas, so parity does not rest on one inspector's reading.
func catalogIndexes(t *testing.T, db *dbtest.DB) []string {
	var q string
	if db.Dialect == dialect.SQLite {
		q = `SELECT name || ':' || COALESCE(sql, '') FROM sqlite_master WHERE type = 'index' AND tbl_name = 'task_session_subagents' ORDER BY name`
	} else {
		q = `SELECT indexname || ':' || replace(indexdef, current_schema() || '.', '') FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'task_session_subagents' ORDER BY indexname`
	}
	return db.Strings(t, q)
}

// AC-33a: the rebuild fails; boot survives, the pre-amendment table is intact,
// no key is written, and the next run succeeds.
func TestReconcile_AC33a_FailedRebuildLeavesLegacyShape(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		before := snapshot(t, db)
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		rep, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithLogger(logger), failAt(hooks.FailpointShapeApplied))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepShape).Status)
		requireLegacyIntact(t, db, before)
		// AC-20: WARN carrying the step's name.
		require.Contains(t, logs.String(), "level=WARN")
		require.Contains(t, logs.String(), "step=shape")

		reconcileToAC33(t, db)
		require.Equal(t, before, snapshot(t, db))
	})
}

func requireLegacyIntact(t *testing.T, db *dbtest.DB, before []string) {
	t.Helper()
	obs := observe(t, db)
	require.False(t, obs.EndState.ExecutionColumnNotNull, "no agent_execution_id column")
	require.False(t, obs.EndState.TwoColumnUniqueAbsent, "two-column key still present")
	require.False(t, obs.EndState.ThreeColumnUnique)
	require.Nil(t, obs.Keys.ExecutionSince, "AC-24b: no key after a failed rebuild")
	require.Equal(t, before, snapshot(t, db), "no lost rows, no partial table")
	require.Zero(t, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE 1 = 0`))
	var tables int
	if db.Dialect == dialect.SQLite {
		tables = count(t, db, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE '%subagents%'`)
	} else {
		tables = count(t, db, `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE '%subagents%'`)
	}
	require.Equal(t, 1, tables, "no leftover copy table")
}

// AC-33a with a real failure rather than a failpoint: on SQLite a legacy row
// whose (nullable) primary key is NULL cannot be copied into the declared NOT
// NULL key, and the rebuild refuses it by name; on PostgreSQL another session
// holds a lock on the table and the swap's lock_timeout expires.
func TestReconcile_AC33a_RealFailureRollsBack(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		undo := failShape(t, db)
		before := snapshot(t, db)
		rep, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithDDLLockTimeout(200*time.Millisecond))
		require.ErrorIs(t, err, reconcile.ErrStepFailed, describe(rep))
		if db.Dialect == dialect.SQLite {
			require.ErrorIs(t, err, ops.ErrNullRow)
			require.Contains(t, err.Error(), `tool_call_id "toolu_null"`)
		}
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepShape).Status)
		require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepExecutionSince).Status)
		require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepBackfill).Status, "AC-33c")
		requireLegacyIntact(t, db, before)

		undo()
		reconcileToAC33(t, db)
	})
}

// AC-24 / AC-33b: execution_since is the instant the end state was observed
// to hold — not earlier than the moment the boot began observing it, not
// later than the moment the key was written (the backfill step's first
// failpoint runs after the execution_since step). The failpoints read the
// reconcile's own clock (WithClock), which moves on at every reading, so a
// key sampled when the transaction began (at the lock on SQLite, at the
// step's BEGIN on PostgreSQL), before the observation or from another clock
// falls outside, as does a fixed instant.
func TestReconcile_AC24_ExecutionSinceSampledAfterObservingTheEndState(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		opts, read := clockAt(hooks.FailpointExecutionSinceObserve, hooks.FailpointBackfillMaxTaken)
		mustReconcile(t, db, append(opts, quiet)...)
		observing, written := read[hooks.FailpointExecutionSinceObserve], read[hooks.FailpointBackfillMaxTaken]
		require.False(t, observing.IsZero())
		require.False(t, written.IsZero())
		es, err := instant.Parse(*readKeys(t, db).ExecutionSince)
		require.NoError(t, err)
		require.False(t, es.Before(observing), "execution_since %s precedes the observation's start %s", es, observing)
		require.False(t, es.After(written), "execution_since %s follows the key write %s", es, written)
	})
}

// AC-33b, the discriminating case: the table is already amended but the key
// is missing (a committed rebuild whose key write failed). The next run writes
// the key with no rebuild and no table creation.
func TestReconcile_AC33b_SelfHealsMissingKey(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		rep, err := reconcile.Reconcile(ctx, db.DB, failAt(hooks.FailpointExecutionSinceWrite))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status)
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepExecutionSince).Status)
		obs := observe(t, db)
		require.True(t, obs.EndState.KeyBearing(), "the rebuild committed")
		require.Nil(t, obs.Keys.ExecutionSince)

		rep = mustReconcile(t, db)
		require.Equal(t, reconcile.Unchanged, rep.Step(reconcile.StepShape).Status, "no rebuild, no creation")
		require.Zero(t, rep.Step(reconcile.StepShape).Statements)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepExecutionSince).Status)
		require.NotNil(t, readKeys(t, db).ExecutionSince)
	})
}

// The negative half of AC-33b on a table amended long ago: the key was
// deleted by hand; it comes back although nothing about the shape changed.
func TestReconcile_AC33b_KeyWrittenWithoutRebuild(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		mustReconcile(t, db)
		db.Exec(t, `DELETE FROM kandev_meta WHERE key = 'subagent_context_execution_since'`)
		rep := mustReconcile(t, db)
		require.Equal(t, reconcile.Unchanged, rep.Step(reconcile.StepShape).Status)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepExecutionSince).Status)
		require.NotNil(t, readKeys(t, db).ExecutionSince)
	})
}

// AC-24 point 5: a key already present is never rewritten, whatever its precision.
func TestReconcile_AC24_PresentExecutionSinceNeverRewritten(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		db.Exec(t, `INSERT INTO kandev_meta (key, value) VALUES ('subagent_context_execution_since', '2026-08-01T00:00:00Z')`)
		mustReconcile(t, db)
		mustReconcile(t, db)
		require.Equal(t, "2026-08-01T00:00:00Z", *readKeys(t, db).ExecutionSince)
	})
}

// A table that references task_session_subagents with ON DELETE CASCADE keeps
// every row through the rebuild: foreign keys are off on the rebuild's
// connection, so DROP TABLE cascades nothing.
func TestReconcile_RebuildKeepsCascadingChildRows(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		db.Exec(t, `CREATE TABLE subagent_notes (id TEXT PRIMARY KEY, subagent_id TEXT NOT NULL REFERENCES task_session_subagents(id) ON DELETE CASCADE, note TEXT);
INSERT INTO subagent_notes (id, subagent_id, note) VALUES ('n1', 'r1', 'keep me');
INSERT INTO subagent_notes (id, subagent_id, note) VALUES ('n2', 'r2', 'and me')`)
		rep := mustReconcile(t, db)
		require.NotContains(t, rep.Step(reconcile.StepShape).Detail, "foreign_key_check skipped", "a referencing table is checked")
		require.Equal(t, 2, count(t, db, `SELECT COUNT(*) FROM subagent_notes`))
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
		if db.Dialect == dialect.SQLite {
			rows, err := db.Query(`PRAGMA foreign_key_check`)
			require.NoError(t, err)
			require.False(t, rows.Next(), "no foreign-key violation anywhere")
			rows.Close()
		}
		// The cascade still works after the rebuild (AC-16 on the rebuilt table).
		db.Exec(t, `DELETE FROM task_session_subagents WHERE id = 'r1'`)
		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM subagent_notes`))
	})
}

// Steady state: a database already in its declared shape runs no DDL at all.
// SQLite's schema_version changes on any DDL; PostgreSQL rewrites the catalog
// rows (new xmin) of anything an ALTER or CREATE touches.
func TestReconcile_SteadyStateRunsNoDDL(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		mustReconcile(t, db)
		requireNoDDL(t, db)
	})
}

// Issue 19: the plan is one value both dialects apply. What Plan returns
// (and `plan --json` prints) is, statement by statement, what the reconcile
// runs (the exec hook) and, phase by phase, what its report says it ran.
func TestReconcile_PlanIsWhatRuns(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		plan, err := reconcile.Plan(ctx, db.DB, quiet)
		require.NoError(t, err)
		require.NotEmpty(t, plan.Statements())
		var ids []string
		for _, ph := range plan.Phases() {
			ids = append(ids, ph.ID())
		}
		var ran []string
		rep := mustReconcile(t, db, quiet, reconcile.WithExecHook(func(s string) { ran = append(ran, s) }))
		require.Equal(t, plan.Statements(), ran, "the plan's statements are what ran, in order")
		var did []string
		for _, s := range rep.Steps {
			did = append(did, s.Phases...)
		}
		require.Equal(t, ids, did, "the plan's phases are what the report says ran")
	})
}
