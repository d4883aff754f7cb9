package reconcile_test

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// The online PostgreSQL upgrade (issue 10): phases whose every exclusive lock
// is catalog-only, each resumable from the live catalog.

// requireBackfilledOnceAmong is requireBackfilledOnce on a table that also
// holds extra seeded rows.
func requireBackfilledOnceAmong(t *testing.T, db *dbtest.DB, extra int) {
	t.Helper()
	require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE tool_call_id = 'toolu_1'`), "live row not duplicated")
	require.Equal(t, 2, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE source = 'backfill' AND tool_call_id IN ('toolu_4', 'toolu_5')`))
	require.Equal(t, 5+extra, count(t, db, `SELECT COUNT(*) FROM task_session_subagents`))
	ks := readKeys(t, db)
	require.NotNil(t, ks.CaptureSince)
	require.NotNil(t, ks.BackfillThrough)
}

func phaseIDs(phases []ops.Phase) []string {
	var out []string
	for _, p := range phases {
		out = append(out, p.ID())
	}
	return out
}

// The dry run predicts the indexes the rebuild builds on its new table —
// among them the key the shape phases build first — as pg_get_indexdef
// will read them back once those phases ran; the reconcile builds exactly
// those.
func TestOnline_DryRunPredictsTheRebuildsIndexBuilds(t *testing.T) {
	db, _ := seededOnlineStore(t)
	plan, err := reconcile.Plan(ctx, db.DB, online...)
	require.NoError(t, err)
	var predicted []string
	for _, ph := range plan.Phases() {
		if ph.Name == ops.PhaseRebuildIndex {
			predicted = ph.Loop.Builds
		}
	}
	require.True(t, slices.ContainsFunc(predicted, func(b string) bool {
		return strings.Contains(b, "UNIQUE") && strings.Contains(b, "(task_session_id, agent_execution_id, tool_call_id)")
	}), "the key the shape phases build, as the server renders it: %v", predicted)
	var ran []string
	mustReconcile(t, db, append(online, reconcile.WithExecHook(func(s string) { ran = append(ran, s) }))...)
	for _, b := range predicted {
		require.Contains(t, ran, b, "a predicted build is what ran")
	}
}

// The names the dry run's predicted index definitions spell are the
// server's own quote_ident: bare when lower-case and no key word.
func TestOnline_ColumnNamesQuotedAsTheServerQuotesThem(t *testing.T) {
	db := openPostgres(t)
	got, err := reconcile.ReadQuoted(ctx, db.DB, []string{"plain_1", "order", "user", "Mixed", "two words", `q"x`, "ünï"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"plain_1": "plain_1", "order": `"order"`, "user": `"user"`, "Mixed": `"Mixed"`,
		"two words": `"two words"`, `q"x`: `"q""x"`, "ünï": `"ünï"`}, got)
}

func columnType(t *testing.T, db *dbtest.DB, col string) string {
	t.Helper()
	var typ string
	require.NoError(t, db.QueryRow(`SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'task_session_subagents' AND column_name = $1`, col).Scan(&typ))
	return typ
}

const subagentsKey = "task_session_subagents_session_execution_tool_call_key"

// Both paths from the same legacy table: the plan names each phase, its
// transaction, its lock and the size it was chosen from; reconcile runs
// exactly those phases and reaches AC-33 with every row and value intact.
func TestOnline_PlanIsWhatReconcileRuns(t *testing.T) {
	cases := []struct {
		name   string
		opts   []reconcile.Option
		phases []string
		locks  []ops.LockClass
		why    string
	}{
		{"small table: single transaction", nil,
			[]string{"task_session_subagents.alter", "background_agent_log.create", "task_session_subagents.widen"},
			[]ops.LockClass{ops.LockRewrite, ops.LockCatalog, ops.LockRewrite},
			"under the online threshold 256 kB: single transaction"},
		{"online phases", online,
			[]string{"task_session_subagents.alter", "task_session_subagents.build_index." + subagentsKey, "task_session_subagents.swap_key",
				"background_agent_log.create",
				"task_session_subagents.rebuild_prepare", "task_session_subagents.rebuild_copy", "task_session_subagents.rebuild_replay.copied",
				"task_session_subagents.rebuild_index",
				"task_session_subagents.rebuild_replay.indexed", "task_session_subagents.rebuild_swap", "task_session_subagents.rebuild_finish"},
			[]ops.LockClass{ops.LockCatalog, ops.LockShareUpdateExclusive, ops.LockCatalog, ops.LockCatalog,
				ops.LockCatalog, ops.LockNone, ops.LockNone,
				ops.LockNone,
				ops.LockNone, ops.LockCatalog, ops.LockShareUpdateExclusive},
			"at or above the online threshold 0 kB: online phases"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db, before := seededOnlineStore(t)

			plan, err := reconcile.Plan(ctx, db.DB, tc.opts...)
			require.NoError(t, err)
			phases := plan.Phases()
			require.Equal(t, tc.phases, phaseIDs(phases))
			var locks []ops.LockClass
			for _, p := range phases {
				locks = append(locks, p.Lock)
				require.NotEmpty(t, p.SQL, p.ID())
				if p.Table == "task_session_subagents" {
					require.Contains(t, p.Detail, tc.why)
				}
			}
			require.Equal(t, tc.locks, locks)
			for _, p := range phases {
				if p.Name == ops.PhaseBuildIndex {
					require.False(t, p.Transactional, "CONCURRENTLY runs outside a transaction")
					require.Contains(t, p.SQL[0], "CREATE UNIQUE INDEX CONCURRENTLY")
				}
				if p.Name == ops.PhaseSwapKey {
					require.Contains(t, p.SQL[0], "DROP CONSTRAINT \"task_session_subagents_task_session_id_tool_call_id_key\"")
					require.Contains(t, p.SQL[0], "UNIQUE USING INDEX")
				}
			}

			var said []string // WithProgress serializes its calls: no lock needed
			progress := reconcile.WithProgress(func(p reconcile.Progress) {
				said = append(said, p.Step+": "+p.Message)
			})
			rep := mustReconcile(t, db, append(tc.opts, progress)...)
			if tc.opts != nil {
				// Progress of the long phases: the copy's rows, batch by batch
				// (303 rows).
				require.True(t, slices.ContainsFunc(said, func(m string) bool {
					return strings.HasPrefix(m, "widen: copying task_session_subagents: ") && strings.Contains(m, " rows copied, page 1 of ")
				}), "%v", said)
				require.Contains(t, said, "widen: copied task_session_subagents: 303 rows")
				require.Contains(t, said, "widen: phase task_session_subagents.rebuild_copy")
			}
			var ran []string
			for _, s := range []string{reconcile.StepShape, reconcile.StepWiden} {
				ran = append(ran, rep.Step(s).Phases...)
				require.Contains(t, rep.Step(s).Detail, tc.why, "the step says which path and why")
			}
			require.Equal(t, tc.phases, ran, "reconcile runs the plan's phases")
			requireAC33(t, db, freshIndexSet(t, db.Dialect))
			requireBackfilledOnceAmong(t, db, 300)
			require.Subset(t, snapshot(t, db), before, "every row, every value")
			for _, c := range []string{"total_tokens", "tool_use_count", "duration_ms"} {
				require.Equal(t, "bigint", columnType(t, db, c))
			}
			// AC-34: nothing left to do, and no artefact left behind.
			plan, err = reconcile.Plan(ctx, db.DB, tc.opts...)
			require.NoError(t, err)
			require.Empty(t, plan.Phases())
			require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_trigger WHERE tgrelid = 'task_session_subagents'::regclass AND NOT tgisinternal`))
			require.Zero(t, count(t, db, `SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() AND column_name LIKE '%schemastate%'`))
			require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_class WHERE relname LIKE 'schemastate%'`), "no rebuild table, log, state or index left")
			mustReconcile(t, db, tc.opts...)
			require.Subset(t, snapshot(t, db), before)
		})
	}
}

// Values above 2^31 survive the widening, and so do host writes made while
// it is in flight, on both paths: after the rebuild's copy only the log and
// its replay carry them to the new table; after the column copy only the
// trigger keeps the shadows equal. (A view over the table's id sends the
// widening to the column copy: a rename would leave the view on the old
// table.)
func TestOnline_ValuesAbove2e31Survive(t *testing.T) {
	for _, path := range []struct{ name, after, view string }{
		{"rebuild", "task_session_subagents.rebuild_copy", ""},
		{"column copy", "task_session_subagents.widen_copy", "CREATE VIEW subagent_ids AS SELECT id FROM task_session_subagents"},
	} {
		t.Run(path.name, func(t *testing.T) { valuesAbove2e31Survive(t, path.after, path.view) })
	}
}

func valuesAbove2e31Survive(t *testing.T, after, view string) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	seedMany(t, db, 200)
	if view != "" {
		db.Exec(t, view)
	}
	reached := false
	hostWrites := reconcile.WithFailpoint(func(p string) error {
		if p != hooks.FailpointAfterPhase(after) {
			return nil
		}
		reached = true
		// In flight: the old column is still integer; a host write lands in both.
		if typ := columnType(t, db, "total_tokens"); typ != "integer" {
			return fmt.Errorf("total_tokens is %s mid-flight", typ)
		}
		_, err := db.DB.Exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, total_tokens, observed_at, updated_at) VALUES ('during', 's1', 'k1', 'toolu_during', 2147483647, now(), now())`)
		if err == nil {
			_, err = db.DB.Exec(`UPDATE task_session_subagents SET duration_ms = -2147483648 WHERE id = 'g3'`)
		}
		return err
	})
	rep := mustReconcile(t, db, append(online, hostWrites)...)
	require.True(t, reached, "took the path: %s", rep.Step(reconcile.StepWiden).Detail)
	require.Equal(t, "bigint", columnType(t, db, "total_tokens"))
	db.Exec(t, `UPDATE task_session_subagents SET total_tokens = 9007199254740993, tool_use_count = 4294967296 WHERE id = 'r1'`)
	var tokens, uses, during, dur int64
	require.NoError(t, db.QueryRow(`SELECT total_tokens, tool_use_count FROM task_session_subagents WHERE id = 'r1'`).Scan(&tokens, &uses))
	require.Equal(t, int64(9007199254740993), tokens)
	require.Equal(t, int64(4294967296), uses)
	require.NoError(t, db.QueryRow(`SELECT total_tokens FROM task_session_subagents WHERE id = 'during'`).Scan(&during))
	require.Equal(t, int64(2147483647), during, "a row inserted mid-flight")
	require.NoError(t, db.QueryRow(`SELECT duration_ms FROM task_session_subagents WHERE id = 'g3'`).Scan(&dur))
	require.Equal(t, int64(-2147483648), dur, "a row updated mid-flight")
}

// An INVALID index left behind (a build killed or failed part way) is seen
// by plan and status, dropped concurrently and rebuilt, then attached.
func TestOnline_InvalidIndexRepaired(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	before := snapshot(t, db)
	// What a killed CREATE INDEX CONCURRENTLY leaves: the column (the alter
	// phase committed) and an index the catalog marks INVALID.
	db.Exec(t, `ALTER TABLE task_session_subagents ADD COLUMN agent_execution_id text NOT NULL DEFAULT 'unknown';
CREATE UNIQUE INDEX CONCURRENTLY `+subagentsKey+` ON task_session_subagents (task_session_id, agent_execution_id, tool_call_id);
UPDATE pg_index SET indisvalid = false WHERE indexrelid = '`+subagentsKey+`'::regclass`)

	plan, err := reconcile.Plan(ctx, db.DB)
	require.NoError(t, err)
	require.Len(t, plan.Resumed(), 1)
	require.Contains(t, plan.Resumed()[0], "INVALID index "+subagentsKey)
	var build *ops.Phase
	for _, p := range plan.Phases() {
		if p.Name == ops.PhaseBuildIndex {
			build = &p
		}
	}
	require.NotNil(t, build, "resumed online whatever the size: %v", phaseIDs(plan.Phases()))
	require.Contains(t, build.SQL[0], "DROP INDEX CONCURRENTLY IF EXISTS")
	obs := observe(t, db)
	require.NotNil(t, obs.Upgrade)
	require.Equal(t, "task_session_subagents.build_index."+subagentsKey, obs.Upgrade.Next)

	reconcileToAC33(t, db)
	require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_index WHERE indrelid = 'task_session_subagents'::regclass AND NOT indisvalid`))
	require.Equal(t, before, snapshot(t, db))
	require.Nil(t, observe(t, db).Upgrade)
}

// A build that fails on duplicated keys names them and leaves no INVALID
// index behind.
func TestOnline_DuplicateKeysNamed(t *testing.T) {
	db := openPostgres(t).Host(t).Legacy(t)
	seedLegacy(t, db)
	// A host that dropped the two-column key and wrote a duplicate.
	db.Exec(t, `ALTER TABLE task_session_subagents DROP CONSTRAINT task_session_subagents_task_session_id_tool_call_id_key;
INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, observed_at, updated_at) VALUES ('dup', 's1', 'k1', 'toolu_1', now(), now())`)
	rep, err := reconcile.Reconcile(ctx, db.DB, online...)
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
	d := rep.Step(reconcile.StepShape).Detail
	require.Contains(t, d, "build_index")
	require.Contains(t, d, "duplicated keys: (s1, unknown, toolu_1) × 2")
	require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_index WHERE indrelid = 'task_session_subagents'::regclass AND NOT indisvalid`), "no INVALID index left")
	require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepBackfill).Status)
	require.Nil(t, readKeys(t, db).ExecutionSince)
}

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
