package reconcile_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// seedHistory adds qualifying subagent messages: one for a subagent the
// legacy table already holds live (the backfill must not duplicate it), and
// two only the message history knows.
func seedHistory(t *testing.T, db *dbtest.DB) {
	t.Helper()
	for i, tc := range []string{"toolu_1", "toolu_4", "toolu_5"} {
		db.Exec(t, fmt.Sprintf(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
 VALUES ('m%d', 's1', 'k1', 't1', 'x', '{"tool_call_id":"%s","status":"completed","normalized":{"kind":"subagent_task","subagent_task":{"status":"completed","total_tokens":%d}}}', '2026-07-30 01:40:0%d.5+00:00', '2026-07-30 01:41:00+00:00')`, i, tc, 100+i, i))
	}
}

// requireBackfilledOnce asserts the end of a completed backfill: every
// recordable subagent has exactly one row, and both keys are present.
func requireBackfilledOnce(t *testing.T, db *dbtest.DB) {
	t.Helper()
	require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE tool_call_id = 'toolu_1'`), "live row not duplicated")
	require.Equal(t, 2, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE source = 'backfill' AND tool_call_id IN ('toolu_4', 'toolu_5')`))
	require.Equal(t, 5, count(t, db, `SELECT COUNT(*) FROM task_session_subagents`))
	ks := readKeys(t, db)
	require.NotNil(t, ks.CaptureSince)
	require.NotNil(t, ks.BackfillThrough)
}

func TestCrash_KilledReconcileRecovers(t *testing.T) {
	cases := []struct {
		name  string
		point func(d dialect.Dialect) string
		// committedShape: whether the shape step had committed when the
		// process died (PostgreSQL commits per step; SQLite commits the whole
		// reconcile at once).
		committedShape func(d dialect.Dialect) bool
	}{
		{"during the rebuild", func(d dialect.Dialect) string {
			if d == dialect.SQLite {
				return hooks.FailpointRebuildCopied
			}
			return hooks.FailpointShapeApplied
		}, func(dialect.Dialect) bool { return false }},
		{"between the rebuild and the key write", func(dialect.Dialect) string { return hooks.FailpointExecutionSinceWrite },
			func(d dialect.Dialect) bool { return d == dialect.Postgres }},
		{"during the backfill", func(dialect.Dialect) string { return hooks.FailpointBackfillInserted },
			func(d dialect.Dialect) bool { return d == dialect.Postgres }},
		{"between the backfill keys", func(dialect.Dialect) string { return hooks.FailpointBackfillFirstKeyWritten },
			func(d dialect.Dialect) bool { return d == dialect.Postgres }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				seedLegacyStore(t, db)
				seedHistory(t, db)
				before := snapshot(t, db)

				killAt(t, db, childRun{PauseAt: tc.point(db.Dialect)})

				obs := observe(t, db)
				require.Nil(t, obs.Keys.CaptureSince, "no backfill key for a backfill that never committed")
				require.Nil(t, obs.Keys.BackfillThrough)
				require.Zero(t, count(t, db, `SELECT COUNT(*) FROM task_session_subagents WHERE source = 'backfill' AND tool_call_id IN ('toolu_4', 'toolu_5')`))
				require.Equal(t, before, snapshot(t, db), "every original row, values intact")
				if tc.committedShape(db.Dialect) {
					require.True(t, obs.EndState.KeyBearing())
				} else {
					require.False(t, obs.EndState.KeyBearing(), "nothing committed")
					require.Nil(t, obs.Keys.ExecutionSince, "no key for a rebuild that never committed")
				}

				reconcileToAC33(t, db)
				requireBackfilledOnce(t, db)
				after := snapshot(t, db)
				require.Subset(t, after, before, "original rows survive byte for byte")
			})
		})
	}
}

// Eight replicas boot at once against one store from the legacy state: all
// exit cleanly, exactly one performs the change and exactly one backfills.
func TestConcurrency_EightProcessesOneChange(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		seedHistory(t, db)
		before := snapshot(t, db)
		reports := runChildren(t, db, 8, childRun{})
		shapes, backfills := 0, 0
		for _, r := range reports {
			if r.Step(reconcile.StepShape).Status == reconcile.Applied {
				shapes++
			}
			if r.Step(reconcile.StepBackfill).Status == reconcile.Applied {
				backfills++
			}
		}
		require.Equal(t, 1, shapes, "exactly one process performs the change")
		require.Equal(t, 1, backfills, "exactly one process backfills")
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
		requireBackfilledOnce(t, db)
		require.Subset(t, snapshot(t, db), before)
		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM kandev_meta WHERE key = 'subagent_context_execution_since'`))
	})
}

// SIGKILL at every phase boundary of the online upgrade, and inside the
// batched copy and the replay (the child rewrites every row during the copy,
// so the log has entries to replay): the next boot — with default options, so a small table
// resumes online only because the catalog says an upgrade is in flight —
// converges with every row and every metric value equal.
func TestOnline_KilledAtEveryPhaseBoundaryConverges(t *testing.T) {
	probe := openPostgres(t).Host(t).Legacy(t)
	plan, err := reconcile.Plan(ctx, probe.DB, online...)
	require.NoError(t, err)
	points := []string{hooks.FailpointCopyBatch, hooks.FailpointReplayBatch, hooks.FailpointRebuildIndexBuilt}
	for _, p := range plan.Phases() {
		points = append(points, hooks.FailpointAfterPhase(p.ID()))
	}
	require.Len(t, points, 14, "every phase of the legacy upgrade: %v", phaseIDs(plan.Phases()))
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			db, before := seededOnlineStore(t)

			killAt(t, db, childRun{PauseAt: point, Online: true})

			obs := observe(t, db)
			require.Nil(t, obs.Keys.CaptureSince, "the backfill never ran")
			require.Subset(t, snapshot(t, db), before, "every row, every value, even mid-flight")

			rep := mustReconcile(t, db)
			requireAC33(t, db, freshIndexSet(t, db.Dialect))
			requireBackfilledOnceAmong(t, db, 300)
			require.Subset(t, snapshot(t, db), before)
			for _, c := range []string{"total_tokens", "tool_use_count", "duration_ms"} {
				require.Equal(t, "bigint", columnType(t, db, c), describe(rep))
			}
			require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_trigger WHERE tgrelid = 'task_session_subagents'::regclass AND NOT tgisinternal`))
			require.Zero(t, count(t, db, `SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() AND column_name LIKE '%schemastate%'`))
			require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_index WHERE indrelid = 'task_session_subagents'::regclass AND NOT indisvalid`))
			require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_class WHERE relname LIKE 'schemastate%'`), "no rebuild table, log, state or index left")
			require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM pg_constraint WHERE conrelid = 'task_session_subagents'::regclass AND contype = 'f' AND convalidated`), "the foreign key carried and validated")
			require.Nil(t, observe(t, db).Upgrade)
		})
	}
}

// Eight replicas (processes) boot at once on the online path: all exit 0,
// one performs the change, one backfills.
func TestOnline_EightProcessesOneChange(t *testing.T) {
	db, before := seededOnlineStore(t)
	reports := runChildren(t, db, 8, childRun{Online: true})
	shapes, widens, backfills := 0, 0, 0
	for _, r := range reports {
		if r.Step(reconcile.StepShape).Status == reconcile.Applied {
			shapes++
		}
		if w := r.Step(reconcile.StepWiden); w != nil && w.Status == reconcile.Applied {
			widens++
		}
		if r.Step(reconcile.StepBackfill).Status == reconcile.Applied {
			backfills++
		}
	}
	require.Equal(t, 1, shapes)
	require.Equal(t, 1, widens)
	require.Equal(t, 1, backfills)
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	requireBackfilledOnceAmong(t, db, 300)
	require.Subset(t, snapshot(t, db), before)
}

// runChildren runs n reconciling children of c at once (childCmd) and
// returns their reports: every child must exit 0 and print its report.
func runChildren(t *testing.T, db *dbtest.DB, n int, c childRun) []reconcile.Report {
	t.Helper()
	reports := make([]reconcile.Report, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out, err := childCmd(db, c).Output()
			if err == nil {
				err = json.Unmarshal(out, &reports[i])
			}
			if err != nil {
				errs[i] = fmt.Errorf("child %d: %w: %s", i, err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return reports
}
