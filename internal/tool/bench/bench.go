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
	"github.com/schemastate/schemastate/internal/tool/gen"
	"github.com/schemastate/schemastate/keys"
)

// Measurement names.
const (
	SteadyState    = "steady_state_boot"
	Rebuild        = "sqlite_rebuild"
	ConstraintSwap = "postgres_constraint_swap"
	Backfill       = "backfill"
	Capture        = "live_capture"
	// CaptureConcurrent is live capture from 8 concurrent writers.
	CaptureConcurrent = "live_capture_8_writers"
	Health            = "health_queries"
)

// Names lists every measurement name, in the order a run takes them.
func Names() []string {
	return []string{Rebuild, ConstraintSwap, SteadyState, Capture, CaptureConcurrent, Health, Backfill,
		PoolerBoot, PoolerSteady, PoolerCapture, PoolerCaptureConcurrent}
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

// Families: what a measurement's N counts.
const (
	FamilyRows     = "rows"     // task_session_subagents rows
	FamilyMessages = "messages" // task_session_messages rows
)

// Anchor names.
const (
	AnchorCLI      = "ours through the CLI"
	AnchorHost     = "host's recreate-table migration"
	AnchorAtlas    = "atlas schema apply (Go API)"
	AnchorPhysical = "physical limit"
)

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

// Anchor is one alternative measured next to ours and the floor.
type Anchor struct {
	Name string `json:"name"`
	// Is says what exactly was run.
	Is     string          `json:"is"`
	Median time.Duration   `json:"median_ns"`
	Runs   []time.Duration `json:"runs_ns,omitempty"`
	// Err is set when the anchor could not complete (it is then not retried).
	Err string `json:"error,omitempty"`
}

// Cost is a fixed cost broken out of ours, timed on its own.
type Cost struct {
	Name   string        `json:"name"`
	Median time.Duration `json:"median_ns"`
}

// Measurement is one operation at one store size.
type Measurement struct {
	Name   string `json:"name"`
	Family string `json:"family"`
	// N is the size on the curve's x axis: Rows or Messages, by Family.
	N        int `json:"n"`
	Rows     int `json:"rows"`
	Messages int `json:"messages"`
	// Ours and Floor are medians over the runs; Ratio is Ours/Floor.
	Ours      time.Duration   `json:"ours_ns"`
	Floor     time.Duration   `json:"floor_ns"`
	Ratio     float64         `json:"ratio"`
	OursRuns  []time.Duration `json:"ours_runs_ns"`
	FloorRuns []time.Duration `json:"floor_runs_ns"`
	// Target is the largest acceptable Ratio (zero when there is none);
	// Met is the comparison, reported and never asserted.
	Target float64 `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
	// Ours and FloorIs say what each side runs; Detail where the time goes.
	OursIs  string   `json:"ours_is"`
	FloorIs string   `json:"floor_is"`
	Anchors []Anchor `json:"anchors,omitempty"`
	Fixed   []Cost   `json:"fixed_costs,omitempty"`
	Detail  string   `json:"detail,omitempty"`
	// Bytes is what the operation wrote (the rebuilt table and its indexes).
	Bytes int64 `json:"bytes,omitempty"`
	// Count is the number of frames (capture): rates are Count/duration.
	Count int `json:"count,omitempty"`
	// ZeroDDL (steady state only): no step ran a statement and the catalog
	// fingerprint did not move.
	ZeroDDL *bool `json:"zero_ddl,omitempty"`
}

// Anchor returns the named anchor, or nil.
func (m *Measurement) Anchor(name string) *Anchor {
	for i := range m.Anchors {
		if m.Anchors[i].Name == name {
			return &m.Anchors[i]
		}
	}
	return nil
}

// Memory is the footprint of the first timed reconcile at one store size:
// the Go heap's peak (sampled through runtime/metrics, which does not stop
// the world) and the process's peak RSS over that reconcile (Linux VmHWM,
// reset before it; zero where unavailable).
type Memory struct {
	Family        string `json:"family"`
	N             int    `json:"n"`
	Operation     string `json:"operation"`
	HeapPeak      uint64 `json:"heap_peak_bytes"`
	RSSBefore     uint64 `json:"rss_before_bytes"`
	RSSPeak       uint64 `json:"rss_peak_bytes"`
	SamplesPeriod string `json:"sample_period"`
}

// Lock is the PostgreSQL constraint swap seen from outside, in one extra
// untimed reconcile: how long ACCESS EXCLUSIVE was seen on the table (polled
// from pg_locks on another connection) and a concurrent reader's worst wait.
type Lock struct {
	Rows           int           `json:"rows"`
	Held           time.Duration `json:"held_ns"`
	ReaderWorst    time.Duration `json:"reader_worst_ns"`
	ReaderBaseline time.Duration `json:"reader_baseline_ns"`
	ReaderQueries  int           `json:"reader_queries"`
	PollInterval   time.Duration `json:"poll_interval_ns"`
	// Err is the extra reconcile's failure, when a step of it failed: a swap
	// that could not get its lock within its budget, under the reader, is
	// reported, not a failure of the run (the boot would go on and retry).
	Err string `json:"error,omitempty"`
}

// Store is one generated store.
type Store struct {
	Family    string        `json:"family"`
	ScaleMB   float64       `json:"scale_mb"`
	Messages  int           `json:"messages"`
	Subagents int           `json:"subagent_messages"`
	Bytes     int64         `json:"store_bytes"`
	Generate  time.Duration `json:"generate_ns"`
}

// Disk is the sequential write rate of the disk the store lives on, measured
// in the same run: Bytes written in 1 MiB blocks and fsynced, over Duration.
type Disk struct {
	Path        string        `json:"path"`
	Bytes       int64         `json:"bytes"`
	Duration    time.Duration `json:"duration_ns"`
	BytesPerSec float64       `json:"bytes_per_sec"`
}

// Report is one benchmark run on one dialect.
type Report struct {
	Dialect      dialect.Dialect `json:"dialect"`
	Started      time.Time       `json:"started"`
	GoVersion    string          `json:"go_version"`
	CPUs         int             `json:"cpus"`
	Runs         int             `json:"runs"`
	LargeRuns    int             `json:"large_runs"`
	Frames       int             `json:"frames"`
	Disk         []Disk          `json:"disk"`
	Stores       []Store         `json:"stores"`
	Measurements []Measurement   `json:"measurements"`
	Memory       []Memory        `json:"memory"`
	Locks        []Lock          `json:"postgres_locks,omitempty"`
	// Skipped names what this run did not measure, and why.
	Skipped []string `json:"skipped,omitempty"`
}

// Find returns the named measurement at size n of family, or nil.
func (r *Report) Find(name, family string, n int) *Measurement {
	for i := range r.Measurements {
		m := &r.Measurements[i]
		if m.Name == name && m.Family == family && m.N == n {
			return m
		}
	}
	return nil
}

// Run generates its stores through stores and takes every measurement.
func Run(ctx context.Context, stores Stores, cfg Config) (*Report, error) {
	cfg.defaults()
	if err := CheckOnly(cfg.Only); err != nil {
		return nil, err
	}
	rep := &Report{Started: time.Now().UTC(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
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
	if len(cfg.Rows) > 0 && cfg.wants(Rebuild, ConstraintSwap, SteadyState, Capture, CaptureConcurrent,
		PoolerBoot, PoolerSteady, PoolerCapture, PoolerCaptureConcurrent) {
		if err := b.rowsFamily(ctx, rep); err != nil {
			return rep, err
		}
	}
	for _, n := range cfg.Messages {
		if !cfg.wants(Health, SteadyState, Backfill) {
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
func (b *bench) generate(ctx context.Context, rep *Report, family string, scaleMB, population float64) (*gen.Summary, error) {
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
	rep.Stores = append(rep.Stores, Store{Family: family, ScaleMB: sum.ScaleMB, Messages: sum.Messages,
		Subagents: sum.SubagentMessages, Bytes: sum.StoreBytes, Generate: sum.Duration})
	b.keys, err = keys.Read(ctx, db, b.d)
	return sum, err
}

var errUnexpected = errors.New("bench: unexpected outcome")
