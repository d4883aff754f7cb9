package reconcile

import "github.com/schemastate/schemastate/internal/catalog"

// The SQLite inspector's guard against names that are not one statement
// lives in internal/catalog, shared with the writer's start check.
var (
	singleSQLiteStatement = catalog.SingleSQLiteStatement
	sqliteStatements      = catalog.SQLiteStatements
)
