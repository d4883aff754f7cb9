package pgbouncer_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/pgbouncer"
)

// backendPID is the server process a client's statement ran on.
func backendPID(t *testing.T, c *sql.Conn) int {
	t.Helper()
	var pid int
	require.NoError(t, c.QueryRowContext(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid))
	return pid
}

// connect is one client connection to dsn, in a pgx mode that prepares no
// named statement (pgx's default names its statements after their SQL, so
// two clients of one server connection collide: 42P05).
func connect(t *testing.T, dsn string) *sql.Conn {
	t.Helper()
	db, err := sql.Open("pgx", unnamed(t, dsn))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	c, err := db.Conn(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func unnamed(t *testing.T, dsn string) string {
	return dbtest.WithParam(t, dsn, "default_query_exec_mode", "exec")
}

// Transaction mode: two clients, each holding its own connection to
// PgBouncer, run on the one server connection of the pool, and a session
// setting one of them makes is the other's — what a host's replicas meet.
func TestStart_TransactionModeSharesServerConnections(t *testing.T) {
	p := pgbouncer.Start(t, pgbouncer.Options{Mode: pgbouncer.Transaction, PoolSize: 1})
	a, b := connect(t, p.DSN), connect(t, p.DSN)
	require.Equal(t, backendPID(t, a), backendPID(t, b), "one server connection for both clients")

	ctx := context.Background()
	_, err := a.ExecContext(ctx, `SET lock_timeout = '7s'`)
	require.NoError(t, err)
	var got string
	require.NoError(t, b.QueryRowContext(ctx, `SHOW lock_timeout`).Scan(&got))
	require.Equal(t, "7s", got, "a session setting leaks to the next client")
}

// Session mode: a client keeps its server connection, and the next client
// of that connection finds it reset (DISCARD ALL).
func TestStart_SessionModeKeepsAndResetsServerConnections(t *testing.T) {
	p := pgbouncer.Start(t, pgbouncer.Options{Mode: pgbouncer.Session, PoolSize: 1})
	ctx := context.Background()
	first, err := sql.Open("pgx", unnamed(t, p.DSN))
	require.NoError(t, err)
	a, err := first.Conn(ctx)
	require.NoError(t, err)
	_, err = a.ExecContext(ctx, `SET lock_timeout = '7s'`)
	require.NoError(t, err)
	pid := backendPID(t, a)
	var got string
	require.NoError(t, a.QueryRowContext(ctx, `SHOW lock_timeout`).Scan(&got))
	require.Equal(t, "7s", got, "the client's own session")
	a.Close()
	require.NoError(t, first.Close(), "disconnect from PgBouncer")

	b := connect(t, p.DSN)
	require.Equal(t, pid, backendPID(t, b), "the pool's one server connection")
	require.NoError(t, b.QueryRowContext(ctx, `SHOW lock_timeout`).Scan(&got))
	require.Equal(t, "0", got, "reset when the first client left")
}

// The pooled DSN and Direct reach one database of the test's own.
func TestStart_PooledAndDirectAreOneDatabase(t *testing.T) {
	p := pgbouncer.Start(t, pgbouncer.Options{Mode: pgbouncer.Transaction})
	p.Direct.Exec(t, `CREATE TABLE seen (v int); INSERT INTO seen VALUES (42)`)
	var v int
	var name string
	require.NoError(t, connect(t, p.DSN).QueryRowContext(context.Background(), `SELECT v, current_database() FROM seen`).Scan(&v, &name))
	require.Equal(t, 42, v)
	require.Equal(t, p.Database, name)
	require.NotEqual(t, "test", name)
}

// recorder is a testing.TB that records how Start gave up.
type recorder struct {
	testing.TB
	failed, skipped string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Without a pgbouncer binary the pooler tests skip locally and fail under
// CI.
func TestStart_MissingBinaryFailsUnderCI(t *testing.T) {
	t.Setenv(pgbouncer.EnvBinary, "/nonexistent/pgbouncer")
	t.Setenv("PATH", t.TempDir())
	start := func() *recorder {
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			pgbouncer.Start(r, pgbouncer.Options{Mode: pgbouncer.Transaction})
		}()
		<-done
		return r
	}
	t.Setenv("CI", "")
	t.Setenv("SCHEMASTATE_REQUIRE_POSTGRES", "")
	r := start()
	require.Contains(t, r.skipped, "pgbouncer not installed")
	require.Empty(t, r.failed)

	t.Setenv("CI", "true")
	r = start()
	require.Contains(t, r.failed, "pgbouncer is required")
	require.Empty(t, r.skipped)
	require.True(t, dbtest.PostgresRequired())
}

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// Statement mode refuses a transaction of more than one statement.
func TestStart_StatementModeRefusesTransactions(t *testing.T) {
	p := pgbouncer.Start(t, pgbouncer.Options{Mode: pgbouncer.Statement})
	c := connect(t, p.DSN)
	ctx := context.Background()
	var one int
	require.NoError(t, c.QueryRowContext(ctx, `SELECT 1`).Scan(&one))
	tx, err := c.BeginTx(ctx, nil)
	if err == nil {
		_, err = tx.ExecContext(ctx, `SELECT 1`)
		_ = tx.Rollback()
	}
	require.ErrorContains(t, err, "transaction blocks not allowed in statement pooling mode")
}
