package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/schemastate/schemastate/internal/tool/basestate"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
	"github.com/schemastate/schemastate/reconcile"
)

// runDemo prepares a store for a first look and runs the boot sequence on it.
// It only ever creates host tables on a database that has none of them.
func runDemo(ctx context.Context, e *env, args []string) int {
	fs, dbArg, asJSON := storeFlags(e, "demo", "[--db DSN] [--state legacy|fresh] [--json]", "print the reconcile report as one JSON object")
	state := fs.String("state", "legacy", "what to seed when the store has no host tables: legacy (pre-amendment table, rows and keys) or fresh")
	if code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	seed, known := basestate.ByFlag(*state)
	if !known || seed != basestate.PreAmendment && seed != basestate.Fresh {
		fmt.Fprintf(e.stderr, "schemastate: demo: --state must be legacy or fresh, not %q\n", *state)
		return exitUsage
	}
	return withDB(ctx, e, *dbArg, create, func(db *sql.DB, target dsn.Target) int {
		obs, err := reconcile.Observe(ctx, db)
		if err != nil {
			return fail(e, "demo", err)
		}
		say := func(format string, a ...any) {
			if !*asJSON {
				fmt.Fprintf(e.stdout, format+"\n", a...)
			}
		}
		if len(obs.MissingHostTables) == len(obs.HostTables) {
			err := seed.Seed(ctx, db, target.Dialect)
			if err == nil {
				// testdata/frames/ ingests into every demo store.
				var sessions string
				if sessions, err = fixtures.DemoSessionsFixture(); err == nil {
					err = fixtures.ApplyScript(ctx, db, sessions)
				}
			}
			if err != nil {
				return fail(e, "demo", err)
			}
			say("seeded %s with the host fixture (state: %s)", target.Display, *state)
		} else if len(obs.MissingHostTables) > 0 {
			fmt.Fprintf(e.stderr, "schemastate: demo: %s has some host tables but not %v; refusing to seed a partial host\n", target.Display, obs.MissingHostTables)
			return exitUsage
		} else {
			say("%s already has host tables; reconciling it as it is", target.Display)
		}
		say("")
		return runReconcile(ctx, e, append([]string{"--db", *dbArg}, jsonArg(*asJSON)...))
	})
}

func jsonArg(on bool) []string {
	if on {
		return []string{"--json"}
	}
	return nil
}
