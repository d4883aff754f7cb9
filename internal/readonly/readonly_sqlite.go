package readonly

import (
	"context"
	"database/sql"

	"github.com/schemastate/schemastate/dialect"
)

var sqliteForms = forms{
	isolation: sql.LevelDefault,
	table:     `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)`,
	column:    `SELECT EXISTS (SELECT 1 FROM pragma_table_info(?) WHERE name = ?)`,
	// The main database: schemastate never attaches another.
	schemaName: func(context.Context, dialect.Querier) (string, error) { return "main", nil },
}
