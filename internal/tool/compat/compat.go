// Package compat checks that the writers of two releases that overlap in a
// rolling deploy can both write to the shapes each release's reconcile
// leaves. On each dialect it builds two scratch stores and writes the frame
// corpus (testdata/frames/) into each through the live writer (capture):
//
//   - the new shape, the base writer: a store reconciled to the new
//     declaration, written by the base release's writer contract — the
//     old replicas still running once the first new one has booted;
//   - the base shape, the new writer: a store reconciled to the base
//     declaration, written by this release's writer — a new replica whose
//     reconcile has not run yet, or whose shape step failed.
//
// It reports every frame either writer could not write. It builds nothing by
// hand: the stores are reconciled, the writers are capture.Writer by each
// release's writers.json.
package compat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/tool/basestate"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
	"github.com/schemastate/schemastate/internal/tool/store"
	"github.com/schemastate/schemastate/reconcile"
)

// Release is one release's declaration and writers.
type Release struct {
	// Name cites it ("HEAD~1", "the working tree").
	Name string
	// HCL is its schema.hcl; nil means the built-in one.
	HCL []byte
	// Writers is its writers.json; nil means the built-in one.
	Writers *contract.Contract
	// NoWriters: the release has no writers.json (it predates the
	// contract), so its writer cannot be emulated; its scenario is skipped
	// and the report says so.
	NoWriters bool
}

// Config says what is compared, where, and with which frames.
type Config struct {
	Base, New Release
	// Server is a PostgreSQL URL whose server holds the PostgreSQL stores
	// (temporary schemas); empty: SQLite only.
	Server string
	// Frames are the corpus files (NDJSON), read in order.
	Frames []string
	// Logger receives the reconciles' logs (default: discarded).
	Logger *slog.Logger
}

// Scenario names.
const (
	NewShapeBaseWriter = "new shape, base writer"
	BaseShapeNewWriter = "base shape, new writer"
)

// Failure is one frame a writer could not write.
type Failure struct {
	File       string `json:"file"`
	Line       int    `json:"line"`
	SessionID  string `json:"session_id"`
	ToolCallID string `json:"tool_call_id"`
	Error      string `json:"error"`
}

// Run is one scenario on one dialect.
type Run struct {
	Dialect  dialect.Dialect `json:"dialect"`
	Scenario string          `json:"scenario"`
	// Shape and Writer name the releases whose declaration and writer met.
	Shape  string `json:"shape"`
	Writer string `json:"writer"`
	Frames int    `json:"frames"`
	// Written counts the frames written; Skipped those without an
	// identity, which no writer writes (AC-2).
	Written int `json:"written"`
	Skipped int `json:"skipped_no_identity"`
	// Refused is the writer's refusal to start: no frame would be written.
	// Failures then still name each frame the table rejects (the corpus
	// written through the writer unchecked).
	Refused  string    `json:"refused,omitempty"`
	Failures []Failure `json:"failures"`
}

// OK reports whether every frame was written.
func (r Run) OK() bool { return r.Refused == "" && len(r.Failures) == 0 }

// Report is a whole compat check.
type Report struct {
	Base string `json:"base"`
	New  string `json:"new"`
	Runs []Run  `json:"runs"`
	// Skipped says what was not checked and why.
	Skipped []string `json:"skipped"`
}

// Compatible reports whether every run wrote every frame.
func (r *Report) Compatible() bool {
	for _, run := range r.Runs {
		if !run.OK() {
			return false
		}
	}
	return true
}

// Check builds each scenario's store on each dialect and writes the corpus.
func Check(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rep := &Report{Base: cfg.Base.Name, New: cfg.New.Name, Runs: []Run{}, Skipped: []string{}}
	var base *contract.Writer
	var err error
	if cfg.Base.NoWriters {
		rep.Skipped = append(rep.Skipped, NewShapeBaseWriter+": "+cfg.Base.Name+" has no "+contract.File+" (it predates the writer contract): its writer cannot be emulated")
	} else if base, err = writerOf(cfg.Base); err != nil {
		return nil, err
	}
	next, err := writerOf(cfg.New)
	if err != nil {
		return nil, err
	}
	servers := []string{""}
	if cfg.Server != "" {
		servers = append(servers, cfg.Server)
	} else {
		rep.Skipped = append(rep.Skipped, "postgres: no --db server given")
	}
	for _, server := range servers {
		sc, err := store.NewScratch(ctx, server, "compat")
		if err != nil {
			return nil, err
		}
		runs, err := checkDialect(ctx, cfg, sc, base, next)
		err = errors.Join(err, sc.Close())
		if err != nil {
			return nil, err
		}
		rep.Runs = append(rep.Runs, runs...)
	}
	return rep, nil
}

// writerOf is a release's "capture" writer.
func writerOf(r Release) (*contract.Writer, error) {
	c := r.Writers
	if c == nil {
		var err error
		if c, err = contract.Builtin(); err != nil {
			return nil, err
		}
	}
	w := c.Writer("capture")
	if w == nil {
		return nil, fmt.Errorf("compat: %s: %s has no \"capture\" writer", r.Name, c.Source)
	}
	return w, nil
}

func checkDialect(ctx context.Context, cfg Config, sc *store.Scratch, base, next *contract.Writer) ([]Run, error) {
	var runs []Run
	for _, s := range []struct {
		scenario string
		shape    Release
		writer   *contract.Writer
		by       string
	}{
		{NewShapeBaseWriter, cfg.New, base, cfg.Base.Name},
		{BaseShapeNewWriter, cfg.Base, next, cfg.New.Name},
	} {
		if s.writer == nil {
			continue
		}
		st, err := shapedStore(ctx, cfg, sc, s.scenario, s.shape)
		if err != nil {
			return nil, err
		}
		run := Run{Dialect: st.Dialect, Scenario: s.scenario, Shape: s.shape.Name, Writer: s.by, Failures: []Failure{}}
		if err := write(ctx, st, s.writer, cfg.Frames, &run); err != nil {
			return nil, err
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// shapedStore is a store with the host's tables, reconciled to r's
// declaration as r's own reconcile applies it (its writers' check is r's
// concern, not this one's), with the sessions the corpus belongs to.
func shapedStore(ctx context.Context, cfg Config, sc *store.Scratch, name string, r Release) (*store.Store, error) {
	st, err := sc.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := basestate.Fresh.Seed(ctx, st.DB, st.Dialect); err != nil {
		return nil, err
	}
	opts := []reconcile.Option{reconcile.WithDialect(st.Dialect), reconcile.WithLogger(cfg.Logger), reconcile.WithAllowWriterBreak()}
	if r.HCL != nil {
		opts = append(opts, reconcile.WithDeclaration(r.HCL, r.Name+":schema.hcl"))
	}
	// Only the shape matters here: this release's backfill may fail on
	// another release's shape (it names this release's columns), which the
	// writers' check of the base shape reports in its own right.
	rep, err := reconcile.Reconcile(ctx, st.DB, opts...)
	if s := rep.Step(reconcile.StepShape); err != nil && (s == nil || s.Status == reconcile.Failed) {
		return nil, fmt.Errorf("compat: reconcile the %q store on %s to %s: %w", name, st.Dialect, r.Name, err)
	}
	sessions, err := fixtures.DemoSessionsFixture()
	if err == nil {
		err = fixtures.ApplyScript(ctx, st.DB, sessions)
	}
	if err != nil {
		return nil, fmt.Errorf("compat: the corpus's sessions: %w", err)
	}
	return st, nil
}

// write sends every corpus file through a capture.Writer by w and records
// what it could not write. A writer that refuses to start is recorded as
// such, and the corpus is then written through it unchecked, so the report
// names each frame the table rejects.
func write(ctx context.Context, st *store.Store, w *contract.Writer, files []string, run *Run) error {
	h := hooks.Hooks{Writer: w}
	cw, err := capture.NewWriter(hooks.With(ctx, h), st.DB, st.Dialect, capture.WithLogger(slog.New(slog.DiscardHandler)))
	switch {
	case errors.Is(err, capture.ErrIncompatibleTable):
		run.Refused = err.Error()
	case err != nil:
		return fmt.Errorf("compat: %w", err)
	default:
		if err := cw.Close(); err != nil {
			return err
		}
	}
	fails := &failures{}
	h.Unchecked = true
	if cw, err = capture.NewWriter(hooks.With(ctx, h), st.DB, st.Dialect, capture.WithLogger(slog.New(fails)),
		capture.WithRetry(capture.RetryPolicy{Attempts: 1})); err != nil {
		return fmt.Errorf("compat: %w", err)
	}
	defer cw.Close()
	for _, f := range files {
		in, err := os.Open(f)
		if err != nil {
			return fmt.Errorf("compat: frames: %w", err)
		}
		fails.file = filepath.ToSlash(f)
		res, err := cw.Ingest(ctx, in, nil)
		in.Close()
		if err != nil {
			return fmt.Errorf("compat: frames %s: %w", f, err)
		}
		run.Frames += res.Frames
	}
	c := cw.Counters()
	run.Failures, run.Written, run.Skipped = fails.list, int(c.Persisted), int(c.SkippedNoIdentity)
	if run.Refused != "" {
		run.Written = 0 // the writer would not have started
	}
	return nil
}

// failures is a slog handler that keeps the writer's WARN of each failed
// write (capture logs one per frame, naming its line).
type failures struct {
	mu   sync.Mutex
	file string
	list []Failure
}

func (h *failures) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *failures) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *failures) WithGroup(string) slog.Handler                { return h }

func (h *failures) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "subagent context write failed" {
		return nil
	}
	f := Failure{File: h.file}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "line":
			f.Line = int(a.Value.Int64())
		case "session_id":
			f.SessionID = a.Value.String()
		case "tool_call_id":
			f.ToolCallID = a.Value.String()
		case "error":
			f.Error = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = append(h.list, f)
	return nil
}

// Corpus lists the frame files of dir (its *.ndjson, sorted), or the one
// file path names.
func Corpus(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	files, err := filepath.Glob(filepath.Join(path, "*.ndjson"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no *.ndjson frames", path)
	}
	slices.Sort(files)
	return files, nil
}
