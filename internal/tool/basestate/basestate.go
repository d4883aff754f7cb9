// Package basestate is the one list of the installed-base states a reconcile
// must meet in the field (host-context.md, "Installed-base states"): each
// with its name, the field states it stands for, what it is, and how a store
// in it is built from the fixtures — the stores parity compares, lint plans
// from, generate writes at scale and demo seeds.
package basestate

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/tool/fixtures"
	"github.com/schemastate/schemastate/internal/tool/store"
	"github.com/schemastate/schemastate/reconcile"
)

// State is one installed-base state.
type State struct {
	// Name is the state as reports print it (parity's stores, lint's runs).
	Name string
	// Flag is the word generate's and demo's --state take for it, and
	// generate's summary prints; empty where neither offers the state.
	Flag string
	// Field names the states of host-context.md it stands for.
	Field string
	// Description says what a store in this state holds.
	Description string
	// tables create the host's tables and task_session_subagents as the
	// state has it; rest is everything else a small store in the state
	// holds (background_agent_log as deployed before transcripts, history,
	// owned rows, keys), which a generator writes for itself.
	tables, rest []fixture
	// reconciled: the fixtures are followed by a reconcile, which brings
	// the store to the declaration the builder is given.
	reconciled bool
}

// fixture returns one fixture script for a dialect.
type fixture func(d string) (string, error)

func anyDialect(f func() (string, error)) fixture { return func(string) (string, error) { return f() } }

var (
	host      fixture = fixtures.HostFixture
	legacy    fixture = fixtures.LegacyFixture
	hostDDL   fixture = fixtures.HostAmendedFixture
	lifecycle fixture = fixtures.LifecycleLegacyFixture
	demoRows          = anyDialect(fixtures.DemoFixture)
)

// The states, in the order a store passes through them.
var (
	// Fresh: the host's tables only; a reconcile creates every owned table.
	Fresh = &State{Name: "fresh", Flag: "fresh", Field: "1",
		Description: "the host's tables only, no owned table",
		tables:      []fixture{host}}
	// Predating: the host's history and no owned table. Built from the
	// fixtures it has the host's tables without history (a plan sees no
	// difference); generate writes the history.
	Predating = &State{Name: "predating", Flag: "predating", Field: "1 and 2",
		Description: "the host's tables (and history, where a generator writes it), no owned table",
		tables:      []fixture{host}}
	// PreAmendment: the pre-amendment task_session_subagents (no
	// agent_execution_id, the two-column UNIQUE, the three secondary
	// indexes) with live and backfill rows and the second-precision keys the
	// pre-amendment build wrote, and background_agent_log as the host
	// deployed it before transcripts: the SQLite rebuild / PostgreSQL swap.
	PreAmendment = &State{Name: "pre-amendment", Flag: "legacy", Field: "3 and 4",
		Description: "the pre-amendment table with rows and second-precision keys, background_agent_log before transcripts",
		tables:      []fixture{host, legacy}, rest: []fixture{lifecycle, demoRows}}
	// HostDDL: the amended table as the host's own DDL creates it (an
	// inline three-column UNIQUE, one row), reached without this module.
	HostDDL = &State{Name: "host-ddl", Field: "6, reached without this module",
		Description: "the amended table as the host's own DDL creates it, background_agent_log before transcripts",
		tables:      []fixture{host, hostDDL}, rest: []fixture{lifecycle}}
	// Amended: a reconcile has brought the table to its declared shape and
	// written every key: the steady state. generate writes history before
	// the reconcile and live rows after it.
	Amended = &State{Name: "amended", Flag: "amended", Field: "6",
		Description: "the declared shape and every key, after a reconcile",
		tables:      []fixture{host}, reconciled: true}
	// OldShape: a store reconciled to the declaration installations run
	// today — every installation that booted the predecessor of the
	// version under review.
	OldShape = &State{Name: "old-shape", Field: "6, of the base declaration",
		Description: "a store reconciled to the base declaration",
		tables:      []fixture{host}, reconciled: true}
)

// All lists every state.
var All = []*State{Fresh, Predating, PreAmendment, HostDDL, Amended, OldShape}

// String is the state's name.
func (s *State) String() string { return s.Name }

// ByFlag is the state of the word generate's and demo's --state take.
func ByFlag(word string) (*State, bool) {
	for _, s := range All {
		if s.Flag != "" && s.Flag == word {
			return s, true
		}
	}
	return nil, false
}

// Reconciled reports whether a store reaches the state only through a
// reconcile after its fixtures (Build runs it).
func (s *State) Reconciled() bool { return s.reconciled }

// SeedTables creates the host's tables and task_session_subagents as the
// state has them in an empty store of dialect d, and nothing else: a
// generator writes the rest.
func (s *State) SeedTables(ctx context.Context, db *sql.DB, d dialect.Dialect) error {
	return s.apply(ctx, db, d, s.tables)
}

// Seed writes a small store in the state into an empty store of dialect d:
// its tables and the rest. It runs no reconcile: a reconciled state needs
// Build.
func (s *State) Seed(ctx context.Context, db *sql.DB, d dialect.Dialect) error {
	if err := s.SeedTables(ctx, db, d); err != nil {
		return err
	}
	return s.apply(ctx, db, d, s.rest)
}

func (s *State) apply(ctx context.Context, db *sql.DB, d dialect.Dialect, scripts []fixture) error {
	for _, f := range scripts {
		script, err := f(string(d))
		if err == nil {
			err = fixtures.ApplyScript(ctx, db, script)
		}
		if err != nil {
			return fmt.Errorf("basestate: seed the %s store: %w", s.Name, err)
		}
	}
	return nil
}

// Build creates an empty store on sc named after the state and brings it
// into the state: its fixtures, then for a reconciled state a reconcile with
// opts (reconcile.WithSchemaFile names the declaration; default the
// built-in one).
func (s *State) Build(ctx context.Context, sc *store.Scratch, opts ...reconcile.Option) (*store.Store, error) {
	st, err := sc.Open(ctx, s.Name)
	if err != nil {
		return nil, err
	}
	if err := s.Seed(ctx, st.DB, st.Dialect); err != nil {
		return nil, err
	}
	if !s.reconciled {
		return st, nil
	}
	opts = append([]reconcile.Option{reconcile.WithDialect(st.Dialect)}, opts...)
	if _, err := reconcile.Reconcile(ctx, st.DB, opts...); err != nil {
		return nil, fmt.Errorf("basestate: build the %s store on %s (reconcile): %w", s.Name, st.Dialect, err)
	}
	return st, nil
}
