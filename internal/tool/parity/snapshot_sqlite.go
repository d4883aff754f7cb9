package parity

import (
	"database/sql"
	"strings"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlite"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/catalog"
)

var sqliteInspector = inspector{
	// parity --against reads a live store: its names are data, so the
	// inspector reads through the one-statement guard.
	open: func(db *sql.DB) (migrate.Driver, error) { return catalog.Open(dialect.SQLite, db) },
	formatType: func(t schema.Type) (string, error) {
		s, err := sqlite.FormatType(t)
		return strings.ToLower(s), err
	},
	// An inline UNIQUE's index is named by SQLite.
	indexName: func(name string) string {
		if strings.HasPrefix(name, "sqlite_autoindex_") {
			return ""
		}
		return name
	},
	// An unnamed SQLite constraint: Atlas numbers it by its position.
	foreignKeyName: func(name string) string {
		if strings.Trim(name, "0123456789") == "" {
			return ""
		}
		return name
	},
}
