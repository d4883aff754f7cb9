package parity

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/tool/basestate"
	"github.com/schemastate/schemastate/internal/tool/store"
	"github.com/schemastate/schemastate/reconcile"

	_ "github.com/schemastate/schemastate/drivers"
)

// The stores Run builds, each from an installed-base state reconciled once:
// the Reference, and the states compared with it.
var (
	Reference = basestate.Fresh
	compared  = []*basestate.State{basestate.PreAmendment, basestate.HostDDL}
)

// Live names the database given to Against.
const Live = "live"

// Config says where the stores are built and which declaration is reconciled.
type Config struct {
	// Server is a PostgreSQL server URL: each store is a temporary schema
	// there, dropped afterwards. Empty: SQLite, each store a temporary file.
	Server string
	// SchemaFile is the declaration to reconcile (empty: the built-in one).
	SchemaFile string
	// Logger receives the reconciles' logs (default: discarded).
	Logger *slog.Logger
}

// Comparison is one store compared with the reference (the fresh store).
type Comparison struct {
	Store       string       `json:"store"`
	Against     string       `json:"against"`
	Identical   bool         `json:"identical"`
	Differences []Difference `json:"differences"`
}

// Report is the result of Run or Against.
type Report struct {
	Dialect     dialect.Dialect `json:"dialect"`
	Identical   bool            `json:"identical"`
	Comparisons []Comparison    `json:"comparisons"`
	// Reference is the fresh store's shape, the one every other is held to.
	Reference *Snapshot `json:"reference"`
}

// ErrReconcile is wrapped when a store's reconcile fails: the comparison
// would say nothing about parity.
var ErrReconcile = errors.New("parity: reconcile failed")

// Run builds a fresh, a pre-amendment and a host-DDL store, reconciles each,
// and compares the other two with the fresh one.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	sc, ref, err := reference(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, sc.Close()) }()
	rep = &Report{Dialect: sc.Dialect(), Identical: true, Reference: ref}
	for _, state := range compared {
		got, err := build(ctx, sc, state, cfg)
		if err != nil {
			return nil, err
		}
		rep.add(state.Name, got)
	}
	return rep, nil
}

// Against compares live's owned tables with those of a fresh store reconciled
// from the same declaration. It only reads live. The fresh store is a
// temporary file on SQLite; on PostgreSQL a temporary schema on cfg.Server,
// which must be set (it may be live's own server).
func Against(ctx context.Context, live *sql.DB, cfg Config) (rep *Report, err error) {
	d, err := dialect.Detect(live)
	if err != nil {
		return nil, err
	}
	got, err := Read(ctx, live, cfg.SchemaFile)
	if err != nil {
		return nil, fmt.Errorf("read the live database: %w", err)
	}
	in, err := inspectors.For(d)
	if err != nil {
		return nil, fmt.Errorf("parity: %w", err)
	}
	if !in.referenceOnServer {
		cfg.Server = ""
	} else if cfg.Server == "" {
		return nil, errors.New("parity: a PostgreSQL database is compared with a fresh store built on a PostgreSQL server: Config.Server is empty")
	}
	sc, ref, err := reference(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, sc.Close()) }()
	rep = &Report{Dialect: d, Identical: true, Reference: ref}
	rep.add(Live, got)
	return rep, nil
}

// reference builds the fresh store every comparison is against, in a
// scratch area on cfg.Server that the caller closes.
func reference(ctx context.Context, cfg Config) (*store.Scratch, *Snapshot, error) {
	sc, err := store.NewScratch(ctx, cfg.Server, "parity")
	if err != nil {
		return nil, nil, err
	}
	ref, err := build(ctx, sc, Reference, cfg)
	if err != nil {
		return nil, nil, errors.Join(err, sc.Close())
	}
	return sc, ref, nil
}

func (r *Report) add(store string, got *Snapshot) {
	diffs := Compare(r.Reference, got)
	if diffs == nil {
		diffs = []Difference{}
	}
	r.Comparisons = append(r.Comparisons, Comparison{Store: store, Against: Reference.Name, Identical: len(diffs) == 0, Differences: diffs})
	r.Identical = r.Identical && len(diffs) == 0
}

// build builds one state's store, reconciles it and reads it back.
func build(ctx context.Context, sc *store.Scratch, state *basestate.State, cfg Config) (*Snapshot, error) {
	st, err := state.Build(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("parity: %w", err)
	}
	opts := []reconcile.Option{reconcile.WithLogger(cfg.logger())}
	if cfg.SchemaFile != "" {
		opts = append(opts, reconcile.WithSchemaFile(cfg.SchemaFile))
	}
	if _, err := reconcile.Reconcile(ctx, st.DB, opts...); err != nil {
		return nil, fmt.Errorf("%w on the %s store: %w", ErrReconcile, state.Name, err)
	}
	s, err := Read(ctx, st.DB, cfg.SchemaFile)
	if err != nil {
		return nil, fmt.Errorf("parity: read the %s store: %w", state.Name, err)
	}
	return s, nil
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}
