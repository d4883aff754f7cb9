// Package readonly holds what every reader of a store does the same way on
// each dialect: the one read transaction its numbers come from, the schema
// it works in, and the look-ups of whether a table or a column exists,
// resolved as the reader's
// statements resolve names (on PostgreSQL through search_path). Each dialect's
// forms are in readonly_<dialect>.go; a dialect other than the two is an
// error.
package readonly

import (
	"context"
	"database/sql"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/perdialect"
)

// forms are one dialect's read transaction and catalog look-ups.
type forms struct {
	// isolation is the read transaction's level: one snapshot for every
	// statement in it.
	isolation sql.IsolationLevel
	// table selects whether the table its one parameter names exists;
	// column whether the table its first parameter names has the column
	// its second names.
	table, column string
	// schemaName is the schema the connection resolves names in.
	schemaName func(ctx context.Context, q dialect.Querier) (string, error)
}

var dialects = perdialect.Of[forms]{Postgres: postgresForms, SQLite: sqliteForms}

// Options are the options of d's read transaction: read-only, and on
// PostgreSQL REPEATABLE READ, so every statement reads one snapshot (on
// SQLite a deferred read transaction is one WAL snapshot from its first
// read).
func Options(d dialect.Dialect) (*sql.TxOptions, error) {
	f, err := dialects.For(d)
	if err != nil {
		return nil, err
	}
	return &sql.TxOptions{ReadOnly: true, Isolation: f.isolation}, nil
}

// Begin opens d's read transaction on db (see Options).
func Begin(ctx context.Context, db *sql.DB, d dialect.Dialect) (*sql.Tx, error) {
	o, err := Options(d)
	if err != nil {
		return nil, err
	}
	return db.BeginTx(ctx, o)
}

// TableExists reports whether table exists.
func TableExists(ctx context.Context, q dialect.Querier, d dialect.Dialect, table string) (bool, error) {
	f, err := dialects.For(d)
	if err != nil {
		return false, err
	}
	var found bool
	err = q.QueryRowContext(ctx, f.table, table).Scan(&found)
	return found, err
}

// SchemaName is the schema q's statements resolve names in: main on SQLite,
// current_schema() on PostgreSQL.
func SchemaName(ctx context.Context, q dialect.Querier, d dialect.Dialect) (string, error) {
	f, err := dialects.For(d)
	if err != nil {
		return "", err
	}
	return f.schemaName(ctx, q)
}

// Strings runs query on q and returns its one text column, row by row.
func Strings(ctx context.Context, q dialect.Querier, query string, args ...any) ([]string, error) {
	return Rows(ctx, q, func(r *sql.Rows) (s string, err error) {
		err = r.Scan(&s)
		return s, err
	}, query, args...)
}

// Rows runs query on q and returns each row as scan reads it.
func Rows[T any](ctx context.Context, q dialect.Querier, scan func(*sql.Rows) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ColumnExists reports whether table has column.
func ColumnExists(ctx context.Context, q dialect.Querier, d dialect.Dialect, table, column string) (bool, error) {
	f, err := dialects.For(d)
	if err != nil {
		return false, err
	}
	var found bool
	err = q.QueryRowContext(ctx, f.column, table, column).Scan(&found)
	return found, err
}
