package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/fanout"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// Exit codes of reconcile and plan.
const (
	exitStepFailed     = 3 // reconcile: a step failed; the database is consistent
	exitChangesPending = 1 // plan: the shape step would change something
)

func runReconcile(ctx context.Context, e *env, args []string) int {
	fs := flags(e, "reconcile", "[--db DSN] [--schema FILE] [--prune] [--allow-writer-break] [--lock-wait D] [--json]")
	sf := addShapeFlags(fs, "print the report as one JSON object")
	prune := pruneFlag(fs)
	allowBreak := fs.Bool("allow-writer-break", false, "apply a declaration this release's writer cannot write every frame to (refused otherwise: the shape step fails, naming each break)")
	lockWait := durationFlag(fs, "lock-wait", 60*time.Second, "how long to wait for another replica's lock")
	return runOnDB(ctx, e, fs, args, sf.dsn, readWrite, func(db *sql.DB, target dsn.Target) int {
		if !sf.check(e, target.Dialect) {
			return exitUsage
		}
		opts := append(sf.options(), reconcile.WithLogger(e.logger), reconcile.WithLockWait(*lockWait))
		if *prune {
			opts = append(opts, reconcile.WithPrune())
		}
		if *allowBreak {
			opts = append(opts, reconcile.WithAllowWriterBreak())
		}
		asJSON := sf.asJSON
		if !*asJSON {
			if p := progressPrinter(e); p != nil {
				opts = append(opts, reconcile.WithProgress(p))
			}
		}
		rep, err := reconcile.Reconcile(testHooks(ctx), db, opts...)
		if rep.Dialect == "" {
			return usageError(e, err)
		}
		output(e, *asJSON, rep, printReport)
		if err != nil {
			return exitStepFailed
		}
		return exitOK
	})
}

func pruneFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("prune", false, "drop indexes, foreign keys and checks on owned tables that schema.hcl does not declare (kept otherwise)")
}

// shapeFlags are the flags of every command that reads the declared shape.
type shapeFlags struct {
	dsn, schemaFile *string
	asJSON          *bool
}

func addShapeFlags(fs *flag.FlagSet, jsonHelp string) shapeFlags {
	return shapeFlags{
		dsn:        dbFlag(fs),
		schemaFile: fs.String("schema", "", "declared shape to use instead of the built-in schema.hcl"),
		asJSON:     fs.Bool("json", false, jsonHelp),
	}
}

// check evaluates --schema before anything runs: an unreadable or invalid
// declaration is a usage error, not a failed boot step.
func (f shapeFlags) check(e *env, d dialect.Dialect) bool {
	if *f.schemaFile == "" {
		return true
	}
	if _, err := declare.Load(*f.schemaFile, d, "main"); err != nil {
		fmt.Fprintf(e.stderr, "schemastate: --schema: %v\n", err)
		return false
	}
	return true
}

func (f shapeFlags) options() []reconcile.Option {
	if *f.schemaFile == "" {
		return nil
	}
	return []reconcile.Option{reconcile.WithSchemaFile(*f.schemaFile)}
}

func printReport(e *env, rep *reconcile.Report) {
	fmt.Fprintf(e.stdout, "boot lock: %s\n", rep.Lock)
	for _, s := range rep.Steps {
		fmt.Fprintf(e.stdout, "%-16s %-9s %3d stmt  %s\n", s.Name, s.Status, s.Statements, s.Detail)
	}
	printEndState(e, rep.EndState, rep.EndStateObserved)
	printKeys(e, rep.Keys, rep.KeysRead)
	printDrift(e, rep.Drift)
}

// printDrift lists what the owned tables carry undeclared.
func printDrift(e *env, drift []reconcile.Drift) {
	for _, d := range drift {
		fmt.Fprintf(e.stdout, "undeclared (kept unless --prune): %s\n", d)
	}
}

func printEndState(e *env, es reconcile.EndState, observed bool) {
	if !observed {
		fmt.Fprintln(e.stdout, "end state: not observed (the steps that read it did not run)")
		return
	}
	fmt.Fprintf(e.stdout, "end state: execution column NOT NULL=%v, three-column UNIQUE=%v, two-column UNIQUE absent=%v, indexes match declaration=%v\n",
		es.ExecutionColumnNotNull, es.ThreeColumnUnique, es.TwoColumnUniqueAbsent, es.IndexesMatchDeclaration)
}

func printKeys(e *env, k keys.Set, read bool) {
	if !read {
		fmt.Fprintln(e.stdout, "keys: not read")
		return
	}
	show := func(v *string) string {
		switch {
		case v == nil:
			return "(absent)"
		case *v == "":
			return `"" (nothing to backfill)`
		}
		return *v
	}
	fmt.Fprintf(e.stdout, "keys: capture_since=%s backfill_through=%s execution_since=%s (%s)\n",
		show(k.CaptureSince), show(k.BackfillThrough), show(k.ExecutionSince), k.State())
}

// progressPrinter reports long steps on a terminal, and stays quiet when
// stderr is not one.
func progressPrinter(e *env) func(reconcile.Progress) {
	if !terminal(e.stderr) {
		return nil
	}
	f := e.stderr
	return func(p reconcile.Progress) {
		fmt.Fprintf(f, "\r\033[K%s: %s (%s)", p.Step, p.Message, p.Elapsed.Round(100*time.Millisecond))
		if p.Done {
			fmt.Fprintln(f)
		}
	}
}

func runPlan(ctx context.Context, e *env, args []string) int {
	fs := flags(e, "plan", "[--db DSN] [--schema FILE] [--prune] [--json]")
	sf := addShapeFlags(fs, "print {\"statements\":[…],\"refused\":[…],\"writer_breaks\":[…],\"drift\":[…],\"phases\":[…],\"resumed\":[…]}")
	prune := pruneFlag(fs)
	return runOnDB(ctx, e, fs, args, sf.dsn, readOnly, func(db *sql.DB, _ dsn.Target) int {
		asJSON := sf.asJSON
		opts := sf.options()
		if *prune {
			opts = append(opts, reconcile.WithPrune())
		}
		plan, err := reconcile.Plan(ctx, db, opts...)
		if err != nil {
			return fail(e, "plan", err)
		}
		if missing := plan.MissingHostTables; len(missing) > 0 {
			// Printing the CREATE statements would suggest a reconcile runs
			// them; it refuses to start without the host's tables.
			fmt.Fprintf(e.stderr, "schemastate plan: host tables missing: %s — reconcile refuses to run without them, so it would change nothing (schemastate never creates host tables; point --db at the host's database)\n", strings.Join(missing, ", "))
			if *asJSON {
				writeJSON(e.stdout, map[string][]string{"statements": {}, "refused": {}, "missing_host_tables": missing})
			}
			return exitUsage
		}
		stmts, refused, drift := plan.Statements(), plan.Refused(), plan.Drift()
		phases, resumed := plan.Phases(), plan.Resumed()
		if *asJSON {
			if drift == nil {
				drift = []reconcile.Drift{}
			}
			if phases == nil {
				phases = []ops.Phase{}
			}
			writeJSON(e.stdout, map[string]any{"statements": nonNil(stmts), "refused": nonNil(refused), "drift": drift,
				"phases": phases, "resumed": nonNil(resumed), "writer_breaks": nonNil(plan.WriterBreaks())})
		} else {
			if len(stmts) == 0 && len(refused) == 0 {
				fmt.Fprintln(e.stdout, "-- no change: the declared shape holds")
			}
			for _, r := range resumed {
				fmt.Fprintf(e.stdout, "-- online upgrade stopped between phases: %s\n", r)
			}
			for _, ph := range phases {
				tx := "no transaction"
				if ph.Transactional {
					tx = "one transaction"
				}
				fmt.Fprintf(e.stdout, "-- phase %s (step %s; %s; lock %s)\n", ph.ID(), ph.Step, tx, ph.Lock)
				if ph.Detail != "" {
					fmt.Fprintf(e.stdout, "--   %s\n", ph.Detail)
				}
				fmt.Fprintf(e.stdout, "--   runs as %s; the host waits on %s\n", ph.Kind, ph.HostWaits)
				if ph.Breaking != nil {
					fmt.Fprintf(e.stdout, "--   reads first: %s\n", ph.Breaking.Sample)
				}
				if ph.DoneWhen != "" {
					fmt.Fprintf(e.stdout, "--   skipped when: %s\n", firstLineOf(ph.DoneWhen))
				}
				for _, s := range ph.SQL {
					fmt.Fprintf(e.stdout, "%s;\n", s)
				}
			}
			for _, r := range refused {
				fmt.Fprintf(e.stdout, "-- REFUSED (destroys data, never applied at boot): %s\n", r)
			}
			if breaks := plan.WriterBreaks(); len(breaks) > 0 && len(stmts) > 0 {
				for _, b := range breaks {
					fmt.Fprintf(e.stdout, "-- WRITER BREAK (the shape step refuses to apply this plan; reconcile --allow-writer-break overrides): %s\n", b)
				}
			}
			verb := "kept; --prune drops it"
			if *prune {
				verb = "dropped by the statements above"
			}
			for _, d := range drift {
				fmt.Fprintf(e.stdout, "-- UNDECLARED (%s): %s\n", verb, d)
			}
		}
		if len(stmts) > 0 || len(refused) > 0 {
			return exitChangesPending
		}
		return exitOK
	})
}

func firstLineOf(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func runStatus(ctx context.Context, e *env, args []string) int {
	fs := flags(e, "status", "[--db DSN] [--schema FILE] [--json]")
	sf := addShapeFlags(fs, "print one JSON object")
	return runOnDB(ctx, e, fs, args, sf.dsn, readOnly, func(db *sql.DB, target dsn.Target) int {
		asJSON := sf.asJSON
		obs, err := reconcile.Observe(ctx, db, sf.options()...)
		if err != nil {
			return fail(e, "status", err)
		}
		writer := liveWriter(ctx, db, target)
		// The store-wide counts a consumer may publish, read as `subagents`
		// reads them (AC-25).
		counts, err := fanout.Count(ctx, db, fanout.Scope{})
		if err != nil {
			return fail(e, "status", err)
		}
		if *asJSON {
			writeJSON(e.stdout, struct {
				*reconcile.Observation
				Subagents  *fanout.Summary `json:"subagents"`
				LiveWriter writerStatus    `json:"live_writer"`
			}{obs, counts, writer})
			return exitOK
		}
		fmt.Fprintf(e.stdout, "dialect: %s (boot lock: %s)\n", obs.Dialect, obs.Lock)
		if len(obs.MissingHostTables) > 0 {
			fmt.Fprintf(e.stdout, "host tables missing: %s\n", strings.Join(obs.MissingHostTables, ", "))
		}
		printKeys(e, obs.Keys, obs.KeysRead)
		printEndState(e, obs.EndState, true)
		printDrift(e, obs.Drift)
		if writer.Starts {
			fmt.Fprintln(e.stdout, "live writer: starts (the table takes every frame it writes)")
		} else {
			fmt.Fprintf(e.stdout, "live writer: REFUSES TO START: %s\n", writer.Refused)
		}
		if u := obs.Upgrade; u != nil {
			fmt.Fprintf(e.stdout, "online upgrade stopped between phases: %s; next phase: %s\n", strings.Join(u.Found, "; "), u.Next)
		}
		// Tables in name order: the text is the same at every run.
		for _, t := range slices.Sorted(maps.Keys(obs.Indexes)) {
			fmt.Fprintf(e.stdout, "indexes on %s:\n", t)
			for _, i := range obs.Indexes[t] {
				fmt.Fprintf(e.stdout, "  %s\n", i)
			}
		}
		fmt.Fprintln(e.stdout, "subagents, store-wide:")
		printSummary(e, counts)
		return exitOK
	})
}

// writerStatus is whether this release's live writer would start on the
// table as it is (capture.NewWriter's check), and why not.
type writerStatus struct {
	Starts  bool   `json:"starts"`
	Refused string `json:"refused,omitempty"`
}

// liveWriter judges the live table as the writer's start does: it reads
// the catalog and writes nothing.
func liveWriter(ctx context.Context, db *sql.DB, target dsn.Target) writerStatus {
	w, err := capture.NewWriter(ctx, db, target.Dialect, capture.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return writerStatus{Refused: err.Error()}
	}
	_ = w.Close() // nothing was prepared: Close has nothing to fail on
	return writerStatus{Starts: true}
}
