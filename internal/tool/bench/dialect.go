package bench

import (
	"context"
	"database/sql"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlclient"
	"github.com/zclconf/go-cty/cty"

	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
)

// dialectBench is what the benchmark does differently on each dialect
// (dialect_<dialect>.go), chosen once per Run.
type dialectBench struct {
	// The Atlas anchor: what it is, how Atlas evaluates schema.hcl and
	// opens its driver, and the transaction its client opens.
	atlasIs   string
	atlasEval func(src []byte, v any, vars map[string]cty.Value) error
	atlasOpen func(q schema.ExecQuerier) (migrate.Driver, error)
	atlasTx   func(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*sqlclient.Tx, error)

	// rebuild is the rows family's boot measurement as described (name,
	// target, what ours and the floor are), rebuildFloor the floor's
	// hand-written statements, rebuildChecks the reads a rebuild makes
	// besides (a fixed cost; none on a dialect that does not rebuild).
	rebuild render.Measurement
	// rebuildLarge is the rebuild's target from largeRebuild rows on (0:
	// rebuild.Target at every size).
	rebuildLarge  float64
	rebuildFloor  func(legacy []string) ([]string, error)
	rebuildChecks []string
	// handMigration runs a hand-written migration's statements on conn the
	// way a host would, committed.
	handMigration func(ctx context.Context, conn *sql.Conn, stmts []string) error
	// hostAnchor: the host's own recreate-table migration is an anchor.
	hostAnchor bool
	// lockUpTo is the largest table the lock measurement runs at (0: none).
	lockUpTo int
	// tableBytes selects the size of task_session_subagents with its
	// indexes.
	tableBytes string

	// healthFloor is the health floor's statement and its one bind value
	// for the capture_since boundary.
	healthFloor func(bound instant.Boundary) (string, any)

	// series is a FROM item k(i) of the integers from 0 below the one bind
	// parameter; settle leaves a restored store as a running host's would.
	series, settle string

	// floorJSON is how the backfill floor reads a metadata field;
	// floorBegin opens its transaction, as the backfill step's is opened;
	// floorTimesCommit: the step's time includes its own COMMIT (else the
	// reconcile commits every step at once, outside the step's time).
	// checkpoint empties the journal between runs ("": nothing to empty).
	floorJSON        floorJSON
	floorBegin       string
	floorTimesCommit bool
	checkpoint       string

	// fingerprint selects a value that changes with any schema change;
	// floorCatalog is the steady-state floor's catalog read of the owned
	// and host tables, with its arguments.
	fingerprint  string
	floorCatalog func(owned, host []string) (string, []any)
}

// floorJSON is how the backfill floor reads the metadata: get, num and
// flag a text, number and boolean field at the path (a %s the path's parts
// fill, joined by pathSep), from the candidate messages with their document,
// where the subagent ones.
type floorJSON struct {
	get, num, flag, pathSep string
	from, where             string
}

var dialects = perdialect.Of[dialectBench]{Postgres: postgresBench, SQLite: sqliteBench}
