package reconcile_test

import (
	"database/sql"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/replicatest"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/reconcile"
)

const certifiedDetail = "certified"

// settle reconciles until a boot takes the certified fast path: the boot that
// applies a change never certifies; the next full check that finds nothing to
// change does.
func settle(t *testing.T, db *dbtest.DB, opts ...reconcile.Option) *reconcile.Report {
	t.Helper()
	for i := 0; i < 3; i++ {
		rep := mustReconcile(t, db, opts...)
		if strings.Contains(rep.Step(reconcile.StepShape).Detail, certifiedDetail) {
			return rep
		}
	}
	t.Fatal("no certified boot after three reconciles")
	return nil
}

// The steady state: a certified boot runs no DDL, writes nothing, and reports
// the full end state and the keys.
func TestReconcile_SteadyStateCertifiedBootWritesNothing(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		seedLegacyStore(t, db)
		settle(t, db)
		before, meta := catalogVersion(t, db), metaSnapshot(t, db)
		rep := mustReconcile(t, db)
		require.Contains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail)
		require.True(t, rep.EndState.KeyBearing())
		require.True(t, rep.EndState.IndexesMatchDeclaration)
		require.NotNil(t, rep.Keys.ExecutionSince)
		for _, s := range rep.Steps {
			require.Zero(t, s.Statements, s.Name)
			require.NotEqual(t, reconcile.Failed, s.Status, s.Name)
		}
		require.Equal(t, before, catalogVersion(t, db))
		require.Equal(t, meta, metaSnapshot(t, db), "a certified boot writes nothing")
	})
}

// metaSnapshot is every kandev_meta row, key and value.
func metaSnapshot(t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	return db.Strings(t, `SELECT key || '=' || COALESCE(value, '(null)') FROM kandev_meta ORDER BY key`)
}

// Any live change after certification is seen: the fast path falls back to
// the full check, which acts on it.
func TestReconcile_CertificateNeverMasksALiveChange(t *testing.T) {
	changes := map[string]func(d dialect.Dialect) string{
		"a column added by hand": func(dialect.Dialect) string {
			return `ALTER TABLE task_session_subagents ADD COLUMN extra TEXT`
		},
		"a declared index dropped": func(dialect.Dialect) string { return `DROP INDEX idx_subagents_task_id` },
		"an undeclared index added": func(dialect.Dialect) string {
			return `CREATE INDEX idx_subagents_model ON task_session_subagents (model)`
		},
		"a default changed": func(d dialect.Dialect) string {
			if d == dialect.SQLite {
				return "" // SQLite cannot alter a default in place
			}
			return `ALTER TABLE task_session_subagents ALTER COLUMN source SET DEFAULT 'other'`
		},
		// Each kind of entry the catalog read covers, one row per table
		// on PostgreSQL: a comment on the column, on an index and on a
		// constraint, a check, an index's storage parameters, a trigger.
		"a column comment": func(d dialect.Dialect) string {
			return onPostgres(d, `COMMENT ON COLUMN task_session_subagents.model IS 'operator note'`)
		},
		"an index comment": func(d dialect.Dialect) string {
			return onPostgres(d, `COMMENT ON INDEX idx_subagents_task_id IS 'operator note'`)
		},
		"a constraint comment": func(d dialect.Dialect) string {
			return onPostgres(d, `COMMENT ON CONSTRAINT task_session_subagents_pkey ON task_session_subagents IS 'operator note'`)
		},
		"a check added": func(d dialect.Dialect) string {
			return onPostgres(d, `ALTER TABLE task_session_subagents ADD CONSTRAINT operator_check CHECK (duration_ms >= 0)`)
		},
		"an index storage parameter": func(d dialect.Dialect) string {
			return onPostgres(d, `ALTER INDEX idx_subagents_task_id SET (fillfactor = 70)`)
		},
		"a trigger added": func(d dialect.Dialect) string {
			if d == dialect.SQLite {
				return `CREATE TRIGGER operator_trigger AFTER INSERT ON task_session_subagents BEGIN SELECT 1; END`
			}
			return `CREATE TRIGGER operator_trigger AFTER INSERT ON task_session_subagents FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()`
		},
		"a key deleted": func(dialect.Dialect) string {
			return `DELETE FROM kandev_meta WHERE key = 'subagent_context_execution_since'`
		},
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				stmt := change(db.Dialect)
				if stmt == "" {
					return
				}
				db.Host(t)
				settle(t, db)
				db.Exec(t, stmt)
				rep, _ := reconcile.Reconcile(ctx, db.DB)
				require.NotContains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail, describe(rep))
				obs := observeKeyBearing(t, db)
				require.NotNil(t, obs.Keys.ExecutionSince)
			})
		})
	}
}

// onPostgres is stmt on PostgreSQL and nothing on SQLite, which has no
// such statement.
func onPostgres(d dialect.Dialect, stmt string) string {
	if d == dialect.SQLite {
		return ""
	}
	return stmt
}

// A declaration edit or another declaration file invalidates the certificate.
func TestReconcile_CertificateBoundToTheDeclaration(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		settle(t, db)
		path := editedDeclaration(t)
		rep := mustReconcile(t, db, reconcile.WithSchemaFile(path))
		require.NotContains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail)
		settle(t, db, reconcile.WithSchemaFile(path))
		rep = mustReconcile(t, db)
		require.NotContains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail, "back to the built-in declaration")
	})
}

// A host-created amended table on PostgreSQL carries the three-column key
// under its auto-generated name: the reconcile renames the constraint instead
// of dropping it and building the unique index again under an exclusive lock,
// and the table then matches a fresh database's index set.
func TestReconcile_PostgresRenamesAutoNamedKeyInsteadOfRebuildingIt(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres).Host(t)
	db.Exec(t, hostAmendedDDL(t, "task_session_id, agent_execution_id, tool_call_id"))
	plan, err := reconcile.Plan(ctx, db.DB)
	require.NoError(t, err)
	joined := strings.Join(plan.Statements(), "\n")
	require.Contains(t, joined, "RENAME CONSTRAINT")
	require.NotContains(t, joined, "DROP CONSTRAINT")
	require.NotContains(t, joined, "ADD CONSTRAINT")

	mustReconcile(t, db)
	obs := observeKeyBearing(t, db)
	require.Equal(t, freshIndexSet(t, db.Dialect), obs.Indexes["task_session_subagents"])
	settle(t, db)
}

// A DEFERRABLE three-column unique cannot arbitrate ON CONFLICT, so it is not
// AC-33 clause 2 and execution_since is not published off it: while the shape
// step fails the key stays unwritten; once it runs, the declared constraint
// replaces the deferrable one (Atlas's diff alone, blind to deferrability,
// planned nothing and every boot stopped there).
func TestReconcile_PostgresDeferrableKeyIsNotClause2(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres).Host(t)
	mustReconcile(t, db)
	db.Exec(t, `DELETE FROM kandev_meta WHERE key = 'subagent_context_execution_since';
ALTER TABLE task_session_subagents DROP CONSTRAINT task_session_subagents_session_execution_tool_call_key;
ALTER TABLE task_session_subagents ADD CONSTRAINT task_session_subagents_session_execution_tool_call_key UNIQUE (task_session_id, agent_execution_id, tool_call_id) DEFERRABLE INITIALLY DEFERRED`)
	obs := observe(t, db)
	require.False(t, obs.EndState.ThreeColumnUnique)
	rep, _ := reconcile.Reconcile(ctx, db.DB, failAt(hooks.FailpointShapeApplied))
	require.NotEqual(t, reconcile.Applied, rep.Step(reconcile.StepExecutionSince).Status, describe(rep))
	require.Nil(t, readKeys(t, db).ExecutionSince)

	rep = mustReconcile(t, db)
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
	require.Zero(t, count(t, db, `SELECT COUNT(*) FROM pg_constraint WHERE conrelid = 'task_session_subagents'::regclass AND condeferrable`))
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	settle(t, db)
}

// editedDeclaration writes the built-in schema.hcl with a trailing comment: the
// same shape, another declaration, so a boot with it is never certified by the
// built-in declaration's certificate and takes the lock.
func editedDeclaration(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edited.hcl")
	require.NoError(t, os.WriteFile(path, append(append([]byte{}, schemastate.SchemaHCL...), "\n# an edit\n"...), 0o644))
	return path
}

// A steady-state boot checks the certificate before it takes the lock: a host
// writer holding SQLite's write lock (BEGIN IMMEDIATE), or another replica
// mid-reconcile holding the cross-replica lock, does not hold it up. The lock
// wait is far shorter than the hold, so a boot that waited for the lock would
// fail; the control boot, which has work, does fail on it.
func TestReconcile_SteadyStateBootTakesNoLock(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		settle(t, db)
		shortWait := reconcile.WithLockWait(100 * time.Millisecond)

		if db.Dialect == dialect.SQLite {
			host, err := db.Conn(ctx)
			require.NoError(t, err)
			_, err = host.ExecContext(ctx, "BEGIN IMMEDIATE")
			require.NoError(t, err)
			_, err = host.ExecContext(ctx, "UPDATE task_sessions SET state = state")
			require.NoError(t, err)

			rep := mustReconcile(t, db, shortWait)
			require.Contains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail, describe(rep))
			rep, err = reconcile.Reconcile(ctx, db.DB, shortWait, reconcile.WithSchemaFile(editedDeclaration(t)))
			require.Error(t, err, "control: a boot with work waits for the host writer")
			require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepLock).Status, describe(rep))

			_, err = host.ExecContext(ctx, "ROLLBACK")
			require.NoError(t, err)
			require.NoError(t, host.Close())
		}

		// Another replica holds the lock, stopped inside its shape step.
		finish := replicaHoldingTheLock(t, db, reconcile.WithSchemaFile(editedDeclaration(t)))
		rep := mustReconcile(t, db, shortWait)
		require.Contains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail, describe(rep))
		rep, err := reconcile.Reconcile(ctx, db.DB, shortWait, reconcile.WithSchemaFile(editedDeclaration(t)))
		require.Error(t, err, "control: a boot with work waits for the replica")
		require.Equal(t, reconcile.Failed, rep.Step(reconcile.StepLock).Status, describe(rep))
		_, err = finish()
		require.NoError(t, err)
	})
}

// The same on a rollback-journal SQLite file (the host's own choice of
// journal, which the reconcile never changes): a writer holding BEGIN
// IMMEDIATE, with an uncommitted row, does not hold up a certified boot.
func TestReconcile_SQLiteRollbackJournalSteadyStateBootTakesNoLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "host.db")
	sqlDB, err := sql.Open("sqlite", dsn.SQLiteDSN(path))
	require.NoError(t, err)
	defer sqlDB.Close()
	db := &dbtest.DB{DB: sqlDB, Dialect: dialect.SQLite, DSN: dsn.SQLiteDSN(path), Schema: "main"}
	db.Host(t)
	settle(t, db, quiet)
	var mode string
	require.NoError(t, db.QueryRow(`PRAGMA journal_mode`).Scan(&mode))
	require.Equal(t, "delete", mode)

	host, err := db.Conn(ctx)
	require.NoError(t, err)
	defer host.Close()
	_, err = host.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	_, err = host.ExecContext(ctx, "INSERT INTO task_sessions (id, task_id) VALUES ('s9', 'k9')")
	require.NoError(t, err)

	shortWait := reconcile.WithLockWait(100 * time.Millisecond)
	rep := mustReconcile(t, db, shortWait, quiet)
	require.True(t, rep.Certified, describe(rep))
	require.Contains(t, rep.Step(reconcile.StepShape).Detail, certifiedDetail)
	_, err = reconcile.Reconcile(ctx, db.DB, shortWait, quiet, reconcile.WithSchemaFile(editedDeclaration(t)))
	require.Error(t, err, "control: a boot with work waits for the host writer")
	_, err = host.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
}

// signalWriter closes seen the first time a log line contains want.
type signalWriter struct {
	want string
	seen chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// A boot that found no certificate and waited for the lock checks again under
// it: the replica that held the lock certified the store meanwhile, so the
// waiting boot takes the fast path instead of repeating the full check.
func TestReconcile_BootThatWaitedForTheLockRechecksTheCertificate(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		settle(t, db, quiet)
		db.Exec(t, `DELETE FROM kandev_meta WHERE key = 'schemastate_shape_certificate'`)

		// A: a clean full check, held under the lock before it certifies.
		finishA := replicaHoldingTheLock(t, db, quiet)

		// B: finds no certificate, says so, and waits for the lock.
		w := &signalWriter{want: "no certificate holds", seen: make(chan struct{})}
		bDone := make(chan *reconcile.Report, 1)
		go func() {
			rep, _ := reconcile.Reconcile(ctx, db.DB, reconcile.WithLockWait(time.Minute),
				reconcile.WithLogger(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))))
			bDone <- rep
		}()
		<-w.seen
		a, _ := finishA()
		require.True(t, a.Certified, describe(a))
		b := <-bDone
		require.Equal(t, reconcile.Applied, b.Step(reconcile.StepLock).Status, describe(b))
		require.Contains(t, b.Step(reconcile.StepShape).Detail, certifiedDetail, describe(b))
		require.True(t, b.Certified)
	})
}

// replicaHoldingTheLock is another replica's reconcile (with opts) stopped
// inside its shape step, holding the lock; finish lets it go on and returns
// its report and error.
func replicaHoldingTheLock(t *testing.T, db *dbtest.DB, opts ...reconcile.Option) (finish func() (*reconcile.Report, error)) {
	t.Helper()
	return replicatest.HoldingTheLock(t, db.DB, hooks.FailpointShapeApplied, opts...)
}

// Host DDL committed between the full check's inspection and the
// certificate's catalog read is never certified: on PostgreSQL each step
// commits on its own, so the host can change an owned table after the shape
// step compared it and before the certificate hashes the catalog. The
// certificate is written only when the catalog it hashes is the one the
// shape step compared (read before its inspection), so the next boot takes
// the full check again and puts the declared default back.
func TestReconcile_PostgresHostDDLAfterTheCheckIsNotCertified(t *testing.T) {
	db := openPostgres(t).Host(t)
	settle(t, db)
	db.Exec(t, `DELETE FROM kandev_meta WHERE key = 'schemastate_shape_certificate'`)
	var ddl error
	rep, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithFailpoint(func(p string) error {
		if p == hooks.FailpointExecutionSinceObserve {
			_, ddl = db.DB.Exec(`ALTER TABLE task_session_subagents ALTER COLUMN source SET DEFAULT 'other'`)
		}
		return nil
	}))
	require.NoError(t, err)
	require.NoError(t, ddl)
	require.Equal(t, reconcile.Unchanged, rep.Step(reconcile.StepShape).Status, describe(rep))
	require.False(t, rep.Certified, "a catalog the shape step never compared was certified: %s", describe(rep))

	next := mustReconcile(t, db)
	require.NotContains(t, next.Step(reconcile.StepShape).Detail, certifiedDetail, describe(next))
	require.Equal(t, []string{"'live'::text"}, db.Strings(t, `SELECT column_default FROM information_schema.columns
 WHERE table_schema = current_schema() AND table_name = 'task_session_subagents' AND column_name = 'source'`))
}
