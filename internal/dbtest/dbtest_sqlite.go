package dbtest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
)

// RecreateSQLiteTable replaces a SQLite table by one created from its own
// CREATE TABLE text as edit rewrites it (SQLite alters little in place), and
// creates its indexes and triggers again. It copies no rows: it is for a
// table the test has not filled.
func (db *DB) RecreateSQLiteTable(t testing.TB, table string, edit func(create string) string) {
	t.Helper()
	require.Equal(t, dialect.SQLite, db.Dialect, "RecreateSQLiteTable is SQLite's")
	var create string
	require.NoError(t, db.DB.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&create))
	others := db.Strings(t, `SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') AND sql IS NOT NULL`, table)
	db.Exec(t, "DROP TABLE "+table)
	db.Exec(t, edit(create))
	for _, q := range others {
		db.Exec(t, q)
	}
}
