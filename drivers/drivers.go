// Package drivers registers the two database/sql drivers schemastate speaks
// to: "sqlite" (modernc.org/sqlite, no cgo) and "pgx" (pgx's stdlib). Import
// it for that side effect where databases are opened by driver name, as the
// CLI does:
//
//	import _ "github.com/schemastate/schemastate/drivers"
//
// No other package of the module registers a driver: a host passes its own
// *sql.DB, opened with the drivers it already imports.
package drivers

import (
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"
)
