package bench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"ariga.io/atlas/sql/sqlite"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
)

var sqliteBench = dialectBench{
	atlasIs:   "Atlas Go API as `atlas schema apply` runs it: EvalHCLBytes(schema.hcl), InspectSchema, SchemaDiff, sqlite.OpenTx (foreign keys off, foreign_key_check of the whole database before and after), ApplyChanges, COMMIT",
	atlasEval: sqlite.EvalHCLBytes,
	atlasOpen: sqlite.Open,
	atlasTx:   sqlite.OpenTx,

	rebuild: render.Measurement{Name: render.Rebuild, Target: 1.15,
		OursIs:  "reconcile.Reconcile on the legacy store, in process, wall time (lock, certificate check, declaration, inspect, plan, the rebuild with its row count — its foreign_key_check before and after skipped, as the legacy table keeps its foreign keys and nothing references it — execution_since, COMMIT)",
		FloorIs: "the same create / copy / drop / rename / four CREATE INDEX on one connection, foreign keys off, inside BEGIN IMMEDIATE, timed with its COMMIT"},
	// Where the table's own copy and index builds outweigh the boot around
	// them, the rebuild is held closer to its floor.
	rebuildLarge:  1.05,
	rebuildFloor:  handRebuildSQLite,
	rebuildChecks: []string{"PRAGMA foreign_key_check(task_session_subagents)", "PRAGMA foreign_key_check(task_session_subagents)", "SELECT COUNT(*) FROM task_session_subagents"},
	handMigration: handMigrationSQLite,
	hostAnchor:    true,
	tableBytes:    `SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = 'task_session_subagents')`,

	// The host's text form, rounded up to the microsecond as the key is.
	healthFloor: func(bound instant.Boundary) (string, any) {
		t := bound.Time()
		if tr := t.Truncate(time.Microsecond); !tr.Equal(t) {
			t = tr.Add(time.Microsecond)
		}
		return healthFloorSQLite, instant.RowTime(dialect.SQLite, t)
	},

	series: "(WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?) SELECT i FROM s) k",
	settle: "PRAGMA wal_checkpoint(TRUNCATE)",

	floorJSON: floorJSON{
		get:     "json_extract(m.metadata, '$.%s')",
		num:     "json_extract(m.metadata, '$.%s')",
		flag:    "COALESCE(json_extract(m.metadata, '$.%s'), 0)",
		pathSep: ".",
		from:    "task_session_messages m",
		where: `(instr(m.metadata, 'subagent_task') > 0 OR (instr(m.metadata, '\u00') > 0 AND m.metadata GLOB '*\u00[5-7]*'))
	AND CASE WHEN json_valid(m.metadata) THEN json_extract(m.metadata, '$.normalized.kind') END = 'subagent_task'`,
	},
	floorBegin: "BEGIN IMMEDIATE",
	checkpoint: "PRAGMA wal_checkpoint(TRUNCATE)",

	fingerprint: "PRAGMA schema_version",
	floorCatalog: func(owned, host []string) (string, []any) {
		return fmt.Sprintf(floorCatalogSQLite, marks(len(owned)), marks(len(host))), append(anys(owned), anys(host)...)
	},
}

// handMigrationSQLite: foreign keys off, BEGIN IMMEDIATE (the reconcile's
// lock), the statements, COMMIT.
func handMigrationSQLite(ctx context.Context, conn *sql.Conn, stmts []string) error {
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return err
	}
	defer conn.ExecContext(context.Background(), "PRAGMA foreign_keys = ON") //nolint:errcheck
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	if err := execAll(ctx, conn, stmts); err != nil {
		conn.ExecContext(context.Background(), "ROLLBACK") //nolint:errcheck
		return err
	}
	_, err := conn.ExecContext(ctx, "COMMIT")
	return err
}
