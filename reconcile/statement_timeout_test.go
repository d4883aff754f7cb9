package reconcile_test

import (
	"database/sql"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

// loginWithTimeout creates a login role whose every session starts with
// statement_timeout = timeout (ALTER ROLE … SET, as managed setups give an
// application's role), makes it the owner of every table of the test's
// schema, and opens a pool connected as it, directly.
func loginWithTimeout(t *testing.T, db *dbtest.DB, timeout string) (role string, pool *sql.DB) {
	t.Helper()
	role = uniqueName("schemastate_app_")
	db.Exec(t, `CREATE ROLE `+role+` LOGIN`)
	t.Cleanup(func() {
		_, _ = db.DB.Exec(`DROP OWNED BY ` + role)
		_, _ = db.DB.Exec(`DROP ROLE ` + role)
	})
	db.Exec(t, `ALTER ROLE `+role+` SET statement_timeout = '`+timeout+`';
GRANT USAGE, CREATE ON SCHEMA `+dialect.QuoteIdent(db.Schema)+` TO `+role)
	for _, table := range db.Strings(t, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`) {
		db.Exec(t, `ALTER TABLE `+dialect.QuoteIdent(table)+` OWNER TO `+role)
	}
	pool, err := sql.Open("pgx", editDSN(t, db.DSN, func(u *url.URL) { u.User = url.User(role) }))
	require.NoError(t, err)
	t.Cleanup(func() { pool.Close() }) // before the role is dropped
	pool.SetMaxIdleConns(16)           // every connection the reconcile used is kept, and checked after it
	var got string
	require.NoError(t, pool.QueryRow(`SHOW statement_timeout`).Scan(&got))
	require.Equal(t, timeout, got, "the role's sessions start with its setting")
	return role, pool
}

// holdAfter holds lock on table from another session from the moment the
// phase id has committed, for hold: the phase after it waits that long.
func holdAfter(db *dbtest.DB, id, table, lock string, hold time.Duration) func(point string) error {
	return func(p string) error {
		if p != id {
			return nil
		}
		tx, err := db.DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(`LOCK TABLE ` + table + ` IN ` + lock + ` MODE`); err != nil {
			tx.Rollback()
			return err
		}
		time.AfterFunc(hold, func() { _ = tx.Rollback() })
		return nil
	}
}

// requireWriterStoresOrRefusesShape is the live writer on the store the
// reconcile left: it either stores a frame or refuses at its start naming
// the table whose shape it cannot write.
func requireWriterStoresOrRefusesShape(t *testing.T, db *sql.DB) {
	t.Helper()
	w, err := capture.NewWriter(ctx, db, dialect.Postgres, capture.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		require.ErrorIs(t, err, capture.ErrIncompatibleTable)
		require.Contains(t, err.Error(), "task_session_subagents", "the refusal names the shape")
		return
	}
	defer w.Close()
	require.NoError(t, w.Record(ctx, capture.Frame{SessionID: "s1", TaskID: "k1", ToolCallID: "toolu_live_after", ExecutionID: "exec-after", ToolStatus: "in_progress", ObservedAt: time.Now()}))
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM task_session_subagents WHERE tool_call_id = 'toolu_live_after'`).Scan(&n))
	require.Equal(t, 1, n, "the frame is stored")
}

// Under the role's statement_timeout of 300 ms, on a direct connection, the
// key's concurrent build outlasts the host's setting (another session holds
// the table for a second after the column was added) and the backfill's
// scan too (the messages held a second): the reconcile lifts the setting on
// its own connection for the build, gives every transaction its own budget,
// and completes; the host's pool gets its connections back with the role's
// 300 ms. Before, the build was cancelled at 300 ms on every boot, leaving
// the column added and the key not built.
func TestReconcile_RoleStatementTimeoutDirectCompletes(t *testing.T) {
	db, before := seededOnlineStore(t)
	_, pool := loginWithTimeout(t, db, "300ms")
	build := holdAfter(db, hooks.FailpointAfterPhase("task_session_subagents.alter"), "task_session_subagents", "SHARE", time.Second)
	scan := holdAfter(db, hooks.FailpointExecutionSinceWrite, "task_session_messages", "ACCESS EXCLUSIVE", time.Second)
	opts := append(append([]reconcile.Option{}, online...), reconcile.WithFailpoint(func(p string) error {
		if err := build(p); err != nil {
			return err
		}
		return scan(p)
	}))
	rep, err := reconcile.Reconcile(ctx, pool, opts...)
	require.NoError(t, err, describe(rep))
	require.Contains(t, rep.Step(reconcile.StepShape).Phases, "task_session_subagents.build_index."+subagentsKey)
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepBackfill).Status, describe(rep))
	requireAC33(t, db, freshIndexSet(t, db.Dialect))
	requireBackfilledOnceAmong(t, db, 300)
	require.Subset(t, snapshot(t, db), before)

	// Every connection of the host's pool at once: each has the role's
	// setting, none the reconcile's.
	for _, got := range onEveryConnection(t, pool, `SHOW statement_timeout`) {
		require.Equal(t, "300ms", got)
	}
	requireWriterStoresOrRefusesShape(t, pool)
}

// Behind a transaction-mode pooler a session SET would be left on a server
// connection another client is handed next, so the reconcile cannot lift a
// statement_timeout the role brings (ALTER ROLE … IN DATABASE … SET, 300
// ms): the shape step fails before any DDL, naming statement_timeout, its
// value, the role it comes from and the fix; the catalog is as it was (no
// column added without its key), and the live writer refuses at its start
// naming the shape or stores the frame. Before, the column was added, the
// build was cancelled at 300 ms and the table was left half-applied.
func TestReconcile_RoleStatementTimeoutBehindPoolerRefusesBeforeDDL(t *testing.T) {
	p, pooled := legacyBehindPooler(t)
	direct := p.Direct
	direct.Exec(t, `ALTER ROLE postgres IN DATABASE `+p.Database+` SET statement_timeout = '300ms'`)
	t.Cleanup(func() {
		_, _ = direct.DB.Exec(`ALTER ROLE postgres IN DATABASE ` + p.Database + ` RESET statement_timeout`)
	})
	var got string
	require.NoError(t, pooled.QueryRow(`SHOW statement_timeout`).Scan(&got))
	require.Equal(t, "300ms", got)
	before := catalogVersion(t, direct)

	// Were the alter to run, the build after it would wait a second.
	hold := holdAfter(direct, hooks.FailpointAfterPhase("task_session_subagents.alter"), "task_session_subagents", "SHARE", time.Second)
	rep, err := reconcile.Reconcile(ctx, pooled, append(append([]reconcile.Option{}, online...), reconcile.WithFailpoint(hold))...)
	require.ErrorIs(t, err, reconcile.ErrStepFailed, describe(rep))
	require.ErrorIs(t, err, ops.ErrStatementTimeout)
	shape := rep.Step(reconcile.StepShape)
	require.Equal(t, reconcile.Failed, shape.Status, describe(rep))
	require.Empty(t, shape.Phases, "no phase ran")
	for _, want := range []string{"statement_timeout", "300ms", "role postgres in database " + p.Database, "ALTER ROLE", "build_index"} {
		require.Contains(t, shape.Detail, want)
	}
	require.Equal(t, before, catalogVersion(t, direct), "no DDL ran")
	require.Equal(t, "integer", columnType(t, direct, "total_tokens"))
	require.Zero(t, count(t, direct, `SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND column_name = 'agent_execution_id'`))
	requireWriterStoresOrRefusesShape(t, pooled)

	// The same store, small enough for one transaction: every transaction
	// sets its own statement_timeout (SET LOCAL), and the boot completes
	// through the pooler under the role's 300 ms, though the backfill's
	// scan waits a second for the messages.
	seedHistory(t, direct)
	scan := holdAfter(direct, hooks.FailpointExecutionSinceWrite, "task_session_messages", "ACCESS EXCLUSIVE", time.Second)
	rep = mustReconcile(t, &dbtest.DB{DB: pooled, Dialect: dialect.Postgres}, reconcile.WithFailpoint(scan))
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status)
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepBackfill).Status)
	requireAC33(t, direct, freshIndexSet(t, dialect.Postgres))
	requireBackfilledOnce(t, direct)
	requireWriterStoresOrRefusesShape(t, pooled)
}

// WithStatementTimeout is the budget every transaction sets for itself,
// in place of the defaults: under 200 ms the backfill's scan, held up a
// second by another session, is cancelled and its step fails by name,
// with nothing written; the next boot, with the default budget (none for
// the backfill), completes it.
func TestReconcile_WithStatementTimeoutBoundsEveryTransaction(t *testing.T) {
	db := openPostgres(t)
	seedLegacyStore(t, db)
	seedHistory(t, db)
	scan := holdAfter(db, hooks.FailpointExecutionSinceWrite, "task_session_messages", "ACCESS EXCLUSIVE", time.Second)
	rep, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithStatementTimeout(200*time.Millisecond), reconcile.WithFailpoint(scan))
	require.ErrorIs(t, err, reconcile.ErrStepFailed, describe(rep))
	backfill := rep.Step(reconcile.StepBackfill)
	require.Equal(t, reconcile.Failed, backfill.Status, describe(rep))
	require.Contains(t, backfill.Detail, "canceling statement due to statement timeout")
	require.Equal(t, reconcile.Applied, rep.Step(reconcile.StepShape).Status)
	require.Nil(t, readKeys(t, db).CaptureSince, "the backfill's transaction rolled back")

	mustReconcile(t, db) // waits for the messages (lock_timeout), unbounded by statement_timeout
	requireBackfilledOnce(t, db)
}

// A statement_timeout the host SET on its own connections (source
// session) is lifted on the one the reconcile builds on and given back as
// the host set it — not RESET to the server's default — and none of the
// host's connections keeps the reconcile's budget.
func TestReconcile_SessionStatementTimeoutIsGivenBackAsSet(t *testing.T) {
	db := openPostgres(t)
	seedLegacyStore(t, db)
	pool := hostPool(t, db, 0)
	pool.SetMaxIdleConns(16)
	var conns []*sql.Conn
	for range 4 {
		c, err := pool.Conn(ctx)
		require.NoError(t, err)
		_, err = c.ExecContext(ctx, `SET statement_timeout = '300ms'`)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close() // back to the pool, idle, with the host's SET
	}
	build := holdAfter(db, hooks.FailpointAfterPhase("task_session_subagents.alter"), "task_session_subagents", "SHARE", time.Second)
	rep, err := reconcile.Reconcile(ctx, pool, append(append([]reconcile.Option{}, online...),
		reconcile.WithFailpoint(build), reconcile.WithStatementTimeout(45*time.Second))...)
	require.NoError(t, err, describe(rep))
	requireAC33(t, db, freshIndexSet(t, db.Dialect))

	settings := map[string]int{}
	conns = conns[:0]
	for range pool.Stats().OpenConnections {
		c, err := pool.Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
		var got string
		require.NoError(t, c.QueryRowContext(ctx, `SHOW statement_timeout`).Scan(&got))
		settings[got]++
	}
	for _, c := range conns {
		c.Close()
	}
	require.Zero(t, settings["45s"], "no connection keeps the reconcile's budget: %v", settings)
	require.Equal(t, 4, settings["300ms"], "the host's four connections have its SET: %v", settings)
}
