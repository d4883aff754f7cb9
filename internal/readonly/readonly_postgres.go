package readonly

import (
	"context"
	"database/sql"

	"github.com/schemastate/schemastate/dialect"
)

var postgresForms = forms{
	isolation: sql.LevelRepeatableRead,
	table:     `SELECT to_regclass($1) IS NOT NULL`,
	column:    `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND attnum > 0 AND NOT attisdropped)`,
	schemaName: func(ctx context.Context, q dialect.Querier) (string, error) {
		var name string
		err := q.QueryRowContext(ctx, "SELECT current_schema()").Scan(&name)
		return name, err
	},
}
