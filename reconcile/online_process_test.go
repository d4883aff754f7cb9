package reconcile_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/reconcile"
)

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

			killAt(t, db, point, envOnline+"=1")

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
	reports := runChildren(t, db, 8, envOnline+"=1")
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
