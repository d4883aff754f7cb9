// Package postgres is PostgreSQL's reconcile driver (core.Driver): its
// catalog reads (driver.go) and its planning (plan.go: one transaction, or
// the online phases by size: online.go, recipes.go, indexes.go, the
// shadow-table rebuild of package rebuild). Its session and the runners of
// the phases it runs outside a transaction are package pgsession. It meets
// the step sequence only through reconcile/internal/core.
package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"ariga.io/atlas/sql/migrate"
	atlaspg "ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/endstate"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsession"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/rebuild"
)

// Driver is PostgreSQL's.
type Driver struct{}

func (Driver) Dialect() dialect.Dialect { return dialect.Postgres }

func (Driver) LockMechanism() string { return pgsession.LockAdvisoryXact }

func (Driver) Open(ctx context.Context, db *sql.DB, o *core.Config) (core.Session, error) {
	return pgsession.Open(ctx, db, o)
}

func (Driver) SchemaName(ctx context.Context, q core.Querier) (string, error) {
	var s string
	err := q.QueryRowContext(ctx, "SELECT current_schema()").Scan(&s)
	return s, err
}

func (Driver) Atlas(q core.Querier) (migrate.Driver, error) { return atlaspg.Open(q) }

// dropSQL: an index that backs a UNIQUE constraint, a foreign key and a
// check are dropped as constraints of the table, any other index by its
// schema-qualified name.
func (Driver) DropSQL(schemaName, table string, c schema.Change) (string, error) {
	var name string
	switch c := c.(type) {
	case *schema.DropIndex:
		if !isUniqueConstraint(c.I) {
			return "DROP INDEX " + pgsql.Qualified(schemaName, c.I.Name), nil
		}
		name = c.I.Name
	case *schema.DropForeignKey:
		name = c.F.Symbol
	case *schema.DropCheck:
		name = c.C.Name
	default:
		return "", fmt.Errorf("no drop of a %T", c)
	}
	return "ALTER TABLE " + pgsql.Qualified(schemaName, table) + " DROP CONSTRAINT " + dialect.QuoteIdent(name), nil
}

func (Driver) TablesQuery(n int) string {
	return `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name IN (` + core.Placeholders(dialect.Postgres, 1, n) + `)`
}

// The certificate's catalog read keys on oids, not names: the scope
// (CatalogScope) holds the oids, as the full check that wrote the
// certificate read them, of the owned tables, of the covered ones (host
// tables, parents), of the owned tables' indexes and of their constraints.
// The read (CatalogRead) is one row of seven arrays, each an uncorrelated
// subquery that one index of one catalog answers: the pg_class rows of the
// tables and indexes by oid (names, schema, kind, access method, options),
// the owned tables' columns, indexes, constraints and triggers by their
// table's oid, and the comments of the tables, their columns, indexes and
// constraints by oid. Planning is most of what this read costs the server,
// and a subquery on one catalog by oid is the cheapest to plan: by name it
// took an outer scan and a join or a correlated subquery per catalog, by
// table a UNION branch per host table (docs/benchmarks.md).
//
// Every change the full check acts on changes a row read here: a table or
// index renamed, moved or dropped changes or loses its pg_class row; an
// object added to a table adds a row to its catalog, found by the table's
// oid; a comment is a pg_description row of an oid the scope holds; a
// column's default, which lives in pg_attrdef, is set, changed and dropped
// only by updating the column's pg_attribute row, so a default change gives
// that row a new xmin (read here in place of pg_attrdef). Definitions are
// read in their stored form (a column's type oid and modifier, an index's
// whole pg_index row, a primary or unique key's constraint row beside its
// index), which changes whenever their rendering does; a foreign key, check
// or exclusion is deparsed as well (it names its parent as it is called
// now, and its expression as the full check compares it), and so is a
// trigger. The rows are hashed by the server (sha256 of the text in the
// database's own encoding, so no character can fail a conversion).
func (Driver) CatalogRead(owned, covered []string, scope string) (string, []any, bool) {
	parts := strings.Split(scope, ";")
	if len(parts) != 4 {
		return "", nil, false
	}
	for _, p := range parts {
		if !oidArray(p) {
			return "", nil, false
		}
	}
	return catalogRead, []any{parts[0], parts[1], parts[2], parts[3]}, true
}

// oidArray reports whether s is an array literal of oids as CatalogScope
// writes one: {} or {n,n,…}, each n a decimal oid.
func oidArray(s string) bool {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return false
	}
	inner := s[1 : len(s)-1]
	if inner == "" {
		return true
	}
	for _, n := range strings.Split(inner, ",") {
		if v, err := strconv.ParseUint(n, 10, 32); err != nil || strconv.FormatUint(v, 10) != n {
			return false
		}
	}
	return true
}

// catalogRead is CatalogRead's query: $1 the owned tables' oids, $2 the
// covered tables', $3 the owned tables' indexes', $4 their constraints'.
const catalogRead = `SELECT sha256(convert_to(
  ARRAY(SELECT c.oid::text || ':' || c.relname || ':' || c.relnamespace::text || ':' || c.relkind::text || ':' || c.relpersistence::text || ':' || c.relam::text || ':' || c.reltablespace::text || ':' || COALESCE(c.reloptions::text, '')
    FROM pg_class c WHERE c.oid = ANY ($1::oid[] || $2::oid[] || $3::oid[]) ORDER BY c.oid)::text
  || E'\n' || ARRAY(SELECT a.attrelid::text || ':' || a.attnum::text || ':' || a.attname || ':' || a.atttypid::text || ',' || a.atttypmod::text || ':' || a.attcollation::text || ':' || a.attnotnull::text || ':' || a.atthasdef::text || ':' || a.attidentity::text || ':' || a.attgenerated::text || ':' || a.xmin::text
    FROM pg_attribute a WHERE a.attrelid = ANY ($1::oid[]) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attrelid, a.attnum)::text
  || E'\n' || ARRAY(SELECT i::text FROM pg_index i WHERE i.indrelid = ANY ($1::oid[]) ORDER BY i.indexrelid)::text
  || E'\n' || ARRAY(SELECT k::text || CASE WHEN k.contype IN ('p', 'u') THEN '' ELSE pg_get_constraintdef(k.oid) END
    FROM pg_constraint k WHERE k.conrelid = ANY ($1::oid[]) ORDER BY k.oid)::text
  || E'\n' || ARRAY(SELECT pg_get_triggerdef(t.oid) || ':' || t.tgenabled::text FROM pg_trigger t WHERE t.tgrelid = ANY ($1::oid[]) AND NOT t.tgisinternal ORDER BY t.oid)::text
  || E'\n' || ARRAY(SELECT d.objoid::text || ':' || d.classoid::text || ':' || d.objsubid::text || ':' || d.description FROM pg_description d
    WHERE d.objoid = ANY ($1::oid[] || $3::oid[] || $4::oid[]) ORDER BY d.objoid, d.classoid, d.objsubid)::text,
  getdatabaseencoding()))`

// CatalogScope reads the oids CatalogRead keys on, by the tables' names in
// the reconcile's schema; it fails when one of them is not there.
func (Driver) CatalogScope(ctx context.Context, q core.Querier, owned, covered []string) (string, error) {
	var t, c, x, k string
	var nt, nc int
	err := q.QueryRowContext(ctx, `WITH o AS (SELECT oid FROM pg_class WHERE relnamespace = to_regnamespace(quote_ident(current_schema())) AND relkind IN ('r', 'p') AND relname = ANY ($1::text[])),
 h AS (SELECT oid FROM pg_class WHERE relnamespace = to_regnamespace(quote_ident(current_schema())) AND relkind IN ('r', 'p') AND relname = ANY ($2::text[]))
SELECT ARRAY(SELECT oid FROM o ORDER BY 1)::text, (SELECT count(*) FROM o),
  ARRAY(SELECT oid FROM h ORDER BY 1)::text, (SELECT count(*) FROM h),
  ARRAY(SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT oid FROM o) ORDER BY 1)::text,
  ARRAY(SELECT oid FROM pg_constraint WHERE conrelid IN (SELECT oid FROM o) ORDER BY 1)::text`,
		owned, covered).Scan(&t, &nt, &c, &nc, &x, &k)
	switch {
	case err != nil:
		return "", fmt.Errorf("read the catalog's scope: %w", err)
	case nt != len(owned) || nc != len(covered):
		return "", fmt.Errorf("read the catalog's scope: %d of %d owned and %d of %d covered tables found in the schema", nt, len(owned), nc, len(covered))
	}
	return strings.Join([]string{t, c, x, k}, ";"), nil
}

// Facts reads the table's facts (readFacts); PlanTable takes them back.
func (d Driver) Facts(ctx context.Context, q core.Querier, schemaName string, live, want *schema.Table) (core.Facts, error) {
	return d.readFacts(ctx, q, schemaName, live, want)
}

// readFacts reads the table's DEFERRABLE unique constraints, its INVALID
// indexes (an online build that crashed or failed) and its size, which
// chooses the path.
func (Driver) readFacts(ctx context.Context, q core.Querier, schemaName string, live, want *schema.Table) (tableFacts, error) {
	var f tableFacts
	var err error
	if f.deferrable, err = deferrableUniques(ctx, q, live.Name); err != nil {
		return f, err
	}
	if f.invalid, err = core.QueryStrings(ctx, q, `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = to_regclass($1) AND NOT i.indisvalid ORDER BY 1`, pgsql.Qualified(schemaName, live.Name)); err != nil {
		return f, fmt.Errorf("read invalid indexes of %s: %w", live.Name, err)
	}
	if f.size, err = readTableSize(ctx, q, schemaName, live.Name); err != nil {
		return f, fmt.Errorf("read the size of %s: %w", live.Name, err)
	}
	if f.rebuild, err = rebuild.ReadFacts(ctx, q, schemaName, live.Name); err != nil {
		return f, err
	}
	names := make([]string, len(want.Columns))
	for i, c := range want.Columns {
		names[i] = c.Name
	}
	if f.rebuild.Quoted, err = rebuild.ReadQuoted(ctx, q, names); err != nil {
		return f, fmt.Errorf("quote the column names of %s: %w", live.Name, err)
	}
	if f.notValid, err = notValidConstraints(ctx, q, schemaName, live.Name); err != nil {
		return f, err
	}
	if f.sameDefault, err = equivalentDefaults(ctx, q, live, want); err != nil {
		return f, err
	}
	if f.checks, err = readCheckFacts(ctx, q, schemaName, live, want); err != nil {
		return f, err
	}
	if f.deferrableFKs, err = deferrableForeignKeys(ctx, q, schemaName, live.Name); err != nil {
		return f, err
	}
	if f.collations, err = core.ReadCollations(ctx, q, collationsQuery, live.Name); err != nil {
		return f, err
	}
	if f.rebuild.NewExists {
		if f.newTable, err = readRebuildTable(ctx, q, schemaName, live.Name); err != nil {
			return f, err
		}
	}
	return f, nil
}

// observable is live without what no statement can use (endstate.Usable):
// its INVALID indexes, NOT VALID constraints and DEFERRABLE uniques; and
// with its index parts of another collation than their column's marked
// (collations), so that such an index is not taken for a declared one.
func (Driver) Observable(ctx context.Context, q core.Querier, live *schema.Table) (*schema.Table, error) {
	if live == nil {
		return nil, nil
	}
	names, err := unusable(ctx, q, live.Name)
	if err != nil {
		return nil, err
	}
	live, err = core.MarkCollations(ctx, q, collationsQuery, live)
	return endstate.Usable(live, names), err
}

func (Driver) Explain(err error) error { return pgsql.WithDetail(err) }
