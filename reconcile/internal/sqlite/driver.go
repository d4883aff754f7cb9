// Package sqlite is SQLite's reconcile driver (core.Driver): its
// declaration and catalog reads (driver.go), its planning (plan.go: ALTER
// TABLE where SQLite has one, else the documented rebuild) and its session
// (session.go: the write lock, one BEGIN IMMEDIATE transaction, a savepoint
// per step). It meets the step sequence only through reconcile/internal/core.
package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"
	atlassqlite "ariga.io/atlas/sql/sqlite"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/catalog"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// Driver is SQLite's. A table is changed with ALTER TABLE where SQLite has
// one, else by the documented rebuild; every table's phase runs inside the
// reconcile's one BEGIN IMMEDIATE transaction, so the shape step is
// all-or-nothing.
type Driver struct{}

func (Driver) Dialect() dialect.Dialect { return dialect.SQLite }

// lockMechanism: the database's write lock, held by the reconcile's one
// BEGIN IMMEDIATE transaction; the same lock every SQLite phase names.
func (Driver) LockMechanism() string { return string(ops.LockSQLiteWrite) }

func (Driver) Open(ctx context.Context, db *sql.DB, o *core.Config) (core.Session, error) {
	return open(ctx, db, o)
}

func (Driver) SchemaName(context.Context, core.Querier) (string, error) { return "main", nil }

// atlas opens Atlas's driver over q, refusing any text that is more than
// one statement (internal/catalog).
func (Driver) Atlas(q core.Querier) (migrate.Driver, error) {
	return atlassqlite.Open(catalog.SQLiteQuerier(q))
}

// dropSQL: SQLite drops an index by name; a foreign key or check goes only
// with a rebuild, which never renders it.
func (Driver) DropSQL(_, _ string, c schema.Change) (string, error) {
	if d, ok := c.(*schema.DropIndex); ok {
		return "DROP INDEX " + dialect.QuoteIdent(d.I.Name), nil
	}
	return "", fmt.Errorf("SQLite drops a %T only by rebuilding the table", c)
}

func (Driver) TablesQuery(n int) string {
	return `SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (` + core.Placeholders(dialect.SQLite, 1, n) + `)`
}

// CatalogRead is one pass over sqlite_master: every entry of the owned
// tables (table, indexes, triggers, each with the SQL that made it, which
// names its table) and the covered tables with theirs, in the table's rowid
// order. So on SQLite a host migration that changes a host table sends the
// next boot to the full check once, which certifies again.
func (Driver) CatalogRead(owned, covered []string, scope string) (string, []any, bool) {
	if scope != "" {
		return "", nil, false
	}
	hostIn := "NULL"
	if len(covered) > 0 {
		hostIn = core.Placeholders(dialect.SQLite, len(owned)+1, len(covered))
	}
	return `SELECT type || ':' || name || ':' || COALESCE(sql, '') FROM sqlite_master
WHERE tbl_name IN (` + core.Placeholders(dialect.SQLite, 1, len(owned)) + `) OR (type = 'table' AND name IN (` + hostIn + `))`,
		core.Args(slices.Concat(owned, covered)), true
}

// CatalogScope: SQLite's read goes by name.
func (Driver) CatalogScope(context.Context, core.Querier, []string, []string) (string, error) {
	return "", nil
}

// foreignKeyParents reads the parent table of every foreign key of the
// owned tables (parentReader), on the full check only: a table-valued pragma
// in the certified boot's catalog read would cost it half its time again.
func (Driver) ForeignKeyParents(ctx context.Context, q core.Querier, owned []string) (parents, dangling []string, err error) {
	args := make([]any, len(owned))
	for i, t := range owned {
		args[i] = t
	}
	rows, err := q.QueryContext(ctx, `SELECT DISTINCT m.name, f."from", f."table", p.name
FROM sqlite_master m, pragma_foreign_key_list(m.name) f
LEFT JOIN sqlite_master p ON p.type = 'table' AND p.name = f."table" COLLATE NOCASE
WHERE m.type = 'table' AND m.name IN (`+core.Placeholders(dialect.SQLite, 1, len(owned))+`)
ORDER BY 1, 2`, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read the owned tables' foreign keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var table, from, ref string
		var parent sql.NullString
		if err := rows.Scan(&table, &from, &ref, &parent); err != nil {
			return nil, nil, err
		}
		if !parent.Valid {
			dangling = append(dangling, fmt.Sprintf("%s (%s) references %s, which does not exist", table, from, ref))
		} else if !slices.Contains(parents, parent.String) {
			parents = append(parents, parent.String)
		}
	}
	slices.Sort(parents)
	return parents, dangling, rows.Err()
}

// facts are what a rebuild needs to know of a live table beyond
// Atlas's inspection.
type facts struct {
	// triggers are the CREATE TRIGGER statements of the table's triggers,
	// which a rebuild creates again.
	triggers []string
	// referencedBy names the tables whose foreign keys reference the table.
	referencedBy []string
	// indexSQL is each live index's CREATE INDEX as stored, by name; an
	// inline UNIQUE has none.
	indexSQL map[string]string
	// collations names the index parts that sort by another collation
	// than BINARY, which Atlas does not read.
	collations core.Collations
}

// Facts reads what a rebuild needs beyond Atlas's inspection: the table's
// triggers, the tables referencing it and the stored CREATE INDEX of each
// index, which the rebuild creates again.
func (Driver) Facts(ctx context.Context, q core.Querier, _ string, live, _ *schema.Table) (core.Facts, error) {
	var f facts
	var err error
	if f.triggers, err = core.QueryStrings(ctx, q, `SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? AND sql IS NOT NULL ORDER BY name`, live.Name); err != nil {
		return f, err
	}
	if f.referencedBy, err = core.QueryStrings(ctx, q, `SELECT DISTINCT m.name FROM sqlite_master m, pragma_foreign_key_list(m.name) f WHERE m.type = 'table' AND f."table" = ? ORDER BY m.name`, live.Name); err != nil {
		return f, err
	}
	rows, err := q.QueryContext(ctx, `SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL`, live.Name)
	if err != nil {
		return f, err
	}
	defer rows.Close()
	f.indexSQL = map[string]string{}
	for rows.Next() {
		var name, stmt string
		if err := rows.Scan(&name, &stmt); err != nil {
			return f, err
		}
		f.indexSQL[name] = stmt
	}
	if err := rows.Err(); err != nil {
		return f, err
	}
	f.collations, err = core.ReadCollations(ctx, q, collationsQuery, live.Name)
	return f, err
}

// Observable is live with its index parts of another collation than
// BINARY marked (collationsQuery), so that such an index is not taken for a
// declared one.
func (Driver) Observable(ctx context.Context, q core.Querier, live *schema.Table) (*schema.Table, error) {
	return core.MarkCollations(ctx, q, collationsQuery, live)
}

func (Driver) Explain(err error) error { return err }
