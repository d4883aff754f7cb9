package parity

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/fixtures"
	"github.com/schemastate/schemastate/internal/store"
	"github.com/schemastate/schemastate/reconcile"

	_ "github.com/schemastate/schemastate/drivers"
)

// The stores Run builds. Each starts from an installed-base state
// (host-context.md) and is reconciled once.
const (
	// Fresh: the host tables only; the reconcile creates every owned table.
	Fresh = "fresh"
	// PreAmendment: the pre-amendment task_session_subagents with rows and
	// second-precision keys (states 3 and 4), and background_agent_log as
	// deployed before transcripts: the SQLite rebuild / PostgreSQL swap path.
	PreAmendment = "pre-amendment"
	// HostDDL: the amended table as the host's own DDL creates it (an inline
	// three-column UNIQUE), reached without this module (state 6).
	HostDDL = "host-ddl"
	// Live names the database given to Against.
	Live = "live"
)

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
	sc, err := store.NewScratch(ctx, cfg.Server, "parity")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, sc.Close()) }()
	ref, err := build(ctx, sc, Fresh, cfg)
	if err != nil {
		return nil, err
	}
	rep = &Report{Dialect: sc.Dialect(), Identical: true, Reference: ref}
	for _, store := range []string{PreAmendment, HostDDL} {
		got, err := build(ctx, sc, store, cfg)
		if err != nil {
			return nil, err
		}
		rep.add(store, got)
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
	if d == dialect.SQLite {
		cfg.Server = ""
	} else if cfg.Server == "" {
		return nil, errors.New("parity: a PostgreSQL database is compared with a fresh store built on a PostgreSQL server: Config.Server is empty")
	}
	sc, err := store.NewScratch(ctx, cfg.Server, "parity")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, sc.Close()) }()
	ref, err := build(ctx, sc, Fresh, cfg)
	if err != nil {
		return nil, err
	}
	rep = &Report{Dialect: d, Identical: true, Reference: ref}
	rep.add(Live, got)
	return rep, nil
}

func (r *Report) add(store string, got *Snapshot) {
	diffs := Compare(r.Reference, got)
	if diffs == nil {
		diffs = []Difference{}
	}
	r.Comparisons = append(r.Comparisons, Comparison{Store: store, Against: Fresh, Identical: len(diffs) == 0, Differences: diffs})
	r.Identical = r.Identical && len(diffs) == 0
}

// build seeds one store from its fixtures, reconciles it and reads it back.
func build(ctx context.Context, sc *store.Scratch, name string, cfg Config) (*Snapshot, error) {
	st, err := sc.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("parity: the %s store: %w", name, err)
	}
	db := st.DB
	if err := Seed(ctx, db, st.Dialect, name); err != nil {
		return nil, err
	}
	opts := []reconcile.Option{reconcile.WithLogger(cfg.logger())}
	if cfg.SchemaFile != "" {
		opts = append(opts, reconcile.WithSchemaFile(cfg.SchemaFile))
	}
	if _, err := reconcile.Reconcile(ctx, db, opts...); err != nil {
		return nil, fmt.Errorf("%w on the %s store: %w", ErrReconcile, name, err)
	}
	s, err := Read(ctx, db, cfg.SchemaFile)
	if err != nil {
		return nil, fmt.Errorf("parity: read the %s store: %w", name, err)
	}
	return s, nil
}

// Seed writes an installed-base state's fixtures into an empty store: the
// host tables (Fresh), plus the pre-amendment table with rows and keys
// (PreAmendment) or the table as the host's own DDL creates it (HostDDL).
func Seed(ctx context.Context, db *sql.DB, d dialect.Dialect, store string) error {
	ds := string(d)
	scripts := []func() (string, error){func() (string, error) { return fixtures.HostFixture(ds) }}
	switch store {
	case Fresh:
	case PreAmendment:
		scripts = append(scripts,
			func() (string, error) { return fixtures.LegacyFixture(ds) },
			func() (string, error) { return fixtures.LifecycleLegacyFixture(ds) },
			fixtures.DemoFixture)
	case HostDDL:
		scripts = append(scripts,
			func() (string, error) { return fixtures.HostAmendedFixture(ds) },
			func() (string, error) { return fixtures.LifecycleLegacyFixture(ds) })
	default:
		return fmt.Errorf("parity: no installed-base state %q", store)
	}
	for _, s := range scripts {
		script, err := s()
		if err == nil {
			err = fixtures.ApplyScript(ctx, db, script)
		}
		if err != nil {
			return fmt.Errorf("parity: seed the %s store: %w", store, err)
		}
	}
	return nil
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}
