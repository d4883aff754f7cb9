// Package render writes the files of a benchmark report: the Markdown
// tables and summary, results.csv, report.json and one SVG chart per
// measurement and family. It also holds the report itself, as the
// measurements (package bench) write it and these files read it: its
// vocabulary (measurement, family and anchor names) and its types;
// report.json is that value as JSON. It measures nothing.
package render

import (
	"time"

	"github.com/schemastate/schemastate/dialect"
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

// Measurements through a connection pooler (the same database behind
// PgBouncer in transaction mode). Ours is the operation through the pooler,
// the floor the same operation on the same store direct, in the same run:
// the ratio is what the pooler costs.
const (
	PoolerBoot    = "pooler_boot"
	PoolerSteady  = "pooler_steady_state_boot"
	PoolerCapture = "pooler_live_capture"
	// PoolerCaptureConcurrent is PoolerCapture from 8 concurrent writers.
	PoolerCaptureConcurrent = "pooler_live_capture_8_writers"
)

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
