package reconcile_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile"
)

// A long-running reader holding the table during the swap: the swap's short
// lock_timeout attempts give up within the budget, the step fails naming the
// reader, and nothing is half done; the next boot succeeds.
func TestOnline_LongReaderDuringSwapFailsCleanlyThenSucceeds(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedHistory(t, db)
	before := snapshot(t, db)
	other, err := sql.Open("pgx", db.DSN)
	require.NoError(t, err)
	defer other.Close()
	var reader *sql.Tx
	var readerPID int
	hold := reconcile.WithFailpoint(func(p string) error {
		if p != hooks.FailpointAfterPhase("task_session_subagents.build_index."+subagentsKey) {
			return nil
		}
		// The host's report query, left open: ACCESS SHARE until it ends.
		var err error
		if reader, err = other.Begin(); err != nil {
			return err
		}
		if err := reader.QueryRow(`SELECT pg_backend_pid()`).Scan(&readerPID); err != nil {
			return err
		}
		t.Cleanup(func() { reader.Rollback() })
		_, err = reader.Exec(`SELECT count(*) FROM task_session_subagents`)
		return err
	})
	opts := append(append([]reconcile.Option{}, online...), hold, reconcile.WithDDLLockTimeout(600*time.Millisecond), reconcile.WithDDLLockAttempt(100*time.Millisecond))
	rep, err := reconcile.Reconcile(ctx, db.DB, opts...)
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
	shape := rep.Step(reconcile.StepShape)
	require.Equal(t, reconcile.Failed, shape.Status)
	require.ErrorIs(t, shape.Err, ops.ErrLockNotAcquired)
	require.Contains(t, shape.Detail, "swap_key")
	require.Contains(t, shape.Detail, fmt.Sprintf("pid %d (AccessShareLock", readerPID), "the reader is named")
	require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepExecutionSince).Status)
	require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepBackfill).Status)
	require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepWiden).Status, "the widening waits for the shape it is planned for")
	require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_class WHERE relname LIKE 'schemastate%'`), "no rebuild begun")
	obs := observe(t, db)
	require.False(t, obs.EndState.TwoColumnUniqueAbsent, "the two-column key is still the key")
	require.Nil(t, obs.Keys.ExecutionSince)
	require.Equal(t, "task_session_subagents.swap_key", obs.Upgrade.Next)
	require.NoError(t, reader.Rollback())

	rep = mustReconcile(t, db)
	require.Contains(t, rep.Step(reconcile.StepShape).Detail, "resuming an online upgrade")
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	requireBackfilledOnce(t, db)
	require.Subset(t, snapshot(t, db), before)
}

// A host view over a metric column blocks the widening, named, before it
// adds anything; AC-33, execution_since and the backfill go ahead; every
// boot retries; once the view is gone the widening completes online.
func TestOnline_WideningBlockedByViewIsNamedAndRetried(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedHistory(t, db)
	before := snapshot(t, db)
	db.Exec(t, `CREATE VIEW subagent_tokens AS SELECT task_session_id, SUM(total_tokens) AS tokens FROM task_session_subagents GROUP BY task_session_id`)
	for boot := 0; boot < 2; boot++ {
		rep, err := reconcile.Reconcile(ctx, db.DB, online...)
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepWiden).Status)
		require.ErrorIs(t, rep.Step(reconcile.StepWiden).Err, ops.ErrPhaseBlocked)
		require.Contains(t, rep.Step(reconcile.StepWiden).Detail, "view subagent_tokens reads column total_tokens")
		require.NotEqual(t, reconcile.Failed, rep.Step(reconcile.StepShape).Status)
		require.NotEqual(t, reconcile.Failed, rep.Step(reconcile.StepExecutionSince).Status)
		require.NotEqual(t, reconcile.Failed, rep.Step(reconcile.StepBackfill).Status)
		require.True(t, observe(t, db).EndState.KeyBearing())
		require.Equal(t, "integer", columnType(t, db, "total_tokens"))
		require.Zero(t, count(t, db, `SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() AND column_name LIKE '%schemastate%'`), "nothing added")
	}
	requireBackfilledOnce(t, db)

	// A view created once a rebuild has begun: the rebuild no longer
	// applies (the rename would leave the view on the old table), its
	// abandonment and the column copy that replaces it are one transaction
	// the view blocks, so the rebuild stays, its log kept by the trigger, and
	// completes once the view is gone.
	db.Exec(t, `DROP VIEW subagent_tokens`)
	_, err := reconcile.Reconcile(ctx, db.DB, append(online, failAt(hooks.FailpointAfterPhase("task_session_subagents.rebuild_prepare")))...)
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
	db.Exec(t, `CREATE VIEW subagent_tokens AS SELECT task_session_id, SUM(total_tokens) AS tokens FROM task_session_subagents GROUP BY task_session_id`)
	plan, err := reconcile.Plan(ctx, db.DB)
	require.NoError(t, err)
	require.Contains(t, phaseIDs(plan.Phases()), "task_session_subagents.rebuild_abandon")
	require.Contains(t, phaseIDs(plan.Phases()), "task_session_subagents.widen_expand")
	rep, err := reconcile.Reconcile(ctx, db.DB)
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
	require.Contains(t, rep.Step(reconcile.StepWiden).Detail, "widen_expand")
	require.Contains(t, rep.Step(reconcile.StepWiden).Detail, "subagent_tokens")
	require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM pg_class WHERE relname = 'schemastate_new_task_session_subagents'`), "the rebuild stays")
	db.Exec(t, `UPDATE task_session_subagents SET total_tokens = 5 WHERE id = 'r2'`)
	db.Exec(t, `DROP VIEW subagent_tokens`)
	mustReconcile(t, db)
	require.Equal(t, "bigint", columnType(t, db, "total_tokens"))
	require.Equal(t, 5, count(t, db, `SELECT total_tokens FROM task_session_subagents WHERE id = 'r2'`))
	db.Exec(t, `UPDATE task_session_subagents SET total_tokens = NULL WHERE id = 'r2'`)
	require.Subset(t, snapshot(t, db), before)
}

// Replicas booting together on the online path: all succeed, one does each
// phase, the rest find it done.
func TestOnline_ConcurrentReconcilesConverge(t *testing.T) {
	db, before := seededOnlineStore(t)
	pools := make([]*sql.DB, 8)
	for i := range pools {
		pools[i] = db.DB
	}
	reps, errs := reconcileTogether(pools, online...)
	requireOneAppliedShape(t, reps, errs)
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	requireBackfilledOnceAmong(t, db, 300)
	require.Subset(t, snapshot(t, db), before)
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
