package dsn_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/dsn"

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
