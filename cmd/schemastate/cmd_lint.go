package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/lint"
)

const lintUsage = `[--base OLD.hcl [--base-writers OLD.json] | --base-git REF] [NEW.hcl] [--writers NEW.json] [--dialect sqlite|postgres|both] [--db DSN] [--fail-on refused|rewrite|any] [--json]

Plans the reconcile to NEW.hcl (default: the built-in schema.hcl; with --base-git, the
working tree's schema.hcl) on a scratch store
of each installed-base state — predating (no owned table), pre-amendment, amended
by the host's own DDL, and, with a base, the base declaration's shape — and prints
every phase (SQL, transaction, lock, cost) with the hazards found. SQLite stores are
temporary files; PostgreSQL stores are temporary schemas on the --db server, dropped
afterwards (without a PostgreSQL --db, PostgreSQL is skipped and said so). A --db
that is a real store also gives the row counts a rebuild or rewrite will copy.
--base-git REF reads the base with 'git show REF:schema.hcl'.

The new declaration is also judged against what the writers write (writers.json): this
release's (built in; with --base-git and no NEW.hcl, the working tree's; or --writers)
and the base release's, which keeps writing during a rolling deploy (--base-git reads
REF:writers.json; or --base-writers). Each writer-* hazard names the writer, the column
or constraint and the frames that would fail, and how to ship the edit in two releases.
`

func runLint(ctx context.Context, e *env, args []string) int {
	fs, db, asJSON := checkFlags(e, "lint", lintUsage,
		"PostgreSQL server for the PostgreSQL stores, and/or a real store (either dialect) for row counts", "print the whole report as one JSON object")
	rel := releaseFlags(fs, releaseHelp{
		base:        "the declaration installations run today, from a file",
		baseGit:     "the declaration installations run today, as 'git show REF:schema.hcl' reads it",
		baseWriters: "the base release's writer contract, from a file (--base-git reads REF:writers.json)",
		writers:     "this release's writer contract, from a file (default: the built-in writers.json)",
	})
	dialects := fs.String("dialect", "both", "sqlite, postgres or both")
	failOn := fs.String("fail-on", "refused", "exit 1 on a hazard at or above: refused, rewrite or any")
	if code, ok := parseArgs(e, fs, args, 1, "one declaration (NEW.hcl)"); !ok {
		return code
	}
	usageErr := func(format string, a ...any) int { return usagef(e, "lint", format, a...) }
	level, err := lint.ParseFailOn(*failOn)
	if err != nil {
		return usageErr("%v", err)
	}
	cfg := lint.Config{Logger: e.logger, DB: *db}
	switch *dialects {
	case "both":
	case "sqlite", "postgres":
		cfg.Dialects = []dialect.Dialect{dialect.Dialect(*dialects)}
	default:
		return usageErr("--dialect %q: want sqlite, postgres or both", *dialects)
	}
	var server dialect.Dialect
	if *db != "" {
		t, err := dsn.Parse(*db)
		if err != nil {
			return usageErr("%v", err)
		}
		server = t.Dialect
	}
	if *dialects == "postgres" && server != cfg.Dialects[0] {
		// Linting nothing and exiting 0 would read as a clean review.
		return usageErr("--dialect postgres builds its stores on a PostgreSQL server: give one with --db postgres://…")
	}
	if fs.NArg() == 1 {
		if cfg.New, err = lint.FileSource(fs.Arg(0)); err != nil {
			return usageErr("%v", err)
		}
	}
	switch {
	case *rel.base != "" && *rel.baseGit != "":
		return usageErr("--base and --base-git name the same thing: give one")
	case *rel.base != "":
		s, err := lint.FileSource(*rel.base)
		if err != nil {
			return usageErr("--base: %v", err)
		}
		cfg.Base = &s
	case *rel.baseGit != "":
		s, err := lint.GitSource(ctx, ".", *rel.baseGit, "schema.hcl")
		if err != nil {
			return usageErr("--base-git: %v", err)
		}
		cfg.Base = &s
		if fs.NArg() == 0 {
			// The base is the committed schema.hcl: the change under review
			// is the working tree's, not the declaration built into this
			// binary.
			if cfg.New, err = lint.WorkTreeSource(ctx, ".", "schema.hcl"); err != nil {
				return usageErr("--base-git without NEW.hcl reads the working tree's schema.hcl: %v", err)
			}
		}
	}
	if cfg.Writers, err = lintWriters(ctx, *rel.writers, *rel.baseWriters, *rel.baseGit, fs.NArg() == 0); err != nil {
		return usageErr("%v", err)
	}
	rep, err := lint.Lint(ctx, cfg)
	if err != nil {
		// Lint's errors all wrap lint.ErrEvaluate; say it once, as "lint".
		return fail(e, "lint", errors.New(strings.TrimPrefix(err.Error(), lint.ErrEvaluate.Error()+": ")))
	}
	if *asJSON {
		writeJSON(e.stdout, rep)
	} else {
		printLint(e, rep, level)
	}
	return rep.Exit(level)
}

// lintWriters reads the writer contracts a lint judges against: --writers
// (or, with --base-git and no NEW.hcl, the working tree's writers.json) and
// --base-writers (or REF:writers.json with --base-git).
func lintWriters(ctx context.Context, this, base, baseGit string, workTree bool) (lint.Writers, error) {
	var ws lint.Writers
	var err error
	switch {
	case this != "":
		ws.This, err = contractFile(this)
	case baseGit != "" && workTree:
		// A working tree without writers.json (a host's repository that
		// keeps only schema.hcl) is judged against the built-in writers.
		var s lint.Source
		if s, err = lint.WorkTreeSource(ctx, ".", contract.File); err == nil {
			ws.This, err = contract.Parse(s.HCL, s.File)
		} else if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	}
	if err != nil {
		return ws, fmt.Errorf("--writers: %w", err)
	}
	switch {
	case base != "":
		ws.Base, err = contractFile(base)
	case baseGit != "":
		ws.Base, err = lint.GitWriters(ctx, ".", baseGit)
	}
	if err != nil {
		return ws, fmt.Errorf("--base-writers: %w", err)
	}
	return ws, nil
}

// releases are the flags compat and lint name the two releases of a rolling
// deploy by: the base's declaration (--base from a file, --base-git from
// git), the base's writer contract (--base-writers) and this release's
// (--writers).
type releases struct{ base, baseGit, baseWriters, writers *string }

// releaseHelp is what each flag of releases says in a command's -h.
type releaseHelp struct{ base, baseGit, baseWriters, writers string }

// releaseFlags registers releases on fs.
func releaseFlags(fs *flag.FlagSet, h releaseHelp) releases {
	return releases{
		base:        fs.String("base", "", h.base),
		baseGit:     fs.String("base-git", "", h.baseGit),
		baseWriters: fs.String("base-writers", "", h.baseWriters),
		writers:     fs.String("writers", "", h.writers),
	}
}

func contractFile(path string) (*contract.Contract, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return contract.Parse(b, path)
}

func printLint(e *env, r *lint.Report, level lint.Level) {
	against := "no base"
	if r.Base != "" {
		against = "base " + r.Base
	}
	fmt.Fprintf(e.stdout, "lint %s against %s\n", r.New, against)
	for _, s := range r.Skipped {
		fmt.Fprintf(e.stdout, "-- not checked: %s\n", s)
	}
	for _, run := range r.Runs {
		fmt.Fprintf(e.stdout, "\n== %s, %s: %d phase(s)\n", run.Dialect, run.State, len(run.Phases))
		for _, ph := range run.Phases {
			tx := "no transaction"
			if ph.Transactional {
				tx = "one transaction"
			}
			fmt.Fprintf(e.stdout, "-- phase %s (step %s; %s; lock %s; %s)\n", ph.ID(), ph.Step, tx, ph.Lock, ph.Cost)
			for _, s := range ph.SQL {
				fmt.Fprintf(e.stdout, "%s;\n", s)
			}
		}
		for _, ref := range run.Refused {
			fmt.Fprintf(e.stdout, "-- REFUSED (never applied at boot): %s\n", ref)
		}
		for _, d := range run.Drift {
			// A renamed index leaves the old one here: kept, not dropped.
			fmt.Fprintf(e.stdout, "-- UNDECLARED (kept; reconcile --prune drops it): %s\n", d)
		}
	}
	hs := r.Hazards()
	fmt.Fprintf(e.stdout, "\n%d hazard(s); failing at %s and above\n", len(hs), level)
	for _, h := range hs {
		where := string(h.Dialect)
		if h.State != "" {
			where += "/" + h.State
		} else {
			where += "/declaration"
		}
		obj := h.Table
		if h.Column != "" {
			obj += "." + h.Column
		}
		if h.Index != "" {
			obj += " " + indexWord(h.Code) + " " + h.Index
		}
		rows := ""
		if h.Rows != nil {
			rows = fmt.Sprintf(" [%d rows in --db]", *h.Rows)
		}
		fmt.Fprintf(e.stdout, "%-7s %-20s %-28s %s: %s%s\n        advice: %s\n", strings.ToUpper(string(h.Level)), h.Code, where, obj, h.Detail, rows, h.Advice)
	}
}

// indexWord names what a hazard's Index field holds: a writer-* hazard's
// constraint may be a check or a foreign key.
func indexWord(code string) string {
	if strings.HasPrefix(code, "writer-") {
		return "constraint"
	}
	return "index"
}
