package dbtest

import (
	"database/sql"
	"regexp"
	"strings"
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

// SetColumnDefault makes value (a SQL literal; "" for none) the DEFAULT of
// column on table, whose DEFAULT now is a quoted literal, keeping its type,
// NOT NULL and every index: ALTER COLUMN on PostgreSQL; on SQLite, which
// cannot alter a default, the (still empty) table is created again from its
// stored SQL with the column's DEFAULT rewritten (RecreateSQLiteTable), and
// the default it then has is checked.
func (db *DB) SetColumnDefault(t testing.TB, table, column, value string) {
	t.Helper()
	if db.Dialect == dialect.Postgres {
		set := "DROP DEFAULT"
		if value != "" {
			set = "SET DEFAULT " + value
		}
		db.Exec(t, "ALTER TABLE "+table+" ALTER COLUMN "+column+" "+set)
		return
	}
	def := regexp.MustCompile("(?i)([`\"]?" + regexp.QuoteMeta(column) + "[`\"]?\\s+\\w+(?:\\s+NOT NULL)?)\\s+DEFAULT\\s+\\(?'[^']*'\\)?")
	with := "${1}"
	if value != "" {
		with += " DEFAULT " + strings.ReplaceAll(value, "$", "$$")
	}
	db.RecreateSQLiteTable(t, table, func(create string) string {
		require.Regexp(t, def, create)
		return def.ReplaceAllString(create, with)
	})
	var got sql.NullString
	require.NoError(t, db.DB.QueryRow(`SELECT dflt_value FROM pragma_table_info(?) WHERE name = ?`, table, column).Scan(&got))
	require.Equal(t, sql.NullString{String: value, Valid: value != ""}, got, "the DEFAULT of %s.%s", table, column)
}
