package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/schemastate/schemastate/internal/tool/parity"
)

// Exit codes of parity: 0 identical, 1 different, 2 error.
const exitDifferent = 1

const parityUsage = `[--db POSTGRES_URL] [--schema FILE] [--json]
       schemastate parity --against DSN [--db POSTGRES_URL] [--schema FILE] [--json]

Builds a fresh store, a pre-amendment store and a store amended by the host's own
DDL, reconciles each, and compares every owned table of the other two with the
fresh one: columns (name, type, nullability, default), primary key, indexes (name,
uniqueness, columns, order; a SQLite autoindex by uniqueness, columns and order),
unique, foreign-key and check constraints. Without --db the stores are temporary SQLite
files; with --db they are temporary schemas on that PostgreSQL server, dropped
afterwards.

--against compares a live database's owned tables with a fresh store instead, and
only reads the live database. On PostgreSQL the fresh store is a temporary schema
on the --db server (default: the live database's own server).
`

func runParity(ctx context.Context, e *env, args []string) int {
	fs, server, asJSON := checkFlags(e, "parity", parityUsage,
		"PostgreSQL server to build the stores on (default: none, SQLite temporary files)", "print the report as one JSON object")
	against := fs.String("against", "", "live database to compare with a fresh reconcile (read-only)")
	schemaFile := fs.String("schema", "", "declared shape to use instead of the built-in schema.hcl")
	if code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	switch err := parseServer(*server); {
	case errors.Is(err, errNotServer):
		return usagef(e, "parity", "--db names a PostgreSQL server; SQLite stores are always temporary files (leave --db out)")
	case err != nil:
		return usagef(e, "parity", "%v", err)
	}
	cfg := parity.Config{Server: *server, SchemaFile: *schemaFile, Logger: e.logger}
	var (
		rep *parity.Report
		err error
	)
	if *against != "" {
		db, t, ok := open(ctx, e, *against, readOnly)
		if !ok {
			return exitUsage
		}
		defer db.Close()
		if !t.OnServer() && *server != "" {
			return usagef(e, "parity", "%s is SQLite: its fresh store is a temporary file, --db does not apply", t.Display)
		}
		if cfg.Server == "" && t.OnServer() {
			cfg.Server = *against
		}
		rep, err = parity.Against(ctx, db, cfg)
	} else {
		rep, err = parity.Run(ctx, cfg)
	}
	if err != nil {
		return fail(e, "parity", err)
	}
	output(e, *asJSON, rep, printParity)
	if !rep.Identical {
		return exitDifferent
	}
	return exitOK
}

func printParity(e *env, r *parity.Report) {
	names := make([]string, 0, len(r.Reference.Tables))
	for n := range r.Reference.Tables {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(e.stdout, "%s: reference %s (tables %s)\n", r.Dialect, parity.Reference, strings.Join(names, ", "))
	for _, c := range r.Comparisons {
		if c.Identical {
			fmt.Fprintf(e.stdout, "%-14s identical to %s\n", c.Store, c.Against)
			continue
		}
		fmt.Fprintf(e.stdout, "%-14s DIFFERENT from %s: %d difference(s)\n", c.Store, c.Against, len(c.Differences))
		for _, d := range c.Differences {
			fmt.Fprintf(e.stdout, "  %s %s %s\n    %-14s %s\n    %-14s %s\n", d.Table, d.Kind, d.Name, c.Against+":", d.Want, c.Store+":", d.Got)
		}
	}
}
