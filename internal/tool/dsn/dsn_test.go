package dsn_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/pgbouncer"
	"github.com/schemastate/schemastate/internal/tool/dsn"

	_ "github.com/schemastate/schemastate/drivers"
)

// A path with URI metacharacters opens exactly that file, never a truncated one.
func TestSQLiteDSN_EscapesURIMetacharacters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "store#1?x=%20.db")
	db, err := sql.Open("sqlite", dsn.SQLiteDSN(path))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`CREATE TABLE t (id INTEGER)`)
	require.NoError(t, err)
	_, err = os.Stat(path)
	require.NoError(t, err, "the named file exists")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.Contains(t, []string{"store#1?x=%20.db", "store#1?x=%20.db-wal", "store#1?x=%20.db-shm"}, e.Name())
	}
}

func TestParse_RedactsPassword(t *testing.T) {
	tg, err := dsn.Parse("postgres://alice:s3cret@db.example:5432/kandev")
	require.NoError(t, err)
	require.Equal(t, dialect.Postgres, tg.Dialect)
	require.NotContains(t, tg.Display, "s3cret")
	tg, err = dsn.Parse("/var/lib/kandev.db")
	require.NoError(t, err)
	require.Equal(t, dialect.SQLite, tg.Dialect)
	require.Equal(t, "sqlite:/var/lib/kandev.db", tg.Display)
}

// A refused --db names the supported forms in words a user reads.
func TestParse_RefusalNamesTheSupportedForms(t *testing.T) {
	_, err := dsn.Parse("mysql://db.example/kandev")
	require.ErrorContains(t, err, `unsupported scheme "mysql": use sqlite:PATH, a plain file path (SQLite), or a postgres:// or postgresql:// URL`)
}

// The CLI opens PostgreSQL in pgx's exec mode unless the URL names a mode,
// and leaves the rest of the URL as written.
func TestParse_PostgresExecModeUnlessNamed(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u@h/db", "postgres://u@h/db?default_query_exec_mode=exec"},
		{"POSTGRES://u@h/db?sslmode=disable", "postgres://u@h/db?sslmode=disable&default_query_exec_mode=exec"},
		{"postgresql://u@h/db?", "postgresql://u@h/db?default_query_exec_mode=exec"},
		{"postgres://u@h/db?sslmode=disable&default_query_exec_mode=simple_protocol", "postgres://u@h/db?sslmode=disable&default_query_exec_mode=simple_protocol"},
		{"postgres://u@h/db?default_query_exec_mode=cache_statement", "postgres://u@h/db?default_query_exec_mode=cache_statement"},
	} {
		tg, err := dsn.Parse(c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, tg.DSN, c.in)
		require.NotContains(t, tg.Display, "default_query_exec_mode=exec", "the display is the URL as given")
	}
}

// Through a transaction-mode PgBouncer without prepared-statement tracking
// (Debian's 1.18), processes one after another are handed the same server
// connection. In pgx's default mode each prepares its statements under the
// same SQL-derived names, and the second fails (42P05); the mode Parse
// chooses prepares no named statement.
func TestParse_PostgresModeSurvivesTransactionPooling(t *testing.T) {
	p := pgbouncer.Start(t, pgbouncer.Options{Mode: pgbouncer.Transaction, PoolSize: 1})
	tg, err := dsn.Parse(p.DSN)
	require.NoError(t, err)
	ctx := context.Background()
	for boot := range 3 {
		db, err := tg.Open(ctx)
		require.NoError(t, err)
		var n int
		err = db.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_class WHERE relname = $1`, "pg_class").Scan(&n)
		db.Close()
		require.NoError(t, err, "process %d", boot+1)
		require.Equal(t, 1, n)
	}
}

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// SQLite's busy timeout is a parameter of the target: the connection of
// every form (written, read-only, a new store) waits as long as it was given,
// whichever of the target's methods came first; by default 10 s.
func TestTarget_WithBusyTimeoutSetsTheConnectionsTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.db")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	parsed, err := dsn.Parse("sqlite:" + path)
	require.NoError(t, err)
	busy := func(tg dsn.Target) int {
		t.Helper()
		db, err := sql.Open(tg.DriverName, tg.DSN)
		require.NoError(t, err)
		defer db.Close()
		var ms int
		require.NoError(t, db.QueryRow(`PRAGMA busy_timeout`).Scan(&ms))
		return ms
	}
	for name, c := range map[string]struct {
		tg   dsn.Target
		want int
	}{
		"default":                 {parsed, 10000},
		"write":                   {parsed.WithBusyTimeout(50 * time.Millisecond), 50},
		"read-only after":         {parsed.WithBusyTimeout(50 * time.Millisecond).ReadOnly(), 50},
		"read-only before":        {parsed.ReadOnly().WithBusyTimeout(75 * time.Millisecond), 75},
		"new store":               {parsed.NewStore().WithBusyTimeout(250 * time.Millisecond), 250},
		"zero is the default":     {parsed.WithBusyTimeout(0).ReadOnly(), 10000},
		"read-only default":       {parsed.ReadOnly(), 10000},
		"new store, default kept": {parsed.WithBusyTimeout(0).NewStore(), 10000},
	} {
		require.Equal(t, c.want, busy(c.tg), name)
	}
	require.Equal(t, dsn.SQLiteReadOnlyDSN(path), parsed.ReadOnly().DSN)
	require.Equal(t, dsn.SQLiteNewStoreDSN(path), parsed.NewStore().DSN)
	pg, err := dsn.Parse("postgres://u@h/db")
	require.NoError(t, err)
	require.Equal(t, pg.DSN, pg.WithBusyTimeout(time.Second).DSN, "PostgreSQL has no busy timeout")
}

// OnServer tells a server database from a file by the target's dialect; a
// target of neither dialect is no file either, and fails loudly.
func TestTarget_OnServer(t *testing.T) {
	pg, err := dsn.Parse("postgres://u@h/db")
	require.NoError(t, err)
	require.True(t, pg.OnServer())
	lite, err := dsn.Parse("sqlite:x.db")
	require.NoError(t, err)
	require.False(t, lite.OnServer())
	require.Panics(t, func() { dsn.Target{Dialect: "mysql", Path: "x.db"}.OnServer() })
}
