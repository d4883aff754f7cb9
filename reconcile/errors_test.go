package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/dbtest"
	"github.com/schemastate/schemastate/internal/fixtures"
	"github.com/schemastate/schemastate/reconcile"
)

// A failed step's error reaches the host with its chain: a real database
// error is found with errors.As — on PostgreSQL the *pgconn.PgError of a DDL
// whose lock_timeout expired (another session holds the table), on SQLite the
// *sqlite.Error of the declared unique key refusing two legacy rows of one
// tool call (a host table that never had the two-column UNIQUE) — inside a
// *StepError naming the step, and the error still matches ErrStepFailed.
func TestReconcile_StepErrorKeepsDatabaseError(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		if db.Dialect == dialect.SQLite {
			ddl, err := fixtures.LegacyFixture(string(db.Dialect))
			require.NoError(t, err)
			db.Host(t).Exec(t, strings.Replace(ddl, ",\n    UNIQUE (task_session_id, tool_call_id)", "", 1))
			seedLegacy(t, db)
			db.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, observed_at, updated_at) VALUES ('r1-again', 's1', 'k1', 'toolu_1', '2026-07-30 01:00:00+00:00', '2026-07-30 01:00:00+00:00')`)
		} else {
			db.Host(t).Legacy(t)
			seedLegacy(t, db)
			failShape(t, db)
		}
		rep, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithDDLLockTimeout(200*time.Millisecond))
		require.ErrorIs(t, err, reconcile.ErrStepFailed, describe(rep))

		var se *reconcile.StepError
		require.ErrorAs(t, err, &se)
		require.Equal(t, reconcile.StepShape, se.Step)
		require.Same(t, rep.Step(reconcile.StepShape).Err, se.Err, "the step's own error, not a copy of its text")
		if db.Dialect == dialect.Postgres {
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "55P03", pe.Code, "lock_not_available")
		} else {
			var le *sqlite.Error
			require.ErrorAs(t, err, &le)
			require.Equal(t, sqlite3.SQLITE_CONSTRAINT, le.Code()&0xff, "a constraint refused the rebuild: %v", le)
		}
	})
}

// A reconcile whose context is cancelled reports context.Canceled through
// errors.Is, whether the cancellation came before the lock or in the middle
// of a step.
func TestReconcile_StepErrorKeepsContextCanceled(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		seedLegacy(t, db)

		before, cancel := context.WithCancel(ctx)
		cancel()
		_, err := reconcile.Reconcile(before, db.DB)
		require.ErrorIs(t, err, context.Canceled)
		var se *reconcile.StepError
		require.ErrorAs(t, err, &se)
		require.Equal(t, reconcile.StepLock, se.Step)

		during, cancel := context.WithCancel(ctx)
		defer cancel()
		rep, err := reconcile.Reconcile(during, db.DB, reconcile.WithFailpoint(func(p string) error {
			if p == reconcile.FailpointBackfillInserted {
				cancel()
			}
			return nil
		}))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.ErrorIs(t, err, context.Canceled, describe(rep))
		// On SQLite every step commits at once, so the cancelled backfill
		// fails the steps before it too; each is its own StepError.
		require.Contains(t, failedSteps(t, err), reconcile.StepBackfill)
	})
}

// failedSteps names the StepErrors err carries, in order.
func failedSteps(t *testing.T, err error) []string {
	t.Helper()
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	var steps []string
	for _, e := range errs {
		var se *reconcile.StepError
		require.ErrorAs(t, e, &se)
		steps = append(steps, se.Step)
	}
	return steps
}

// Several failed steps are joined: each is its own StepError, in step order,
// and each keeps its own cause.
func TestReconcile_SeveralFailedStepsAreJoined(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		seedLegacy(t, db)
		db.Exec(t, `CREATE TABLE background_agent_log (workspace_path TEXT NOT NULL, session_id TEXT NOT NULL, agent_id TEXT NOT NULL, execution_id TEXT, kind TEXT NOT NULL, provider TEXT, model TEXT, status TEXT NOT NULL, started_at TIMESTAMP NOT NULL, completed_at TIMESTAMP, error TEXT, host_only_note TEXT, PRIMARY KEY (workspace_path, session_id, agent_id))`)
		forced := errors.New("forced backfill failure")
		rep, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithFailpoint(func(p string) error {
			if p == reconcile.FailpointBackfillInserted {
				return forced
			}
			return nil
		}))
		require.ErrorIs(t, err, reconcile.ErrStepFailed, describe(rep))
		require.ErrorIs(t, err, forced)
		_, joined := err.(interface{ Unwrap() []error })
		require.True(t, joined, "errors.Join of the failed steps: %T", err)
		require.Equal(t, []string{reconcile.StepRefused, reconcile.StepBackfill}, failedSteps(t, err))
		require.Contains(t, err.Error(), "would drop column host_only_note")
		require.Contains(t, err.Error(), "forced backfill failure")
	})
}
