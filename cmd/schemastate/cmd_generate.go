package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/gen"
)

// Exit codes of generate.
const (
	exitGenerateFailed = 1 // the store could not be written (partial rows may remain)
	exitNotEmpty       = 3 // the database already holds a store; nothing was written
)

func runGenerate(ctx context.Context, e *env, args []string) int {
	fs, dbArg, asJSON := storeFlags(e, "generate", "[--db DSN] [--scale-mb MIB] [--population K] [--state predating|legacy|amended] [--seed N] [--json]",
		"print the summary as one JSON object and no progress")
	scale := fs.Float64("scale-mb", gen.ReferenceMB, "approximate store size in MiB; the subagent population scales with it")
	population := fs.Float64("population", 0, "multiply the reference subagent population by this instead (0: scale-mb/328)")
	state := fs.String("state", gen.Predating.Flag, "installed-base state: predating, legacy or amended")
	seed := fs.Uint64("seed", 1, "seed; the same seed writes the same rows")
	if code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	if *scale <= 0 || *population < 0 {
		fmt.Fprintln(e.stderr, "schemastate generate: --scale-mb must be positive and --population not negative")
		return exitUsage
	}
	st, known := gen.Lookup(*state)
	if !known {
		// Checked before --db is opened: a usage error creates no file.
		fmt.Fprintf(e.stderr, "schemastate generate: --state %q: want predating, legacy or amended\n", *state)
		return exitUsage
	}
	return withDB(ctx, e, *dbArg, create, func(db *sql.DB, _ dsn.Target) int {
		cfg := gen.Config{ScaleMB: *scale, Population: *population, State: st, Seed: *seed, Logger: e.logger}
		if !*asJSON {
			cfg.Progress = generateProgress(e)
		}
		sum, err := gen.Generate(ctx, db, cfg)
		switch {
		case errors.Is(err, gen.ErrNotEmpty):
			fmt.Fprintf(e.stderr, "schemastate: %v (generate writes only into an empty store)\n", err)
			return exitNotEmpty
		case err != nil:
			fail(e, "generate", err)
			return exitGenerateFailed
		}
		if *asJSON {
			writeJSON(e.stdout, sum)
			return exitOK
		}
		p := sum.Population
		fmt.Fprintf(e.stdout, "%s store, state %s, seed %d: %.1f MiB on disk (%d sessions, %d turns, %d messages) in %s\n",
			sum.Dialect, sum.State, sum.Seed, float64(sum.StoreBytes)/(1<<20), sum.Sessions, sum.Turns, sum.Messages, sum.Duration.Round(time.Millisecond))
		fmt.Fprintf(e.stdout, "subagents: %d invocations in %d turns across %d sessions; status %v; fan-out %v; nested %d; missing type %d\n",
			p.Invocations(), p.Turns(), p.Sessions, p.Status, p.FanOut, p.Nested, p.MissingType)
		if st != gen.Predating {
			fmt.Fprintf(e.stdout, "rows: %d live, %d backfill; activated at %s\n", sum.LiveRows, sum.BackfillRows, sum.ActivatedAt)
		}
		printKeys(e, sum.Keys, true)
		return exitOK
	})
}

// generateProgress reports on a terminal only; piped stderr stays quiet.
func generateProgress(e *env) func(gen.Progress) {
	if !terminal(e.stderr) {
		return nil
	}
	f := e.stderr
	return func(p gen.Progress) {
		fmt.Fprintf(f, "\r\033[Kgenerate: %d/%d messages, %.0f/%.0f MiB (%s)", p.Messages, p.PlannedMessage,
			float64(p.Bytes)/(1<<20), float64(p.TargetBytes)/(1<<20), p.Elapsed.Round(100*time.Millisecond))
	}
}
