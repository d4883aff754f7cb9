package parity

import (
	"context"
	"database/sql"
	"fmt"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/postgres"
)

var postgresInspector = inspector{
	schemaName: func(ctx context.Context, db *sql.DB) (string, error) {
		var name string
		if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&name); err != nil {
			return "", fmt.Errorf("read the current schema: %w", err)
		}
		return name, nil
	},
	open:              func(db *sql.DB) (migrate.Driver, error) { return postgres.Open(db) },
	formatType:        postgres.FormatType,
	indexName:         func(name string) string { return name },
	foreignKeyName:    func(name string) string { return name },
	referenceOnServer: true,
}
