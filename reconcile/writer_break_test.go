package reconcile_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

func turnIDNullable(t *testing.T, db *dbtest.DB) bool {
	t.Helper()
	if db.Dialect == "postgres" {
		return count(t, db, `SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'task_session_subagents' AND column_name = 'turn_id' AND is_nullable = 'YES'`) == 1
	}
	return count(t, db, `SELECT count(*) FROM pragma_table_info('task_session_subagents') WHERE name = 'turn_id' AND "notnull" = 0`) == 1
}

// The reconcile does not apply an edit that breaks this release's own
// writer: the shape step fails, naming the break (writer, column, frames),
// applies nothing, and is retried on the next boot; the dry run lists it;
// WithAllowWriterBreak applies it. On both dialects.
func TestReconcile_RefusesAnEditThatBreaksItsOwnWriter(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		mustReconcile(t, db, quiet)
		edited := reconcile.WithDeclaration(dbtest.TurnIDNotNull(t), "edited.hcl")

		plan, err := reconcile.Plan(ctx, db.DB, edited, quiet)
		require.NoError(t, err)
		require.Len(t, plan.WriterBreaks(), 2, "the live writer and the backfill")
		require.Contains(t, plan.WriterBreaks()[0], "writer capture: writer-not-null: task_session_subagents.turn_id")
		require.Contains(t, plan.WriterBreaks()[1], "writer backfill: writer-not-null: task_session_subagents.turn_id")

		for boot := 1; boot <= 2; boot++ {
			rep, err := reconcile.Reconcile(ctx, db.DB, edited, quiet)
			require.ErrorIs(t, err, ops.ErrWriterBreak, "boot %d", boot)
			require.ErrorIs(t, err, reconcile.ErrStepFailed)
			s := rep.Step(reconcile.StepShape)
			require.Equal(t, reconcile.Failed, s.Status)
			require.Contains(t, s.Detail, "turn_id")
			require.Contains(t, s.Detail, "frames that report no turn id")
			require.Contains(t, s.Detail, "edited.hcl")
			require.Zero(t, s.Statements, "nothing applied")
			require.True(t, turnIDNullable(t, db), "boot %d left turn_id as it was", boot)
		}

		rep := mustReconcile(t, db, edited, quiet, reconcile.WithAllowWriterBreak())
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status)
		require.False(t, turnIDNullable(t, db), "the override applies the edit")
	})
}
