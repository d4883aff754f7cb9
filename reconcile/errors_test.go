package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
	"github.com/schemastate/schemastate/keys"
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
			seedLegacyStore(t, db)
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
		seedLegacyStore(t, db)

		before, cancel := context.WithCancel(ctx)
		cancel()
		_, err := reconcile.Reconcile(before, db.DB)
		require.ErrorIs(t, err, context.Canceled)
		var se *reconcile.StepError
		require.ErrorAs(t, err, &se)
		require.Equal(t, reconcile.StepLock, se.Step)

		during, cancel := context.WithCancel(ctx)
		defer cancel()
		rep, err := reconcile.Reconcile(during, db.DB, cancelAt(hooks.FailpointBackfillInserted, cancel))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.ErrorIs(t, err, context.Canceled, describe(rep))
		// On SQLite every step commits at once, so the cancelled backfill
		// fails the steps before it too; each is its own StepError.
		require.Contains(t, failedSteps(t, err), reconcile.StepBackfill)
	})
}

// A context cancelled while the shape step plans fails that step — there is
// no plan, so nothing is refused and nothing widened — and nothing panics.
// The cancellation is real: the logger cancels as the host_tables step is
// recorded, right before the shape step inspects (pgx reports it as a bad
// connection, modernc as context.Canceled).
func TestReconcile_CancelledWhilePlanningFailsTheShapeStep(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		during, cancel := context.WithCancel(ctx)
		defer cancel()
		logger := slog.New(cancelOnStep{step: reconcile.StepHostTables, cancel: cancel})
		rep, err := reconcile.Reconcile(during, db.DB, reconcile.WithLogger(logger))
		require.ErrorIs(t, err, reconcile.ErrStepFailed, describe(rep))
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepShape).Status, describe(rep))
		require.Nil(t, rep.Step(reconcile.StepRefused))
		require.Nil(t, rep.Step(reconcile.StepWiden))
		require.Contains(t, failedSteps(t, err), reconcile.StepShape)
	})
}

// cancelOnStep is a slog handler that cancels once a record names step.
type cancelOnStep struct {
	step   string
	cancel func()
}

func (h cancelOnStep) Enabled(context.Context, slog.Level) bool { return true }

func (h cancelOnStep) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "step" && a.Value.String() == h.step {
			h.cancel()
		}
		return true
	})
	return nil
}

func (h cancelOnStep) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h cancelOnStep) WithGroup(string) slog.Handler { return h }

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
		seedLegacyStore(t, db)
		db.Exec(t, `CREATE TABLE background_agent_log (workspace_path TEXT NOT NULL, session_id TEXT NOT NULL, agent_id TEXT NOT NULL, execution_id TEXT, kind TEXT NOT NULL, provider TEXT, model TEXT, status TEXT NOT NULL, started_at TIMESTAMP NOT NULL, completed_at TIMESTAMP, error TEXT, host_only_note TEXT, PRIMARY KEY (workspace_path, session_id, agent_id))`)
		forced := errors.New("forced backfill failure")
		rep, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithFailpoint(func(p string) error {
			if p == hooks.FailpointBackfillInserted {
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

// Issue 19: the host can tell a refused change, missing host tables and a
// replica holding the boot lock apart with errors.Is, through the
// *StepError of the step that failed.
func TestReconcile_SentinelsReachTheHostThroughStepError(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		stepOf := func(err error) string {
			var se *reconcile.StepError
			require.ErrorAs(t, err, &se)
			return se.Step
		}
		// No host tables yet.
		rep, err := reconcile.Reconcile(ctx, db.DB, quiet)
		require.ErrorIs(t, err, ops.ErrHostTablesMissing, describe(rep))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.StepHostTables, stepOf(err))
		require.NotErrorIs(t, err, ops.ErrRefused)

		db.Host(t)
		settle(t, db, quiet)
		// A declaration that drops a column is refused.
		src := strings.Replace(string(schemastate.SchemaHCL), "column \"model\"", "column \"model_renamed\"", 1)
		rep, err = reconcile.Reconcile(ctx, db.DB, quiet, reconcile.WithDeclaration([]byte(src), "renamed.hcl"))
		require.ErrorIs(t, err, ops.ErrRefused, describe(rep))
		require.Equal(t, reconcile.StepRefused, stepOf(err))
		require.Contains(t, err.Error(), "refused destructive change (never applied at boot): task_session_subagents: would drop column model (renamed.hcl)")
		require.NotErrorIs(t, err, reconcile.ErrLockHeld)

		// Another replica holds the lock for longer than this boot waits.
		finish := replicaHoldingTheLock(t, db, quiet, reconcile.WithSchemaFile(editedDeclaration(t)))
		rep, err = reconcile.Reconcile(ctx, db.DB, quiet, reconcile.WithLockWait(100*time.Millisecond), reconcile.WithSchemaFile(editedDeclaration(t)))
		require.ErrorIs(t, err, reconcile.ErrLockHeld, describe(rep))
		require.Equal(t, reconcile.StepLock, stepOf(err))
		require.NotErrorIs(t, err, ops.ErrHostTablesMissing)
		_, err = finish()
		require.NoError(t, err)
	})
}

// Issue 19: an option whose value cannot be used is an error naming it, and
// nothing runs — it is not clamped where it is used.
func TestReconcile_InvalidOptionIsNamedAndNothingRuns(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		for _, c := range []struct {
			opt  reconcile.Option
			name string
		}{
			{reconcile.WithLockWait(-time.Second), "WithLockWait(-1s)"},
			{reconcile.WithDDLLockTimeout(0), "WithDDLLockTimeout(0s)"},
			{reconcile.WithDDLLockAttempt(-time.Millisecond), "WithDDLLockAttempt(-1ms)"},
			{reconcile.WithConcurrentWait(0), "WithConcurrentWait(0s)"},
			{reconcile.WithStatementTimeout(-time.Second), "WithStatementTimeout(-1s)"},
			{reconcile.WithOnlineAbove(-1), "WithOnlineAbove(-1)"},
			{reconcile.WithCopyPause(math.NaN()), "WithCopyPause(NaN)"},
			{reconcile.WithCopyBatchPages(0), "WithCopyBatchPages(0)"},
			{reconcile.WithLogger(nil), "WithLogger(nil)"},
			{reconcile.WithClock(nil), "WithClock(nil)"},
			{reconcile.WithDeclaration(nil, "empty.hcl"), `WithDeclaration("empty.hcl")`},
			{reconcile.WithDialect("mysql"), `WithDialect("mysql")`},
		} {
			rep, err := reconcile.Reconcile(ctx, db.DB, quiet, c.opt)
			require.ErrorIs(t, err, reconcile.ErrInvalidOption, c.name)
			require.Contains(t, err.Error(), c.name)
			require.NotErrorIs(t, err, reconcile.ErrStepFailed, "no step ran")
			require.Empty(t, rep.Steps, c.name)
			_, err = reconcile.Plan(ctx, db.DB, c.opt)
			require.ErrorIs(t, err, reconcile.ErrInvalidOption, c.name)
			_, err = reconcile.Observe(ctx, db.DB, c.opt)
			require.ErrorIs(t, err, reconcile.ErrInvalidOption, c.name)
		}
		require.Zero(t, count(t, db, `SELECT COUNT(*) FROM kandev_meta`), "nothing ran")
		// Every bad option is named, not only the first.
		_, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithLockWait(-time.Second), reconcile.WithCopyBatchPages(0))
		require.ErrorContains(t, err, "WithLockWait(-1s)")
		require.ErrorContains(t, err, "WithCopyBatchPages(0)")
	})
}

// Issue 19: the declaration can be passed as a value — the same plan as the
// same text in a file, cited by the name given — and one observer sees every
// event a reconcile reports: its progress, each statement it ran (the plan's,
// in order) and each failpoint, where its error fails the step.
func TestReconcile_DeclarationValueAndObserver(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		path := editedDeclaration(t)
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		fromFile, err := reconcile.Plan(ctx, db.DB, reconcile.WithSchemaFile(path))
		require.NoError(t, err)
		fromValue, err := reconcile.Plan(ctx, db.DB, reconcile.WithDeclaration(src, "edited.hcl"))
		require.NoError(t, err)
		require.Equal(t, fromFile.Phases(), fromValue.Phases())
		_, err = reconcile.Plan(ctx, db.DB, reconcile.WithDeclaration([]byte("table \"t\" {"), "broken.hcl"))
		require.ErrorContains(t, err, "broken.hcl:")

		var events []reconcile.Event
		observer := reconcile.WithObserver(func(e reconcile.Event) error {
			events = append(events, e) // never called concurrently
			if e.Kind == reconcile.EventFailpoint && e.Point == hooks.FailpointExecutionSinceWrite {
				return errors.New("forced failure at " + e.Point)
			}
			return nil
		})
		rep, err := reconcile.Reconcile(ctx, db.DB, quiet, observer, reconcile.WithDeclaration(src, "edited.hcl"))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepExecutionSince).Status, describe(rep))
		require.Contains(t, rep.Step(reconcile.StepExecutionSince).Detail, "forced failure at "+hooks.FailpointExecutionSinceWrite)
		var ran, points []string
		progress := 0
		for _, e := range events {
			switch e.Kind {
			case reconcile.EventExecuted:
				ran = append(ran, e.Statement)
			case reconcile.EventFailpoint:
				points = append(points, e.Point)
			case reconcile.EventProgress:
				progress++
			}
		}
		require.Equal(t, fromValue.Statements(), ran)
		shape, write := slices.Index(points, hooks.FailpointShapeApplied), slices.Index(points, hooks.FailpointExecutionSinceWrite)
		require.True(t, shape >= 0 && write > shape, "the failpoints in step order: %q", points)
		require.Positive(t, progress)
	})
}

// Nothing that destroys data is applied at boot: a declaration that drops a
// column is refused, reported by name, and the live table is left alone.
func TestReconcile_RefusesDestructiveChange(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		mustReconcile(t, db)
		src := strings.Replace(string(schemastate.SchemaHCL), `  column "model" {
    type = local.text
    null = true
  }
`, "", 1)
		require.NotEqual(t, string(schemastate.SchemaHCL), src)
		path := filepath.Join(t.TempDir(), "narrower.hcl")
		require.NoError(t, os.WriteFile(path, []byte(src), 0o644))

		plan, err := reconcile.Plan(ctx, db.DB, reconcile.WithSchemaFile(path))
		require.NoError(t, err)
		require.Empty(t, plan.Statements())
		require.Len(t, plan.Refused(), 1)
		require.Contains(t, plan.Refused()[0], "task_session_subagents: would drop column model")

		before := catalogVersion(t, db)
		rep, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithSchemaFile(path))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Unchanged, rep.Step(reconcile.StepShape).Status)
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepRefused).Status)
		require.Contains(t, rep.Step(reconcile.StepRefused).Detail, "would drop column model")
		require.Equal(t, before, catalogVersion(t, db))
	})
}

// A refusal on one table does not hold the others back: a host's
// background_agent_log with a column the declaration does not know is left
// alone (and reported), while the pre-amendment subagents table is migrated.
func TestReconcile_RefusalIsPerTable(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		db.Exec(t, `CREATE TABLE background_agent_log (workspace_path TEXT NOT NULL, session_id TEXT NOT NULL, agent_id TEXT NOT NULL, execution_id TEXT, kind TEXT NOT NULL, provider TEXT, model TEXT, status TEXT NOT NULL, started_at TIMESTAMP NOT NULL, completed_at TIMESTAMP, error TEXT, host_only_note TEXT, PRIMARY KEY (workspace_path, session_id, agent_id));
INSERT INTO background_agent_log (workspace_path, session_id, agent_id, kind, status, started_at, host_only_note) VALUES ('/w', 's1', 'a1', 'run_in_background', 'running', '2026-07-30 01:00:00+00:00', 'precious')`)
		rep, err := reconcile.Reconcile(ctx, db.DB)
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepRefused).Status)
		require.Contains(t, rep.Step(reconcile.StepRefused).Detail, "background_agent_log: would drop column host_only_note")
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
		require.Equal(t, 1, count(t, db, `SELECT COUNT(*) FROM background_agent_log WHERE host_only_note = 'precious'`))
	})
}

// Host tables are never created: when they are missing the reconcile says so,
// names them, and creates nothing.
func TestReconcile_MissingHostTablesNamed(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		rep, err := reconcile.Reconcile(ctx, db.DB)
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		s := rep.Step(reconcile.StepHostTables)
		require.Equal(t, reconcile.Failed, s.Status)
		for _, name := range []string{"kandev_meta", "task_session_messages", "task_sessions"} {
			require.Contains(t, s.Detail, name)
		}
		require.Equal(t, reconcile.Skipped, rep.Step(reconcile.StepShape).Status)
		require.Empty(t, observe(t, db).Indexes, "nothing created")
	})
}

// A bad declaration is reported with its file and line, and changes nothing.
func TestReconcile_BadHCLNamesFileAndLine(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		path := filepath.Join(t.TempDir(), "broken.hcl")
		require.NoError(t, os.WriteFile(path, []byte("table \"x\" {\n  schema = schema.main\n  column \"id\" {\n    type = \n  }\n}\n"), 0o644))
		rep, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithSchemaFile(path))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		detail := rep.Step(reconcile.StepHostTables).Detail
		require.Contains(t, detail, path)
		require.Regexp(t, `:\d+`, detail)
		require.Empty(t, observe(t, db).Indexes)
	})
}

// AC-20: the report is what the host logs, so every step's status must match
// what the database kept. The context is cancelled mid-backfill, which closes
// the PostgreSQL connection: shape and execution_since were already committed
// in their own transactions, and the failed advisory unlock on the dead
// connection used to relabel them "failed: commit failed" — a WARN saying the
// database was unchanged by steps it had kept. On SQLite the whole pass is
// one transaction and is rolled back; there "failed" is the truth.
// The lock is released either way: the next reconcile in this process runs.
func TestAdversarial_AC20_CancelledReconcileReportsWhatWasKept(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		before := snapshot(t, db)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		rep, err := reconcile.Reconcile(cctx, db.DB, cancelAt(hooks.FailpointBackfillInserted, cancel))
		require.ErrorIs(t, err, reconcile.ErrStepFailed)
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepBackfill).Status, describe(rep))

		obs := observe(t, db)
		require.Equal(t, obs.EndState.KeyBearing(), rep.Step(reconcile.StepShape).Status == reconcile.Applied,
			"shape reported %s, end state %+v", rep.Step(reconcile.StepShape).Status, obs.EndState)
		require.Equal(t, obs.Keys.ExecutionSince != nil, rep.Step(reconcile.StepExecutionSince).Status == reconcile.Applied,
			"execution_since reported %s", rep.Step(reconcile.StepExecutionSince).Status)
		require.Nil(t, obs.Keys.CaptureSince, "AC-24a")
		require.Nil(t, obs.Keys.BackfillThrough, "AC-24a")
		require.Equal(t, before, snapshot(t, db))

		rep = mustReconcile(t, db, reconcile.WithLockWait(2*time.Second))
		require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepBackfill).Status)
		requireAC33(t, db, freshIndexSet(t, db.Dialect))
		require.Equal(t, keys.Activated, readKeys(t, db).State())
	})
}

// AC-20, AC-24a: a failed execution_since step and a failed backfill step are
// each logged at WARN carrying the step's name, as a failed shape step is
// (TestReconcile_AC33a_FailedRebuildLeavesLegacyShape) — the boot goes on,
// and the WARN is the one line that names what failed.
func TestReconcile_AC20_FailedStepWarnsNamingIt(t *testing.T) {
	for _, c := range []struct{ point, step string }{
		{hooks.FailpointExecutionSinceWrite, reconcile.StepExecutionSince},
		{hooks.FailpointBackfillMaxTaken, reconcile.StepBackfill},
		{hooks.FailpointBackfillInserted, reconcile.StepBackfill},
		{hooks.FailpointBackfillFirstKeyWritten, reconcile.StepBackfill},
	} {
		t.Run(c.point, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				db.Host(t)
				var logs bytes.Buffer
				logger := slog.New(slog.NewTextHandler(&logs, nil))
				rep, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithLogger(logger), failAt(c.point))
				require.ErrorIs(t, err, reconcile.ErrStepFailed)
				require.Equal(t, reconcile.Failed, rep.Step(c.step).Status, describe(rep))
				var warns []string
				for _, line := range strings.Split(logs.String(), "\n") {
					if strings.Contains(line, "level=WARN") {
						warns = append(warns, line)
					}
				}
				require.Len(t, warns, 1, "one WARN, for the failed step: %s", logs.String())
				require.Contains(t, warns[0], "step="+c.step)
				require.Contains(t, warns[0], "forced failure at "+c.point)
			})
		})
	}
}
