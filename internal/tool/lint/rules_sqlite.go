package lint

import (
	"os"

	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlite"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/tool/dsn"
)

// sqliteRules: SQLite takes no lock but the database's write lock, so a
// change's cost is the plan's (a rebuild copies the rows), not a hazard of
// its own.
var sqliteRules = dialectRules{
	differ:      sqlite.DefaultDiff,
	lockHazards: func(dialect.Dialect, ops.TableChanges, schema.Change, []ops.Phase, func(Hazard)) {},
	// The file must exist: opening it read-only never creates it.
	readOnly: func(t dsn.Target) (dsn.Target, error) {
		if _, err := os.Stat(t.Path); err != nil {
			return t, err
		}
		return t.ReadOnly(), nil
	},
}
