// Package lint reviews a change to schema.hcl before it ships. For each
// dialect and each installed-base state the reconciler meets in the field it
// builds the state in a scratch store (package parity's), plans the
// reconcile to the new declaration there — the plan only, nothing is applied
// — and reports the plan phase by phase with the hazards a reviewer must
// know: a change refused at boot, a table rewritten under an exclusive lock,
// a SQLite rebuild, an index built without CONCURRENTLY, a NOT NULL column
// without a default, an edit to a host table, a change to AC-33's end state,
// and any change at all (every installation leaves its certified steady
// state once).
package lint

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/schemastate/schemastate"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/tool/basestate"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/internal/tool/store"
	"github.com/schemastate/schemastate/reconcile"
)

// States are the installed-base states a lint plans from, in the order it
// reports them; OldShape only when there is a base declaration.
var States = []*basestate.State{basestate.Predating, basestate.PreAmendment, basestate.HostDDL, basestate.OldShape}

// Source is one declaration: its HCL and the name errors cite it by.
type Source struct {
	// HCL is the declaration's text; nil means the built-in schema.hcl.
	HCL []byte
	// File names it ("schema.hcl", "main:schema.hcl").
	File string
}

func (s Source) builtin() bool { return s.HCL == nil }

func (s Source) name() string {
	if s.builtin() {
		return "schema.hcl (built in)"
	}
	return s.File
}

func (s Source) text() []byte {
	if s.builtin() {
		return schemastate.SchemaHCL
	}
	return s.HCL
}

// Config says what is linted, against what, and where.
type Config struct {
	// New is the declaration under review (zero: the built-in one).
	New Source
	// Base is the declaration installations run today; nil when there is
	// none, and then the old-shape state and the hazards that compare two
	// declarations are left out (the report says so).
	Base *Source
	// Dialects to lint (default both).
	Dialects []dialect.Dialect
	// DB is --db: a PostgreSQL URL whose server holds the PostgreSQL stores
	// (temporary schemas, dropped afterwards) — without one PostgreSQL is
	// skipped — and a real store of either dialect whose row counts the
	// hazards that copy or rewrite a table quote.
	DB string
	// Logger receives the scratch reconciles' logs (default: discarded).
	Logger *slog.Logger
	// Writers are the writer contracts the new declaration is judged
	// against: this release's (nil: the built-in one) and the base's.
	Writers Writers
	// Options are added to every plan (reconcile.WithOnlineAbove, to plan
	// the online path a large field table takes).
	Options []reconcile.Option
}

// Phase is a plan phase as lint prints it: the reconcile's phase and what
// its cost grows with.
type Phase struct {
	ops.Phase
	// Cost is CostCatalog or CostRows.
	Cost string `json:"cost"`
}

// Phase costs.
const (
	CostCatalog = "catalog-only"
	CostRows    = "proportional-to-rows"
)

// Run is one dialect × state: the plan a reconcile to New makes there.
type Run struct {
	Dialect dialect.Dialect   `json:"dialect"`
	State   string            `json:"state"`
	Phases  []Phase           `json:"phases"`
	Refused []string          `json:"refused"`
	Drift   []reconcile.Drift `json:"drift"`
	Hazards []Hazard          `json:"hazards"`
}

// Report is a whole lint.
type Report struct {
	New  string `json:"new"`
	Base string `json:"base,omitempty"`
	// Declaration holds the hazards found by comparing the two declarations
	// (per dialect), before any store is built.
	Declaration []Hazard `json:"declaration"`
	Runs        []Run    `json:"runs"`
	// Skipped says what was not evaluated and why.
	Skipped []string `json:"skipped"`
}

// Hazards lists every hazard: the declaration's, then each run's.
func (r *Report) Hazards() []Hazard {
	out := append([]Hazard(nil), r.Declaration...)
	for _, run := range r.Runs {
		out = append(out, run.Hazards...)
	}
	return out
}

// Exit is the exit code a CI job branches on: 1 when a hazard is at or
// above level, else 0. (2, an evaluation error, is Lint's error.)
func (r *Report) Exit(level Level) int {
	if r.Fails(level) {
		return 1
	}
	return 0
}

// Fails reports whether any hazard is at or above level.
func (r *Report) Fails(level Level) bool {
	for _, h := range r.Hazards() {
		if h.Level.atLeast(level) {
			return true
		}
	}
	return false
}

// ErrEvaluate is wrapped by every error that stops a lint: a declaration
// that does not evaluate, a store that cannot be built or planned.
var ErrEvaluate = errors.New("lint: evaluation failed")

// Lint plans New on every state of every dialect in cfg and reports the
// plans and their hazards. It changes nothing but the scratch stores it
// creates and removes.
func Lint(ctx context.Context, cfg Config) (rep *Report, err error) {
	if len(cfg.Dialects) == 0 {
		cfg.Dialects = perdialect.All()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rep = &Report{New: cfg.New.name(), Declaration: []Hazard{}, Runs: []Run{}, Skipped: []string{}}
	var real *target
	if cfg.DB != "" {
		t, err := dsn.Parse(cfg.DB)
		if err != nil {
			return nil, fmt.Errorf("%w: --db: %w", ErrEvaluate, err)
		}
		if real, err = openReal(ctx, t); err != nil {
			return nil, fmt.Errorf("%w: --db %s: %w", ErrEvaluate, t.Display, err)
		}
		defer real.db.Close()
	}
	if cfg.Base != nil {
		rep.Base = cfg.Base.name()
		if cfg.Writers.Base == nil {
			rep.Skipped = append(rep.Skipped, "the base has no writer contract (writers.json at the base, or --base-writers): the base release's writer, which keeps writing during a rolling deploy, was not checked")
		}
	} else {
		rep.Skipped = append(rep.Skipped, "no base declaration (--base or --base-git): the old-shape state, and the edits to host tables, the dropped tables, the AC-33 end state and the certificate, which compare two declarations, were not checked")
	}
	dir, newFile, baseFile, err := writeSources(cfg)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for _, d := range cfg.Dialects {
		r, err := dialects.For(d)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrEvaluate, err)
		}
		newDecl, err := declare.Eval(cfg.New.text(), cfg.New.name(), d, "main")
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrEvaluate, err)
		}
		var baseDecl *declare.Declaration
		if cfg.Base != nil {
			if baseDecl, err = declare.Eval(cfg.Base.text(), cfg.Base.name(), d, "main"); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrEvaluate, err)
			}
			rep.Declaration = append(rep.Declaration, declarationHazards(d, *cfg.Base, cfg.New, baseDecl, newDecl)...)
		} else if es := newDecl.EndState(); !es.KeyBearing() {
			rep.Declaration = append(rep.Declaration, endStateHazard(d, false, es))
		}
		wh, err := writerHazards(d, newDecl, cfg.Writers)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrEvaluate, err)
		}
		rep.Declaration = append(rep.Declaration, wh...)
		server := ""
		if r.storesOnServer {
			if real == nil || real.t.Dialect != d {
				rep.Skipped = append(rep.Skipped, r.noServer)
				continue
			}
			server = cfg.DB
		}
		runs, err := lintDialect(ctx, cfg, d, server, newFile, baseFile, real)
		if err != nil {
			return nil, err
		}
		rep.Runs = append(rep.Runs, runs...)
	}
	if real != nil && slices.Contains(cfg.Dialects, real.t.Dialect) && real.hasOwnedTables(ctx) {
		run, err := planStore(ctx, real, newFile, cfg.Options)
		if err != nil {
			return nil, err
		}
		rep.Runs = append(rep.Runs, run)
	}
	return rep, nil
}

// writeSources writes the declarations given as text to a directory of
// their own, as the reconcile reads a declaration from a file: newFile, and
// baseFile when there is a base ("" otherwise). The caller removes dir.
func writeSources(cfg Config) (dir, newFile, baseFile string, err error) {
	if dir, err = os.MkdirTemp("", "schemastate_lint_"); err != nil {
		return "", "", "", fmt.Errorf("%w: temporary directory: %w", ErrEvaluate, err)
	}
	if newFile, err = writeSource(dir, "new.hcl", cfg.New); err == nil && cfg.Base != nil {
		baseFile, err = writeSource(dir, "base.hcl", *cfg.Base)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", "", "", err
	}
	return dir, newFile, baseFile, nil
}

func writeSource(dir, name string, s Source) (string, error) {
	if s.builtin() {
		return "", nil
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, s.HCL, 0o600); err != nil {
		return "", fmt.Errorf("%w: %w", ErrEvaluate, err)
	}
	return path, nil
}

// lintDialect builds each state on one dialect's scratch stores and plans it.
func lintDialect(ctx context.Context, cfg Config, d dialect.Dialect, server, newFile, baseFile string, real *target) (runs []Run, err error) {
	sc, err := store.NewScratch(ctx, server, "lint")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEvaluate, err)
	}
	defer func() { err = errors.Join(err, sc.Close()) }()
	for _, state := range States {
		if state == basestate.OldShape && cfg.Base == nil {
			continue
		}
		db, err := Build(ctx, sc, state, baseFile, cfg.Logger)
		if err != nil {
			return nil, err
		}
		run, err := PlanState(ctx, db, d, state, newFile, cfg.Options)
		if err != nil {
			return nil, err
		}
		for i, h := range run.Hazards {
			if h.copiesRows && real != nil && real.t.Dialect == d {
				run.Hazards[i].Rows = real.rows(ctx, h.Table)
			}
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// Build creates one state's store on sc: the state's fixtures, and for
// OldShape a reconcile to the base declaration (baseFile; empty means the
// built-in one).
func Build(ctx context.Context, sc *store.Scratch, state *basestate.State, baseFile string, logger *slog.Logger) (*sql.DB, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts := []reconcile.Option{reconcile.WithLogger(logger)}
	if baseFile != "" {
		// The base release's reconcile applied its declaration with its
		// own writers; whether this release's can write it is lint's to say.
		opts = append(opts, reconcile.WithSchemaFile(baseFile), reconcile.WithAllowWriterBreak())
	}
	st, err := state.Build(ctx, sc, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEvaluate, err)
	}
	return st.DB, nil
}

// PlanOptions are the options a lint plans with: the dialect, the
// declaration under review (newFile; empty means the built-in one) and the
// caller's own.
func PlanOptions(d dialect.Dialect, newFile string, extra []reconcile.Option) []reconcile.Option {
	opts := []reconcile.Option{reconcile.WithDialect(d)}
	if newFile != "" {
		opts = append(opts, reconcile.WithSchemaFile(newFile))
	}
	return append(opts, extra...)
}

// PlanState plans the reconcile of one state's store (db) to the
// declaration under review (newFile; empty means the built-in one) and
// judges it: the plan Lint prints for the state, and the statements a
// reconcile of that store with PlanOptions then runs.
func PlanState(ctx context.Context, db *sql.DB, d dialect.Dialect, state *basestate.State, newFile string, extra []reconcile.Option) (Run, error) {
	p, err := reconcile.Plan(ctx, db, PlanOptions(d, newFile, extra)...)
	if err != nil {
		return Run{}, fmt.Errorf("%w: plan the %s store on %s: %w", ErrEvaluate, state, d, err)
	}
	run := Run{Dialect: d, State: state.Name, Phases: []Phase{}, Refused: nonNil(p.Refused()), Drift: p.Drift(), Hazards: []Hazard{}}
	if run.Drift == nil {
		run.Drift = []reconcile.Drift{}
	}
	tables := p.Tables()
	for _, ph := range p.Phases() {
		run.Phases = append(run.Phases, Phase{Phase: ph, Cost: cost(ph)})
	}
	run.Hazards = append(run.Hazards, planHazards(d, state.Name, tables, p.Phases())...)
	return run, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// target is the real store --db names, opened read-only.
type target struct {
	t  dsn.Target
	db *sql.DB
}

func openReal(ctx context.Context, t dsn.Target) (*target, error) {
	r, err := dialects.For(t.Dialect)
	if err != nil {
		return nil, err
	}
	if t, err = r.readOnly(t); err != nil {
		return nil, err
	}
	db, err := t.Open(ctx)
	if err != nil {
		return nil, err
	}
	return &target{t: t, db: db}, nil
}

// hasOwnedTables reports a real store that holds the subagents table: a
// store of the module, whose own plan is worth reading (a server --db names
// only to hold the scratch stores has none).
func (r *target) hasOwnedTables(ctx context.Context) bool {
	return r.rows(ctx, "task_session_subagents") != nil
}

// rows counts a table's rows in the real store; nil when it has no such
// table (or cannot say).
func (r *target) rows(ctx context.Context, table string) *int64 {
	var n int64
	if err := r.db.QueryRowContext(ctx, "SELECT count(*) FROM "+dialect.QuoteIdent(table)).Scan(&n); err != nil {
		return nil
	}
	return &n
}

// GitSource reads path (relative to the repository root) as it is at ref,
// with `git show REF:PATH` run in dir.
func GitSource(ctx context.Context, dir, ref, path string) (Source, error) {
	spec := ref + ":" + path
	out, _, err := gitShow(ctx, dir, spec)
	if err != nil {
		return Source{}, err
	}
	return Source{HCL: out, File: spec}, nil
}

// gitShow runs `git show SPEC` in dir: the file's bytes, or an error quoting
// git's own words (also returned, for a caller that tells a missing path
// from a missing ref).
func gitShow(ctx context.Context, dir, spec string) (out []byte, stderr string, err error) {
	cmd := exec.CommandContext(ctx, "git", "show", spec)
	cmd.Dir = dir
	var eb bytes.Buffer
	cmd.Stderr = &eb
	out, err = cmd.Output()
	if err != nil {
		stderr = strings.TrimSpace(eb.String())
		return nil, stderr, fmt.Errorf("git show %s: %w: %s", spec, err, stderr)
	}
	return out, "", nil
}

// WorkTreeSource reads path as it is in the working tree of the git
// repository dir is in: what 'git show REF:path' is the committed form of.
func WorkTreeSource(ctx context.Context, dir, path string) (Source, error) {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Source{}, fmt.Errorf("git rev-parse --show-toplevel: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return FileSource(filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(path)))
}

// FileSource reads a declaration from a file.
func FileSource(path string) (Source, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Source{}, fmt.Errorf("read declaration: %w", err)
	}
	return Source{HCL: b, File: path}, nil
}
