package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/store"
)

// server is the scratch server for dialect d: none for SQLite, the test
// server for PostgreSQL (skipped, or failed in CI, when it is unreachable).
func server(t *testing.T, d dialect.Dialect) string {
	if d == dialect.SQLite {
		return ""
	}
	dbtest.Open(t, d)
	return dbtest.PostgresDSN()
}

func eachDialect(t *testing.T, fn func(t *testing.T, d dialect.Dialect)) {
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		t.Run(string(d), func(t *testing.T) { fn(t, d) })
	}
}

// Every store a scratch made is removed on Close: the temporary directory on
// SQLite, every schema it created on PostgreSQL.
func TestScratch_RemovesEveryStore(t *testing.T) {
	ctx := context.Background()
	eachDialect(t, func(t *testing.T, d dialect.Dialect) {
		srv := server(t, d)
		sc, err := store.NewScratch(ctx, srv, "test")
		require.NoError(t, err)
		require.Equal(t, d, sc.Dialect())
		var schemas, dirs []string
		for _, name := range []string{"fresh", "pre-amendment", "host-ddl"} {
			st, err := sc.Open(ctx, name)
			require.NoError(t, err)
			require.Equal(t, d, st.Dialect)
			_, err = st.Exec(`CREATE TABLE t (id TEXT PRIMARY KEY)`)
			require.NoError(t, err, "each store is empty: a table of the same name is created in each")
			schemas = append(schemas, st.Schema)
			dirs = append(dirs, filepath.Dir(strings.TrimPrefix(st.CLIDSN, "sqlite:")))
		}
		require.NoError(t, sc.Close())
		if d == dialect.SQLite {
			_, err := os.Stat(dirs[0])
			require.ErrorIs(t, err, os.ErrNotExist)
			return
		}
		require.Len(t, schemas, 3)
		admin, err := dsn.Target{DriverName: "pgx", DSN: srv}.Open(ctx)
		require.NoError(t, err)
		defer admin.Close()
		for _, s := range schemas {
			var n int
			require.NoError(t, admin.QueryRow(`SELECT count(*) FROM pg_namespace WHERE nspname = $1`, s).Scan(&n))
			require.Zero(t, n, s)
		}
	})
}

// A name makes one store: a second store of that name would not be empty.
func TestScratch_RefusesANameTwice(t *testing.T) {
	ctx := context.Background()
	eachDialect(t, func(t *testing.T, d dialect.Dialect) {
		sc, err := store.NewScratch(ctx, server(t, d), "test")
		require.NoError(t, err)
		defer func() { require.NoError(t, sc.Close()) }()
		_, err = sc.Open(ctx, "fresh")
		require.NoError(t, err)
		_, err = sc.Open(ctx, "fresh")
		require.ErrorContains(t, err, `"fresh" was already created`)
	})
}

// A scratch server is PostgreSQL: any other --db is refused, never taken for
// a SQLite directory.
func TestScratch_ServerMustBePostgres(t *testing.T) {
	_, err := store.NewScratch(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "x.db"), "test")
	require.ErrorContains(t, err, "must be PostgreSQL")
}

var errNotEmpty = errors.New("not empty")

// A slot hands out an empty store at its one location each time, and refuses
// a location that held tables before it, leaving them as they were — also
// when asked again.
func TestSlot_EmptiesOnlyWhatItFilled(t *testing.T) {
	ctx := context.Background()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		target, err := dsn.Parse(db.CLIDSN)
		require.NoError(t, err)
		db.Exec(t, `CREATE TABLE host_table (id TEXT PRIMARY KEY)`)
		slot := store.NewSlot(target, errNotEmpty)
		for range 2 {
			_, err = slot.Next(ctx)
			require.ErrorIs(t, err, errNotEmpty)
		}
		require.NoError(t, slot.Close())
		require.Equal(t, []string{"0"}, db.Strings(t, `SELECT CAST(COUNT(*) AS TEXT) FROM host_table`), "the refused location still holds its table")

		db.Exec(t, `DROP TABLE host_table`)
		slot = store.NewSlot(target, errNotEmpty)
		defer slot.Close()
		for i := range 3 {
			st, err := slot.Next(ctx)
			require.NoError(t, err, "store %d", i)
			require.Equal(t, db.Dialect, st.Dialect)
			_, err = st.Exec(`CREATE TABLE filled (id TEXT PRIMARY KEY)`)
			require.NoError(t, err, "store %d is empty", i)
		}
	})
}

// A slot at a target of no known dialect fails, never opens SQLite.
func TestSlot_UnknownDialectIsAnError(t *testing.T) {
	slot := store.NewSlot(dsn.Target{Dialect: "mysql", Path: filepath.Join(t.TempDir(), "x.db")}, errNotEmpty)
	_, err := slot.Next(context.Background())
	require.ErrorContains(t, err, `no stores for dialect "mysql"`)
}
