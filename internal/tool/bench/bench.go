// Package bench measures the module's operations as cost curves: each at
// several store sizes, against a floor and against anchors measured in the
// same run on the same data.
//
// A floor is the same algorithm as ours with nothing extra — the same text
// pre-filter, the same lock, the same statements — written independently
// (never our own SQL), so a ratio above 1 is time our implementation adds.
// An anchor is what someone else would run instead: the host's hand-written
// recreate-table migration, Atlas's own plan applied the way `atlas schema
// apply` applies it, our own CLI with its process start, and the physical
// limit of the disk the store lives on.
//
// Two families of stores are generated. The rows family is one small
// reference store whose task_session_subagents table is filled to 1k … 1M
// rows (PostgreSQL also 4M) by replicating its generated rows: the rebuild
// (or constraint swap), the steady-state boot, live capture and memory are
// measured at each size. The messages family is one generated store per
// history size (100k … 2M messages): the backfill, health, the steady-state
// boot and memory at each size.
//
// Every measurement is repeated and its median reported; destructive
// operations start each run from the same restored state. Targets are
// reported as ratios, never asserted.
package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
	"github.com/schemastate/schemastate/internal/tool/gen"
	"github.com/schemastate/schemastate/keys"
)

// Names lists every measurement name, in the order a run takes them.
func Names() []string {
	return []string{render.Rebuild, render.ConstraintSwap, render.SteadyState, render.Capture,
		render.CaptureConcurrent, render.Health, render.Backfill,
		render.PoolerBoot, render.PoolerSteady, render.PoolerCapture, render.PoolerCaptureConcurrent}
}

// CheckOnly returns an error naming every name of only that is not a
// measurement, and the valid names.
func CheckOnly(only []string) error {
	var unknown []string
	for _, n := range only {
		if !slices.Contains(Names(), n) {
			unknown = append(unknown, fmt.Sprintf("%q", n))
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("bench: unknown measurement %s (valid: %s)", strings.Join(unknown, ", "), strings.Join(Names(), ", "))
	}
	return nil
}

// DefaultRows and DefaultMessages are the curves' sizes; PostgreSQL adds
// PostgresExtraRows to the rows family.
var (
	DefaultRows       = []int{1_000, 10_000, 100_000, 300_000, 1_000_000}
	PostgresExtraRows = []int{4_000_000}
	DefaultMessages   = []int{100_000, 600_000, 2_000_000}
)

// bytesPerMessage is the reference store's size per message: 328 MiB hold
// 114,378 messages. It turns a message count into the generator's scale.
const bytesPerMessage = gen.ReferenceMB * (1 << 20) / 114_378

// Config is one benchmark run.
type Config struct {
	// Rows and Messages are the curves' sizes (nil: none of that family).
	Rows     []int
	Messages []int
	// RowsStoreMB is the size of the rows family's store (default 16): its
	// history only supplies the sessions the rows reference.
	RowsStoreMB float64
	Seed        uint64
	// Runs is how many times each measurement is repeated (default 3);
	// LargeRuns applies at a million rows or messages and above (default 1).
	Runs      int
	LargeRuns int
	// Frames is how many frames one capture run records (default 1000).
	Frames int
	// DiskMB is how much the disk-rate probe writes (default 256).
	DiskMB int
	// PoolerDSN, when set (PostgreSQL stores only: the run fails on SQLite),
	// reaches the same database through a
	// connection pooler in transaction mode (PgBouncer): the rows family then
	// also measures the boot, the steady-state boot and live capture through
	// it beside the same direct (pooler.go).
	PoolerDSN string
	// Exe is the schemastate binary timed through the CLI; empty skips
	// those timings.
	Exe string
	// Only, when set, names the measurements to take (see Names); the
	// others are not run.
	Only []string
	// Skipped is copied into the report: what the caller left out of this
	// run, and how to run it.
	Skipped []string
	// Progress, when set, receives one line per phase.
	Progress func(string)
}

func (c *Config) defaults() {
	if c.Runs <= 0 {
		c.Runs = 3
	}
	if c.LargeRuns <= 0 {
		c.LargeRuns = 1
	}
	if c.Frames <= 0 {
		c.Frames = 1000
	}
	if c.DiskMB <= 0 {
		c.DiskMB = 256
	}
	if c.RowsStoreMB <= 0 {
		c.RowsStoreMB = 16
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
}

// wants reports whether a measurement of one of names is to be taken.
func (c *Config) wants(names ...string) bool {
	if len(c.Only) == 0 {
		return true
	}
	for _, n := range names {
		if slices.Contains(c.Only, n) {
			return true
		}
	}
	return false
}

func (c *Config) runsAt(n int) int {
	if n >= 1_000_000 {
		return min(c.Runs, c.LargeRuns)
	}
	return c.Runs
}

// Run generates its stores through stores and takes every measurement.
func Run(ctx context.Context, stores Stores, cfg Config) (*render.Report, error) {
	cfg.defaults()
	if err := CheckOnly(cfg.Only); err != nil {
		return nil, err
	}
	rep := &render.Report{Started: time.Now().UTC(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		Runs: cfg.Runs, LargeRuns: cfg.LargeRuns, Frames: cfg.Frames, Dialect: stores.Dialect(), Skipped: cfg.Skipped}
	legacy, err := declare.PreAmendmentColumns()
	if err != nil {
		return rep, fmt.Errorf("bench: %w", err)
	}
	on, err := dialects.For(stores.Dialect())
	if err != nil {
		return rep, fmt.Errorf("bench: %w", err)
	}
	b := &bench{cfg: cfg, quiet: slog.New(slog.NewTextHandler(io.Discard, nil)), stores: stores, legacyColumns: legacy, on: on}
	if err := b.disk(rep); err != nil {
		return rep, err
	}
	if len(cfg.Rows) > 0 && cfg.wants(render.Rebuild, render.ConstraintSwap, render.SteadyState, render.Capture, render.CaptureConcurrent,
		render.PoolerBoot, render.PoolerSteady, render.PoolerCapture, render.PoolerCaptureConcurrent) {
		if err := b.rowsFamily(ctx, rep); err != nil {
			return rep, err
		}
	}
	for _, n := range cfg.Messages {
		if !cfg.wants(render.Health, render.SteadyState, render.Backfill) {
			break
		}
		if err := b.messagesPoint(ctx, rep, n); err != nil {
			return rep, err
		}
	}
	if err := b.disk(rep); err != nil {
		return rep, err
	}
	return rep, nil
}

type bench struct {
	cfg    Config
	quiet  *slog.Logger
	stores Stores
	// legacyColumns are the pre-amendment table's, which the legacy rows
	// are kept and restored in.
	legacyColumns []string

	// The store being measured.
	db   *sql.DB
	dsn  string // what the CLI's --db takes
	d    dialect.Dialect
	keys keys.Set
	// on is what the benchmark does differently on the stores' dialect.
	on dialectBench
}

func (b *bench) say(format string, args ...any) {
	if b.cfg.Progress != nil {
		b.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// generate replaces the current store by a freshly generated legacy one.
func (b *bench) generate(ctx context.Context, rep *render.Report, family string, scaleMB, population float64) (*gen.Summary, error) {
	db, dsn, err := b.stores.Fresh(ctx)
	if err != nil {
		return nil, err
	}
	b.db, b.dsn, b.d = db, dsn, b.stores.Dialect()
	b.say("generating a %s store (%.0f MiB, legacy state)", b.d, scaleMB)
	sum, err := gen.Generate(ctx, db, gen.Config{ScaleMB: scaleMB, Population: population, Seed: b.cfg.Seed, State: gen.Legacy})
	if err != nil {
		return nil, err
	}
	rep.Stores = append(rep.Stores, render.Store{Family: family, ScaleMB: sum.ScaleMB, Messages: sum.Messages,
		Subagents: sum.SubagentMessages, Bytes: sum.StoreBytes, Generate: sum.Duration})
	b.keys, err = keys.Read(ctx, db, b.d)
	return sum, err
}

var errUnexpected = errors.New("bench: unexpected outcome")
