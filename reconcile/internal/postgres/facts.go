package postgres

import (
	"context"
	"fmt"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/rebuild"
)

// tableFacts are the live catalog facts planning needs beyond Atlas's
// inspection of the table, read by driver.facts so that planning itself
// reads nothing.
type tableFacts struct {
	// deferrable names the table's DEFERRABLE unique constraints:
	// no ON CONFLICT arbiter, so never the declared key.
	deferrable map[string]bool
	// invalid names the table's INVALID indexes: a build that
	// crashed or failed.
	invalid []string
	// size is the live table's size, which chooses the path.
	size tableSize
	// rebuild is what the shadow-table rebuild needs to know.
	rebuild *rebuild.Facts
	// notValid names the table's NOT VALID checks and foreign keys
	//: a recipe stopped before its validation.
	notValid map[string]bool
	// sameDefault names the columns whose live default is the declared one
	// as the server prints it back, though the text differs (PostgreSQL:
	// gen_random_uuid()::text reads back as (gen_random_uuid())::text).
	sameDefault map[string]bool
	// checks are the live and declared checks as the server normalizes
	// them: what the diff and the recipes' done-checks compare.
	checks *checkFacts
	// deferrableFKs names the table's DEFERRABLE foreign keys,
	// which Atlas does not tell from the declared ones.
	deferrableFKs map[string]bool
	// collations names the index parts whose collation is not their
	// column's, which Atlas does not read.
	collations core.Collations
	// newTable is a shadow-table rebuild's new table, when one exists
	//.
	newTable *shadowTable
}

// tableSize is what the path is chosen from.
type tableSize struct {
	bytes   int64
	rows    int64 // the planner's estimate (pg_class.reltuples); -1 when never analysed
	version int   // server_version_num
}

func (s tableSize) String() string {
	if s.rows < 0 {
		return fmt.Sprintf("%s, rows not yet estimated", byteSize(s.bytes))
	}
	return fmt.Sprintf("%s, ~%d rows", byteSize(s.bytes), s.rows)
}

func readTableSize(ctx context.Context, q dialect.Querier, schemaName, table string) (tableSize, error) {
	var s tableSize
	var rows float64
	err := q.QueryRowContext(ctx, `SELECT pg_table_size(c.oid), c.reltuples, current_setting('server_version_num')::int
 FROM pg_class c WHERE c.oid = to_regclass($1)`, pgsql.Qualified(schemaName, table)).Scan(&s.bytes, &rows, &s.version)
	s.rows = int64(rows)
	return s, err
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d kB", n>>10)
}
