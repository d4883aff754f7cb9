package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlite"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/readonly"
)

// Open returns Atlas's inspector for d over q; SQLite's reads through
// SQLiteQuerier, so no name on the catalog can run a statement.
func Open(d dialect.Dialect, q dialect.Querier) (migrate.Driver, error) {
	switch d {
	case dialect.SQLite:
		return sqlite.Open(SQLiteQuerier(q))
	case dialect.Postgres:
		return postgres.Open(q)
	}
	return nil, fmt.Errorf("catalog: unknown dialect %q", d)
}

// Table is one live table as Atlas inspects it, and the names of its
// indexes that PostgreSQL keeps INVALID (a failed concurrent build): Atlas
// reads those as it reads valid ones, but they neither enforce uniqueness
// nor serve an ON CONFLICT target.
type Table struct {
	T       *schema.Table
	Invalid map[string]bool
}

// ReadTable inspects table in db's current schema inside one read-only
// transaction (readonly.Begin). T is nil when there is no such table.
func ReadTable(ctx context.Context, db *sql.DB, d dialect.Dialect, table string) (t Table, err error) {
	tx, err := readonly.Begin(ctx, db, d)
	if err != nil {
		return Table{}, err
	}
	defer func() { err = errors.Join(err, tx.Rollback()) }()
	name, err := readonly.SchemaName(ctx, tx, d)
	if err != nil {
		return Table{}, fmt.Errorf("read the current schema: %w", err)
	}
	drv, err := Open(d, tx)
	if err != nil {
		return Table{}, fmt.Errorf("open the inspector: %w", err)
	}
	s, err := drv.InspectSchema(ctx, name, &schema.InspectOptions{Tables: []string{table}})
	if err != nil && !schema.IsNotExistError(err) {
		return Table{}, fmt.Errorf("inspect %s: %w", table, err)
	}
	if s != nil {
		t.T, _ = s.Table(table)
	}
	if t.T == nil || d != dialect.Postgres {
		return t, nil
	}
	names, err := readonly.Strings(ctx, tx, `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = (SELECT r.oid FROM pg_class r JOIN pg_namespace n ON n.oid = r.relnamespace WHERE n.nspname = $1 AND r.relname = $2)
   AND NOT i.indisvalid`, name, table)
	if err != nil {
		return Table{}, fmt.Errorf("read the invalid indexes of %s: %w", table, err)
	}
	t.Invalid = map[string]bool{}
	for _, n := range names {
		t.Invalid[n] = true
	}
	return t, nil
}
