package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"

	"github.com/schemastate/schemastate/dialect"
)

// dbFlag registers --db.
func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", dialect.DefaultDSN, "database: sqlite:PATH, a plain path, or postgres://…")
}

// openDB parses and opens --db, printing a clear error (credentials removed)
// when it cannot.
func openDB(ctx context.Context, e *env, dsn string) (*sql.DB, dialect.Target, bool) {
	t, err := dialect.Parse(dsn)
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: %v\n", err)
		return nil, t, false
	}
	db, err := t.Open(ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: %v\n", err)
		return nil, t, false
	}
	return db, t, true
}
