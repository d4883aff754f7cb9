// Package bench measures the module's operations on a generated reference
// store against floors measured in the same run on the same data: for each
// operation, the least work any correct implementation would have to do
// (bare catalog queries, a hand-written table copy, a bare INSERT … SELECT,
// plain single-row inserts, one full scan of the message predicate).
//
// Every measurement is repeated and its median reported; destructive
// operations (rebuild, backfill) start each run from the same restored state.
// Targets are reported as met or not met — they are never asserted.
package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/gen"
	"github.com/schemastate/schemastate/keys"
)

// Measurement names.
const (
	SteadyState    = "steady_state_boot"
	Rebuild        = "sqlite_rebuild"
	ConstraintSwap = "postgres_constraint_swap"
	Backfill       = "backfill"
	Capture        = "live_capture"
	Health         = "health_queries"
)

// Config is one benchmark run.
type Config struct {
	// ScaleMB and Population are passed to the generator (gen.Config).
	ScaleMB    float64
	Population float64
	Seed       uint64
	// Runs is how many times each measurement is repeated (default 3).
	Runs int
	// Frames is how many frames one capture run records (default 1000).
	Frames int
	// Progress, when set, receives one line per phase.
	Progress func(string)
}

// Measurement is one operation against its floor.
type Measurement struct {
	Name string `json:"name"`
	// Ours and Floor are medians over the runs.
	Ours  time.Duration `json:"ours_ns"`
	Floor time.Duration `json:"floor_ns"`
	// Ratio is Ours/Floor.
	Ratio float64 `json:"ratio"`
	// Target is the largest acceptable Ratio; zero when there is none.
	Target float64 `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
	// OursRuns and FloorRuns are every run, in order.
	OursRuns  []time.Duration `json:"ours_runs_ns"`
	FloorRuns []time.Duration `json:"floor_runs_ns"`
	// Floor names what the floor does; Detail says where the time goes.
	FloorIs string `json:"floor_is"`
	Detail  string `json:"detail,omitempty"`
	// ZeroDDL (steady state only): no step ran a statement and the catalog
	// fingerprint did not move.
	ZeroDDL *bool `json:"zero_ddl,omitempty"`
}

// Lock is the PostgreSQL constraint swap seen from outside: how long the
// reconcile held ACCESS EXCLUSIVE on the table (polled from pg_locks on
// another connection), and the worst latency a reader saw meanwhile.
type Lock struct {
	// HeldMax is the longest hold over the runs; HeldMedian the median.
	HeldMedian time.Duration `json:"held_median_ns"`
	HeldMax    time.Duration `json:"held_max_ns"`
	// ReaderWorst is the worst single SELECT latency over all runs;
	// ReaderBaseline the worst over the same number of SELECTs with no
	// reconcile running.
	ReaderWorst    time.Duration `json:"reader_worst_ns"`
	ReaderBaseline time.Duration `json:"reader_baseline_ns"`
	ReaderQueries  int           `json:"reader_queries"`
	// PollInterval is the mean time between two pg_locks samples: the
	// resolution of HeldMedian/HeldMax.
	PollInterval time.Duration `json:"poll_interval_ns"`
}

// Memory is the reconcile's footprint on a predating store (table created,
// full backfill): the Go heap's peak, sampled, and the process's peak RSS
// (Linux VmHWM, reset before the reconcile; zero where unavailable).
type Memory struct {
	HeapInusePeak uint64 `json:"heap_inuse_peak_bytes"`
	RSSBefore     uint64 `json:"rss_before_bytes"`
	RSSPeak       uint64 `json:"rss_peak_bytes"`
}

// Report is one benchmark run on one dialect at one scale.
type Report struct {
	Dialect      dialect.Dialect `json:"dialect"`
	ScaleMB      float64         `json:"scale_mb"`
	Subagents    int             `json:"subagents"`
	Messages     int             `json:"messages"`
	StoreBytes   int64           `json:"store_bytes"`
	Generate     time.Duration   `json:"generate_ns"`
	Runs         int             `json:"runs"`
	Measurements []Measurement   `json:"measurements"`
	Lock         *Lock           `json:"postgres_lock,omitempty"`
	Memory       Memory          `json:"memory"`
}

// Measurement returns the named measurement, or nil.
func (r *Report) Measurement(name string) *Measurement {
	for i := range r.Measurements {
		if r.Measurements[i].Name == name {
			return &r.Measurements[i]
		}
	}
	return nil
}

// Run generates a legacy-state store into db (which must be empty) and takes
// every measurement on it. The store is left behind, reconciled.
func Run(ctx context.Context, db *sql.DB, cfg Config) (*Report, error) {
	if cfg.Runs <= 0 {
		cfg.Runs = 3
	}
	if cfg.Frames <= 0 {
		cfg.Frames = 1000
	}
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, err
	}
	b := &bench{db: db, d: d, cfg: cfg, quiet: slog.New(slog.NewTextHandler(io.Discard, nil))}
	b.say("generating a %s store (%.0f MiB, legacy state)", d, cfg.ScaleMB)
	sum, err := gen.Generate(ctx, db, gen.Config{ScaleMB: cfg.ScaleMB, Population: cfg.Population, Seed: cfg.Seed, State: gen.Legacy})
	if err != nil {
		return nil, err
	}
	rep := &Report{Dialect: d, ScaleMB: sum.ScaleMB, Subagents: sum.SubagentMessages, Messages: sum.Messages,
		StoreBytes: sum.StoreBytes, Generate: sum.Duration, Runs: cfg.Runs}
	if err := b.snapshot(ctx); err != nil {
		return nil, err
	}
	defer b.dropSnapshot()

	// The order matters only for which state each step starts from:
	// rebuild/swap ends reconciled from legacy (capture_since mid-history),
	// which health, steady state and capture then use; the backfill runs
	// last because it leaves a store activated now.
	steps := []func(context.Context, *Report) error{b.rebuild, b.health, b.steady, b.capture, b.backfill, b.memory}
	for _, step := range steps {
		if err := step(ctx, rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

type bench struct {
	db    *sql.DB
	d     dialect.Dialect
	cfg   Config
	quiet *slog.Logger
	keys  keys.Set
}

func (b *bench) say(format string, args ...any) {
	if b.cfg.Progress != nil {
		b.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// measure runs ours and floor cfg.Runs times each, alternating, and records
// the medians. Either may return a duration other than its wall time (a
// step's own Duration).
func (b *bench) measure(name, floorIs string, target float64, ours, floor func(run int) (time.Duration, error)) (Measurement, error) {
	m := Measurement{Name: name, FloorIs: floorIs, Target: target}
	for i := 0; i < b.cfg.Runs; i++ {
		b.say("%s: run %d/%d", name, i+1, b.cfg.Runs)
		f, err := floor(i)
		if err != nil {
			return m, fmt.Errorf("%s floor: %w", name, err)
		}
		o, err := ours(i)
		if err != nil {
			return m, fmt.Errorf("%s: %w", name, err)
		}
		m.OursRuns = append(m.OursRuns, o)
		m.FloorRuns = append(m.FloorRuns, f)
	}
	m.Ours, m.Floor = median(m.OursRuns), median(m.FloorRuns)
	if m.Floor > 0 {
		m.Ratio = float64(m.Ours) / float64(m.Floor)
	}
	if target > 0 {
		met := m.Ratio <= target
		m.Met = &met
	}
	return m, nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

var errUnexpected = errors.New("bench: unexpected outcome")
