package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/schemastate/schemastate/internal/tool/dsn"
)

// dbFlag registers --db.
func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", dsn.DefaultDSN, "database: sqlite:PATH, a plain path, or postgres://…")
}

// storeFlags is flags(e, name, usageLine) with the two flags a command on
// one store takes: --db (dbFlag) and --json, described by jsonHelp.
func storeFlags(e *env, name, usageLine, jsonHelp string) (*flag.FlagSet, *string, *bool) {
	fs := flags(e, name, usageLine)
	return fs, dbFlag(fs), fs.Bool("json", false, jsonHelp)
}

// checkFlags is storeFlags for a CI check (parity, compat, lint): its --db,
// described by dbHelp, has no default, as it names the PostgreSQL server the
// check builds temporary stores on (none: SQLite stores only).
func checkFlags(e *env, name, usageLine, dbHelp, jsonHelp string) (*flag.FlagSet, *string, *bool) {
	fs := flags(e, name, usageLine)
	return fs, fs.String("db", "", dbHelp), fs.Bool("json", false, jsonHelp)
}

// errNotServer is a CI check's --db that names a SQLite file, not a
// PostgreSQL server.
var errNotServer = errors.New("not a PostgreSQL server")

// parseServer checks a CI check's --db: empty, or a PostgreSQL server.
func parseServer(arg string) error {
	if arg == "" {
		return nil
	}
	t, err := dsn.Parse(arg)
	if err != nil {
		return err
	}
	if !t.OnServer() {
		return errNotServer
	}
	return nil
}

// How a command opens --db.
type openMode int

const (
	// readWrite: an existing database the command writes (reconcile,
	// ingest, transcript recover and record). A missing SQLite file is an
	// error; its journal mode is left as the host set it.
	readWrite openMode = iota
	// readOnly: an existing database the command only reads (status,
	// health, plan, transcript ls, parity --against). SQLite is opened mode=ro: nothing is
	// created or written, and a read-only file or directory works.
	readOnly
	// create: a store the command makes (demo, generate, bench): a missing
	// SQLite file is created, in WAL.
	create
)

// withDB opens dbArg as mode says (open), runs f on it and closes it. Its
// exit code is f's, or exitUsage when the database cannot be opened.
func withDB(ctx context.Context, e *env, dbArg string, mode openMode, f func(*sql.DB, dsn.Target) int) int {
	db, t, ok := open(ctx, e, dbArg, mode)
	if !ok {
		return exitUsage
	}
	defer db.Close()
	return f(db, t)
}

// runOnDB is withDB for a command that takes flags only: it parses args
// first (parseFlags), and opens the database *dbArg names once they parsed.
func runOnDB(ctx context.Context, e *env, fs *flag.FlagSet, args []string, dbArg *string, mode openMode, f func(*sql.DB, dsn.Target) int) int {
	if code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	return withDB(ctx, e, *dbArg, mode, f)
}

// open parses and opens dbArg as mode says, printing a clear error
// (credentials removed) when it cannot. A SQLite file that does not exist is
// an error unless mode is create: a typo in a path must not silently create
// an empty database.
func open(ctx context.Context, e *env, dbArg string, mode openMode) (*sql.DB, dsn.Target, bool) {
	t, err := dsn.Parse(dbArg)
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: %v\n", err)
		return nil, t, false
	}
	if !t.OnServer() && mode != create {
		if _, err := os.Stat(t.Path); errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(e.stderr, "schemastate: %s: no such database file (point --db at the host's database, or run `schemastate demo --db %s` to create one)\n", t.Display, t.Display)
			return nil, t, false
		}
	}
	t = t.WithBusyTimeout(e.sqliteBusy)
	switch mode {
	case readOnly:
		t = t.ReadOnly()
	case create:
		t = t.NewStore()
	}
	db, err := t.Open(ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "schemastate: %v\n", err)
		return nil, t, false
	}
	return db, t, true
}
