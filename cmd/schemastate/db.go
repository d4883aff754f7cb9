package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/schemastate/schemastate/dialect"
)

// dbFlag registers --db.
func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", dialect.DefaultDSN, "database: sqlite:PATH, a plain path, or postgres://…")
}

// openDB parses and opens --db, printing a clear error (credentials removed)
// when it cannot. A SQLite file that does not exist is an error here: a typo
// in a path must not silently create an empty database.
func openDB(ctx context.Context, e *env, dsn string) (*sql.DB, dialect.Target, bool) {
	return open(ctx, e, dsn, false)
}

// openOrCreateDB is openDB for the commands whose job is to write a new store
// (demo, generate, bench): a missing SQLite file is created.
func openOrCreateDB(ctx context.Context, e *env, dsn string) (*sql.DB, dialect.Target, bool) {
	return open(ctx, e, dsn, true)
}

func open(ctx context.Context, e *env, dsn string, create bool) (*sql.DB, dialect.Target, bool) {
	t, err := dialect.Parse(dsn)
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: %v\n", err)
		return nil, t, false
	}
	if t.Dialect == dialect.SQLite && !create {
		path := strings.TrimPrefix(t.Display, "sqlite:")
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(e.stderr, "schemastate: %s: no such database file (point --db at the host's database, or run `schemastate demo --db %s` to create one)\n", t.Display, t.Display)
			return nil, t, false
		}
	}
	db, err := t.Open(ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: %v\n", err)
		return nil, t, false
	}
	return db, t, true
}
