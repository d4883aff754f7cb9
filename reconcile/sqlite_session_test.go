package reconcile_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// recorder is a modernc connector that records every statement its
// connections are sent, in order: what a reconcile ran, as the driver saw it.
type recorder struct {
	dsn   string
	mu    sync.Mutex
	stmts []string
}

func (r *recorder) Connect(context.Context) (driver.Conn, error) {
	c, err := (&sqlite.Driver{}).Open(r.dsn)
	if err != nil {
		return nil, err
	}
	return recordingConn{Conn: c, r: r}, nil
}

func (r *recorder) Driver() driver.Driver { return &sqlite.Driver{} }

func (r *recorder) add(q string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, strings.Join(strings.Fields(q), " "))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.stmts
	r.stmts = nil
	return out
}

type recordingConn struct {
	driver.Conn
	r *recorder
}

func (c recordingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.r.add(q)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c recordingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.r.add(q)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c recordingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	c.r.add(q)
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func indexOf(stmts []string, stmt string) int {
	return slices.IndexFunc(stmts, func(s string) bool { return strings.EqualFold(s, stmt) })
}

// Issue 13: a certified SQLite boot runs the certificate's two reads and
// nothing else — no transaction, no pragma read, set or restored (they cost
// a steady-state boot a third of its time). A boot with work
// still switches foreign keys off, and verifies it, before BEGIN IMMEDIATE,
// and gives the host its busy timeout and foreign keys back after COMMIT.
// (PostgreSQL's session sets nothing on its connection before the lock.)
func TestReconcile_SQLiteCertifiedBootRunsOnlyItsRead(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite).Host(t)
	settle(t, db, quiet)
	rec := &recorder{dsn: db.DSN}
	pool := sql.OpenDB(rec)
	defer pool.Close()
	pool.SetMaxOpenConns(1)
	_, err := pool.Exec(`PRAGMA busy_timeout = 250`)
	require.NoError(t, err)
	rec.take()

	rep, err := reconcile.Reconcile(ctx, pool, quiet, reconcile.WithDialect(dialect.SQLite))
	require.NoError(t, err)
	require.True(t, rep.Certified, describe(rep))
	require.Equal(t, reconcile.Unchanged, rep.Step(reconcile.StepLock).Status, describe(rep))
	stmts := rec.take()
	require.Len(t, stmts, 2, "%q", stmts)
	for _, s := range stmts {
		require.True(t, strings.HasPrefix(s, "SELECT"), "a certified boot ran %q (all: %q)", s, stmts)
	}

	// A boot with work: the certificate is gone, so the full check runs.
	db.Exec(t, `DELETE FROM kandev_meta WHERE key = 'schemastate_shape_certificate'`)
	rep, err = reconcile.Reconcile(ctx, pool, quiet, reconcile.WithDialect(dialect.SQLite))
	require.NoError(t, err)
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepLock).Status, describe(rep))
	stmts = rec.take()
	off, verify, immediate := indexOf(stmts, "PRAGMA foreign_keys = OFF"), -1, indexOf(stmts, "BEGIN IMMEDIATE")
	for i := off + 1; off >= 0 && i < len(stmts); i++ {
		if strings.EqualFold(stmts[i], "PRAGMA foreign_keys") {
			verify = i
			break
		}
	}
	require.True(t, off >= 0 && verify > off && immediate > verify, "foreign keys off and verified before BEGIN IMMEDIATE: %q", stmts)
	commit := slices.Index(stmts, "COMMIT")
	require.Greater(t, indexOf(stmts, "PRAGMA foreign_keys = ON"), commit, "%q", stmts)
	require.Greater(t, indexOf(stmts, "PRAGMA busy_timeout = 250"), commit, "%q", stmts)
	var busy, fk int
	require.NoError(t, pool.QueryRow(`PRAGMA busy_timeout`).Scan(&busy))
	require.NoError(t, pool.QueryRow(`PRAGMA foreign_keys`).Scan(&fk))
	require.Equal(t, []int{250, 1}, []int{busy, fk})
}

// Issue 13: a rebuild that copies its rows verbatim under the foreign keys
// the live table already has, with no table referencing it, skips the
// foreign_key_check scans before and after the copy (the violation set
// cannot change) and says so. A violation already in the table is carried
// over as it was, not refused.
func TestReconcile_SQLiteRebuildSkipsForeignKeyCheckWhenNoForeignKeyChanges(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite).Host(t).Legacy(t)
	seedLegacy(t, db)
	db.Exec(t, `PRAGMA foreign_keys = OFF;
INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, source, observed_at, updated_at) VALUES ('orphan', 'no such session', 'k9', 'toolu_9', 'live', '2026-07-30 00:00:00+00:00', '2026-07-30 00:00:00+00:00');
PRAGMA foreign_keys = ON`)
	before := snapshot(t, db)

	rep := mustReconcile(t, db)
	require.Contains(t, rep.Step(reconcile.StepShape).Detail, "foreign_key_check skipped", describe(rep))
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	require.Equal(t, before, snapshot(t, db))
	require.Equal(t, []string{"task_session_subagents"}, db.Strings(t, `SELECT "table" FROM pragma_foreign_key_check`), "the one violation, as it was")
}

// The other side of the same rule: a rebuild that adds a foreign key still
// compares foreign_key_check before and after, and refuses the rows that
// violate the new key — the step fails and the table is left as it was.
func TestReconcile_SQLiteRebuildAddingAForeignKeyRefusesNewViolations(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite).Host(t)
	legacyWith(t, db, "", "    FOREIGN KEY (task_session_id) REFERENCES task_sessions(id) ON DELETE CASCADE,\n", "")
	seedLegacy(t, db)
	db.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, tool_call_id, source, observed_at, updated_at) VALUES ('orphan', 'no such session', 'k9', 'toolu_9', 'live', '2026-07-30 00:00:00+00:00', '2026-07-30 00:00:00+00:00')`)
	before := snapshot(t, db)

	rep, err := reconcile.Reconcile(ctx, db.DB, quiet)
	require.ErrorIs(t, err, reconcile.ErrStepFailed)
	shape := rep.Step(reconcile.StepShape)
	require.Equal(t, reconcile.Failed, shape.Status, describe(rep))
	require.Contains(t, shape.Detail, "introduced 1 foreign-key violations")
	require.Equal(t, before, snapshot(t, db))
	require.False(t, observe(t, db).EndState.KeyBearing(), "the table keeps its legacy shape")

	db.Exec(t, `DELETE FROM task_session_subagents WHERE id = 'orphan'`)
	rep = mustReconcile(t, db)
	require.NotContains(t, rep.Step(reconcile.StepShape).Detail, "skipped", "the foreign keys change: checked")
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
}

// Issue 19: a SQLite rebuild's guards are phases' data — no NULL where the
// key is tightened, the row count, foreign_key_check before and after,
// legacy_alter_table set and restored —
// and are what runs around the rebuild's statements, as the driver saw them.
func TestReconcile_SQLiteRebuildRunsThePlannedGuards(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite).Host(t).Legacy(t)
	seedLegacy(t, db)
	// A table referencing the rebuilt one: its foreign keys are checked.
	db.Exec(t, `CREATE TABLE subagent_notes (id TEXT PRIMARY KEY, subagent_id TEXT REFERENCES task_session_subagents (id))`)
	rec := &recorder{dsn: db.DSN}
	pool := sql.OpenDB(rec)
	defer pool.Close()
	pool.SetMaxOpenConns(1)
	opt := reconcile.WithDialect(dialect.SQLite)

	plan, err := reconcile.Plan(ctx, pool, quiet, opt)
	require.NoError(t, err)
	var rebuild *ops.Phase
	for _, ph := range plan.Phases() {
		if ph.Name == ops.PhaseRebuild {
			rebuild = &ph
		}
	}
	require.NotNil(t, rebuild, "the legacy table is rebuilt: %v", plan.Phases())
	kinds := map[ops.GuardKind]ops.Guard{}
	for _, g := range rebuild.Guards {
		kinds[g.Kind] = g
	}
	require.Len(t, kinds, 4, "%+v", rebuild.Guards)
	nulls, fk, rows, setting := kinds[ops.GuardNoNulls], kinds[ops.GuardForeignKeys], kinds[ops.GuardRowsCopied], kinds[ops.GuardSetting]
	require.Equal(t, "id", nulls.Column, "the legacy id TEXT PRIMARY KEY is nullable on SQLite")
	require.Equal(t, "referenced by subagent_notes", fk.Detail)
	require.True(t, strings.HasPrefix(rows.Copy, "INSERT INTO"), rows.Copy)
	require.Contains(t, rebuild.SQL, rows.Copy)

	var want []string
	want = append(want, nulls.SQL...)
	want = append(want, fk.SQL...)
	want = append(want, rows.SQL...)
	want = append(want, setting.Read, setting.Set)
	want = append(want, rebuild.SQL...)
	want = append(want, fk.SQL...)
	want = append(want, fmt.Sprintf(setting.Restore, "0"))
	for i, s := range want {
		want[i] = strings.Join(strings.Fields(s), " ")
	}
	rec.take()
	rep, err := reconcile.Reconcile(ctx, pool, quiet, opt)
	require.NoError(t, err, describe(rep))
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status, describe(rep))
	stmts := rec.take()
	require.True(t, subsequence(stmts, want), "ran, in this order, the guards and statements the plan shows:\nwant %q\nran %q", want, stmts)
}

// subsequence reports whether want occurs in got in order, not necessarily
// contiguously.
func subsequence(got, want []string) bool {
	i := 0
	for _, s := range got {
		if i < len(want) && s == want[i] {
			i++
		}
	}
	return i == len(want)
}
