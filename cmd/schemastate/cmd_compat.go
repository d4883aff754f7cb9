package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/tool/compat"
	"github.com/schemastate/schemastate/internal/tool/lint"
)

const compatUsage = `(--base-git REF | --base OLD.hcl --base-writers OLD.json) [--schema NEW.hcl] [--writers NEW.json] [--frames DIR|FILE] [--db POSTGRES] [--json]

Checks that two releases overlapping in a rolling deploy can both write: on each
dialect, a store reconciled to the new declaration is written the frame corpus by the
base release's writer (its writers.json), and a store reconciled to the base declaration
by this release's writer. Every frame either writer could not write is reported.
With --base-git, the base is 'git show REF:schema.hcl' and REF:writers.json, and the new
release is the working tree's schema.hcl and writers.json (unless given). SQLite stores
are temporary files; with --db, PostgreSQL stores are temporary schemas on that server.
`

func runCompat(ctx context.Context, e *env, args []string) int {
	fs, server, asJSON := checkFlags(e, "compat", compatUsage,
		"PostgreSQL server for the PostgreSQL stores (default: SQLite only)", "print the report as one JSON object")
	rel := releaseFlags(fs, releaseHelp{
		base:        "the base release's declaration, from a file",
		baseGit:     "the base release: git show REF:schema.hcl and REF:writers.json",
		baseWriters: "the base release's writer contract, from a file",
		writers:     "the new writer contract (default: the working tree's with --base-git, else the built-in one)",
	})
	schema := fs.String("schema", "", "the new declaration (default: the working tree's with --base-git, else the built-in one)")
	frames := fs.String("frames", "testdata/frames", "the frame corpus: a directory of *.ndjson or one file")
	if code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	usageErr := func(format string, a ...any) int { return usagef(e, "compat", format, a...) }
	if parseServer(*server) != nil {
		return usageErr("--db names the PostgreSQL server the stores are built on")
	}
	cfg := compat.Config{Server: *server, Logger: e.logger}
	var err error
	if cfg.Base, err = compatBase(ctx, *rel.baseGit, *rel.base, *rel.baseWriters); err != nil {
		return usageErr("%v", err)
	}
	if cfg.New, err = compatNew(ctx, *rel.baseGit != "", *schema, *rel.writers); err != nil {
		return usageErr("%v", err)
	}
	if cfg.Frames, err = compat.Corpus(*frames); err != nil {
		return usageErr("--frames: %v", err)
	}
	rep, err := compat.Check(ctx, cfg)
	if err != nil {
		return fail(e, "compat", err)
	}
	output(e, *asJSON, rep, printCompat)
	if !rep.Compatible() {
		return 1
	}
	return exitOK
}

// compatBase reads the base release: from git (REF:schema.hcl and
// REF:writers.json, which may be absent) or from the two files.
func compatBase(ctx context.Context, ref, hcl, writers string) (compat.Release, error) {
	switch {
	case ref != "" && (hcl != "" || writers != ""):
		return compat.Release{}, fmt.Errorf("--base-git, or --base with --base-writers: give one")
	case ref != "":
		s, err := lint.GitSource(ctx, ".", ref, "schema.hcl")
		if err != nil {
			return compat.Release{}, fmt.Errorf("--base-git: %w", err)
		}
		w, err := lint.GitWriters(ctx, ".", ref)
		if err != nil {
			return compat.Release{}, fmt.Errorf("--base-git: %w", err)
		}
		return compat.Release{Name: ref, HCL: s.HCL, Writers: w, NoWriters: w == nil}, nil
	case hcl != "" && writers != "":
		s, err := lint.FileSource(hcl)
		if err != nil {
			return compat.Release{}, fmt.Errorf("--base: %w", err)
		}
		w, err := contractFile(writers)
		if err != nil {
			return compat.Release{}, fmt.Errorf("--base-writers: %w", err)
		}
		return compat.Release{Name: hcl, HCL: s.HCL, Writers: w}, nil
	}
	return compat.Release{}, fmt.Errorf("name the base release: --base-git REF, or --base OLD.hcl with --base-writers OLD.json")
}

// compatNew reads the new release: the files given, else the working
// tree's (with --base-git) or the built-in ones.
func compatNew(ctx context.Context, workTree bool, hcl, writers string) (compat.Release, error) {
	r := compat.Release{Name: "this release (built in)"}
	if workTree {
		r.Name = "the working tree"
	}
	read := func(given, path string) ([]byte, string, error) {
		switch {
		case given != "":
			s, err := lint.FileSource(given)
			return s.HCL, given, err
		case workTree:
			// A working tree without the file: the built-in one.
			s, err := lint.WorkTreeSource(ctx, ".", path)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, "", nil
			}
			return s.HCL, s.File, err
		}
		return nil, "", nil
	}
	b, _, err := read(hcl, "schema.hcl")
	if err != nil {
		return r, fmt.Errorf("--schema: %w", err)
	}
	if hcl != "" {
		r.Name = hcl
	}
	r.HCL = b
	b, name, err := read(writers, contract.File)
	if err != nil {
		return r, fmt.Errorf("--writers: %w", err)
	}
	if b != nil {
		if r.Writers, err = contract.Parse(b, name); err != nil {
			return r, fmt.Errorf("--writers: %w", err)
		}
	}
	return r, nil
}

func printCompat(e *env, r *compat.Report) {
	fmt.Fprintf(e.stdout, "compat: base %s, new %s\n", r.Base, r.New)
	for _, s := range r.Skipped {
		fmt.Fprintf(e.stdout, "-- not checked: %s\n", s)
	}
	for _, run := range r.Runs {
		verdict := "ok"
		if !run.OK() {
			verdict = "FRAMES LOST"
		}
		fmt.Fprintf(e.stdout, "%-8s %-24s (shape of %s, writer of %s): %d/%d frames written (%d without an identity, never written): %s\n",
			run.Dialect, run.Scenario, run.Shape, run.Writer, run.Written, run.Frames, run.Skipped, verdict)
		if run.Refused != "" {
			fmt.Fprintf(e.stdout, "  the writer refuses to start, no frame written: %s\n", run.Refused)
			if len(run.Failures) > 0 {
				fmt.Fprintln(e.stdout, "  written through it unchecked, the table rejects:")
			}
		}
		for _, f := range run.Failures {
			fmt.Fprintf(e.stdout, "  %s:%d session %s tool call %s: %s\n", f.File, f.Line, f.SessionID, f.ToolCallID, f.Error)
		}
	}
}
