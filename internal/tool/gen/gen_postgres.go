package gen

import (
	"context"
	"database/sql"
)

// postgresStore: nothing to tune, statistics gathered afterwards, the size
// every table of the current schema with its indexes and TOAST.
var postgresStore = storeSQL{
	tune:   func(context.Context, *sql.Conn) (func(), error) { return func() {}, nil },
	finish: "ANALYZE",
	bytes: `SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r'`,
}
