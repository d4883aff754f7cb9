package reconcile_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/gen"
	"github.com/schemastate/schemastate/reconcile"
)

// A realistic pre-amendment store (the reference-store distribution: 253
// invocations, live rows after a mid-history activation, second-precision
// keys) reconciles to exactly one row per recordable subagent with both
// backfill keys, and a second reconcile changes nothing.
func TestReconcile_RealisticLegacyStore_OneRowPerSubagent(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		sum, err := gen.Generate(ctx, db.DB, gen.Config{ScaleMB: 2, Population: 1, State: gen.Legacy, Seed: 7})
		require.NoError(t, err)
		require.Equal(t, 253, sum.SubagentMessages)
		// Installed-base state 4: the pre-amendment build's backfill never
		// completed — capture_since alone, and no backfilled rows — so this
		// reconcile's backfill does the real work beside the live rows.
		db.Exec(t, `DELETE FROM kandev_meta WHERE key = 'subagent_context_backfill_through';
DELETE FROM task_session_subagents WHERE source = 'backfill'`)
		live := count(t, db, `SELECT COUNT(*) FROM task_session_subagents`)
		require.Positive(t, live)
		require.Less(t, live, 253)
		legacyKeys := readKeys(t, db)
		require.NotNil(t, legacyKeys.CaptureSince)
		before := snapshot(t, db)

		rep := mustReconcile(t, db)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
		bf := rep.Step(reconcile.StepBackfill)
		require.Equal(t, reconcile.Applied, bf.Status, describe(rep))
		require.EqualValues(t, 253-live, *bf.Rows, "the backfill adds exactly the subagents live capture never saw")
		requireAC33(t, db, freshIndexSet(t, db.Dialect))

		// One row per recordable subagent: every invocation in the history is
		// one distinct (session, tool_call_id), and none is duplicated.
		require.Equal(t, 253, count(t, db, `SELECT COUNT(*) FROM task_session_subagents`))
		require.Equal(t, 253, count(t, db, `SELECT COUNT(*) FROM (SELECT DISTINCT task_session_id, tool_call_id FROM task_session_subagents) d`))
		require.Subset(t, snapshot(t, db), before, "legacy rows intact")
		ks := readKeys(t, db)
		require.NotNil(t, ks.BackfillThrough)
		require.Equal(t, *legacyKeys.CaptureSince, *ks.CaptureSince, "AC-24 point 5: the legacy key stands")

		after := snapshot(t, db)
		rep = mustReconcile(t, db)
		for _, s := range rep.Steps {
			require.Zero(t, s.Statements, "second reconcile: step %s ran statements", s.Name)
		}
		require.Equal(t, after, snapshot(t, db))
		require.Equal(t, ks, readKeys(t, db))
	})
}
