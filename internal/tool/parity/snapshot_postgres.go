package parity

import (
	"database/sql"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/postgres"
)

var postgresInspector = inspector{
	open:              func(db *sql.DB) (migrate.Driver, error) { return postgres.Open(db) },
	formatType:        postgres.FormatType,
	indexName:         func(name string) string { return name },
	foreignKeyName:    func(name string) string { return name },
	referenceOnServer: true,
}
