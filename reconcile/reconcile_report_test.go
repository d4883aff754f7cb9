package reconcile_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

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

// Long steps report progress; every step that ran reports its end.
func TestReconcile_ProgressReportsEachStep(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		var mu sync.Mutex
		done := map[string]string{}
		var messages []string
		mustReconcile(t, db, reconcile.WithProgress(func(p reconcile.Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Done {
				done[p.Step] = p.Message
			} else {
				messages = append(messages, p.Step+": "+p.Message)
			}
		}))
		want := map[string]string{"shape": "applied", "execution_since": "applied", "backfill": "applied"}
		if db.Dialect == dialect.Postgres {
			want["widen"] = "applied" // the legacy metrics are integer; the declaration says bigint
		}
		require.Equal(t, want, done)
		require.Contains(t, messages, "shape: applying task_session_subagents")
		if db.Dialect == dialect.SQLite {
			require.Contains(t, messages, "shape: rebuilding task_session_subagents: copying 3 rows", "rows when known")
		}
	})
}

// The progress callback is never called concurrently: the watcher's periodic
// report waits while the step's own report is still in the callback. The
// callback below keeps its state without any locking, as WithProgress allows;
// it stays in the step's first report for three watcher ticks, so a watcher
// that called it meanwhile is counted (and, under -race, reported as a race
// on calls).
func TestReconcile_ProgressCallbackIsSerialized(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		var inside, overlapped atomic.Int32
		var calls []reconcile.Progress // deliberately unguarded
		slept := false
		mustReconcile(t, db, reconcile.WithProgress(func(p reconcile.Progress) {
			if inside.Add(1) > 1 {
				overlapped.Add(1)
			}
			defer inside.Add(-1)
			calls = append(calls, p)
			if !slept && p.Message == "applying task_session_subagents" {
				slept = true
				time.Sleep(800 * time.Millisecond)
			}
		}))
		require.True(t, slept, "the shape step reported its table")
		require.Zero(t, overlapped.Load(), "the callback was entered while another call was in it")
		var ticks int
		for _, p := range calls {
			if p.Step == reconcile.StepShape && p.Elapsed >= 250*time.Millisecond && !p.Done {
				ticks++
			}
		}
		require.NotZero(t, ticks, "the watcher reported while the step was slow")
	})
}

// reconcileTogether runs one reconcile on each of pools at once and returns
// each one's report and error, in the pools' order.
func reconcileTogether(pools []*sql.DB, opts ...reconcile.Option) ([]*reconcile.Report, []error) {
	reps, errs := make([]*reconcile.Report, len(pools)), make([]error, len(pools))
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = reconcile.Reconcile(ctx, pool, opts...)
		}()
	}
	wg.Wait()
	return reps, errs
}

// requireOneAppliedShape requires every one of several concurrent reconciles
// to succeed and exactly one of them to have applied the shape step: the
// others waited for the lock and found the work done.
func requireOneAppliedShape(t *testing.T, reps []*reconcile.Report, errs []error) {
	t.Helper()
	applied := 0
	for i := range reps {
		require.NoError(t, errs[i], describe(reps[i]))
		if reps[i].Step(reconcile.StepShape).Status == reconcile.Applied {
			applied++
		}
	}
	require.Equal(t, 1, applied, "exactly one replica performs the change")
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
