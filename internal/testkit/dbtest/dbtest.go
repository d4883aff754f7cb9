// Package dbtest opens a fresh, isolated database per test on each dialect:
// a temporary SQLite file, or a new PostgreSQL schema on the server named by
// SCHEMASTATE_TEST_POSTGRES_DSN (default postgres://postgres@127.0.0.1:5432/test).
//
// PostgreSQL is required: a run that cannot reach it fails, in one line per
// test package (Main), and proves nothing it did not test. Only when asked
// in so many words (SCHEMASTATE_TEST_POSTGRES=skip, and neither CI=true nor
// SCHEMASTATE_REQUIRE_POSTGRES=1) is the PostgreSQL half of each test
// skipped instead.
package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
	"github.com/schemastate/schemastate/internal/tool/store"

	_ "github.com/schemastate/schemastate/drivers"
)

// EnvDSN names the environment variable holding the PostgreSQL test server DSN.
const EnvDSN = "SCHEMASTATE_TEST_POSTGRES_DSN"

// DefaultPostgresDSN is used when EnvDSN is unset.
const DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DB is one isolated test database.
type DB struct {
	*sql.DB
	Dialect dialect.Dialect
	// DSN opens another connection pool (or a child process) onto the same
	// isolated database: a modernc file DSN, or a PostgreSQL URL whose
	// search_path is the test's own schema.
	DSN string
	// CLIDSN is the form the schemastate CLI's --db flag takes.
	CLIDSN string
	// Schema is the PostgreSQL schema (or "main" on SQLite).
	Schema string
}

// Each runs fn once per dialect as subtests "sqlite" and "postgres", each on a
// fresh database.
func Each(t *testing.T, fn func(t *testing.T, db *DB)) {
	t.Helper()
	for _, d := range perdialect.All() {
		t.Run(string(d), func(t *testing.T) { fn(t, Open(t, d)) })
	}
}

// Open returns a fresh, empty database of dialect d, cleaned up with the test.
func Open(t testing.TB, d dialect.Dialect) *DB {
	t.Helper()
	server, err := servers.For(d)
	if err != nil {
		t.Fatalf("dbtest: no test databases for dialect %q", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv := server()
	sc, err := store.NewScratch(ctx, srv, "test")
	if err != nil && srv == "" {
		t.Fatalf("dbtest: %v", err)
	}
	if err != nil {
		if PostgresRequired() {
			t.Fatalf("%s", unreachable(srv, err))
		}
		t.Skipf("PostgreSQL unreachable and %s=%s: %v", EnvSkip, skipValue, err)
	}
	t.Cleanup(func() {
		if err := sc.Close(); err != nil {
			t.Logf("dbtest: remove the test database: %v", err)
		}
	})
	st, err := sc.Open(ctx, "db")
	require.NoError(t, err)
	return &DB{DB: st.DB, Dialect: st.Dialect, DSN: st.DSN, CLIDSN: st.CLIDSN, Schema: st.Schema}
}

// servers names each dialect's scratch server: none for SQLite (a temporary
// file), the test server for PostgreSQL (a schema of its own there).
var servers = perdialect.Of[func() string]{Postgres: PostgresDSN, SQLite: func() string { return "" }}

// EnvSkip names the environment variable that, set to skipValue, lets the
// PostgreSQL half of each test skip when no server answers.
const EnvSkip = "SCHEMASTATE_TEST_POSTGRES"

const skipValue = "skip"

// forced reports whether CI=true or SCHEMASTATE_REQUIRE_POSTGRES=1 holds:
// then nothing PostgreSQL's tests need may be skipped.
func forced() bool {
	return os.Getenv("CI") == "true" || os.Getenv("SCHEMASTATE_REQUIRE_POSTGRES") == "1"
}

// PostgresRequired reports whether a missing PostgreSQL server fails tests:
// always, unless EnvSkip asks for the skip (and CI=true or
// SCHEMASTATE_REQUIRE_POSTGRES=1 does not overrule it).
func PostgresRequired() bool {
	return forced() || os.Getenv(EnvSkip) != skipValue
}

// PoolerRequired reports whether a missing PgBouncer binary fails the
// pooler tests: under CI=true or SCHEMASTATE_REQUIRE_POSTGRES=1 (.ci/run
// installs it); elsewhere they skip, naming the package to install.
func PoolerRequired() bool { return forced() }

// displayDSN is dsn as the CLI prints it, any password masked (dsn.Parse).
func displayDSN(s string) string {
	if t, err := dsn.Parse(s); err == nil {
		return t.Display
	}
	return "the server of " + EnvDSN
}

// unreachable is the one line a run that cannot reach the server fails with.
func unreachable(dsn string, err error) string {
	return fmt.Sprintf("PostgreSQL unreachable at %s: %v — start it (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start), point %s at a server, or set %s=%s to test SQLite only",
		displayDSN(dsn), err, EnvDSN, EnvSkip, skipValue)
}

// PostgresDSN is the server DSN tests use.
func PostgresDSN() string {
	if v := os.Getenv(EnvDSN); v != "" {
		return v
	}
	return DefaultPostgresDSN
}

// WithParam is the PostgreSQL URL dsn with its query parameter key set to
// value: a search_path, or an application_name by which a test finds its own
// backends in pg_stat_activity.
func WithParam(t testing.TB, dsn, key, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// Exec runs a multi-statement SQL script.
func (db *DB) Exec(t testing.TB, script string) {
	t.Helper()
	for _, stmt := range fixtures.SplitSQL(script) {
		_, err := db.DB.Exec(stmt)
		require.NoError(t, err, "statement: %s", stmt)
	}
}

// Host creates the host fixture tables (task_sessions, task_session_turns,
// task_session_messages, kandev_meta).
func (db *DB) Host(t testing.TB) *DB {
	t.Helper()
	return db.fixture(t, fixtures.HostFixture)
}

// Legacy creates the pre-amendment task_session_subagents table (state 3).
func (db *DB) Legacy(t testing.TB) *DB {
	t.Helper()
	return db.fixture(t, fixtures.LegacyFixture)
}

// fixture runs the script get returns for the database's dialect.
func (db *DB) fixture(t testing.TB, get func(dialect string) (string, error)) *DB {
	t.Helper()
	s, err := get(string(db.Dialect))
	require.NoError(t, err)
	db.Exec(t, s)
	return db
}

// Strings runs q (with '?' placeholders) and returns its one text column,
// row by row.
func (db *DB) Strings(t testing.TB, q string, args ...any) []string {
	t.Helper()
	return StringsFrom(t, db.DB, db.Q(q), args...)
}

// Queryer is what StringsFrom reads through: a *sql.DB, *sql.Conn or *sql.Tx.
type Queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// StringsFrom runs q as written (its placeholders are not rebound) on qr and
// returns its one text column, row by row.
func StringsFrom(t testing.TB, qr Queryer, q string, args ...any) []string {
	t.Helper()
	rows, err := qr.QueryContext(context.Background(), q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// TextRows runs q as written (its placeholders are not rebound) on qr and
// returns every row, each column scanned as a nullable string.
func TextRows(t testing.TB, qr Queryer, q string, args ...any) [][]sql.NullString {
	t.Helper()
	rows, err := qr.QueryContext(context.Background(), q, args...)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out [][]sql.NullString
	for rows.Next() {
		r := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(r))
		for i := range r {
			ptrs[i] = &r[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// Q rebinds a '?' query for the database's dialect.
func (db *DB) Q(q string) string { return db.Dialect.Rebind(q) }

// LockWrites holds table's write lock from another connection until the
// returned func is called (or the test ends): on SQLite an IMMEDIATE
// transaction (the DSN's _txlock) that has written nothing, on PostgreSQL
// LOCK TABLE … IN EXCLUSIVE MODE, which still admits readers.
func (db *DB) LockWrites(t testing.TB, table string) (release func()) {
	t.Helper()
	tx, err := db.DB.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	_, err = tx.Exec(fmt.Sprintf(writeLocks.Must(db.Dialect), table))
	require.NoError(t, err)
	released := false
	release = func() {
		if !released {
			released = true
			require.NoError(t, tx.Rollback())
		}
	}
	t.Cleanup(release)
	return release
}

// writeLocks are LockWrites' statements.
var writeLocks = perdialect.Of[string]{Postgres: `LOCK TABLE %s IN EXCLUSIVE MODE`, SQLite: `DELETE FROM %s WHERE 1 = 0`}
