package bench

import (
	"context"
	"database/sql"
	"strings"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/sqlclient"

	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/tool/bench/render"
)

var postgresBench = dialectBench{
	atlasIs:   "Atlas Go API as `atlas schema apply` runs it: EvalHCLBytes(schema.hcl), InspectSchema, SchemaDiff, BeginTx, ApplyChanges, COMMIT",
	atlasEval: postgres.EvalHCLBytes,
	atlasOpen: postgres.Open,
	atlasTx: func(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*sqlclient.Tx, error) {
		tx, err := db.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		return &sqlclient.Tx{Tx: tx}, nil
	},

	rebuild: render.Measurement{Name: render.ConstraintSwap,
		OursIs:  "reconcile.Reconcile on the legacy store, in process, wall time (lock, certificate check, declaration, inspect, plan, the shape and widen steps — one transaction under the online threshold (reconcile.WithOnlineAbove), the online phases at and above it: catalog-only exclusive locks, CONCURRENTLY index build, expand/contract widening — and execution_since)",
		FloorIs: "one hand-written ALTER TABLE to the declared shape (drop constraint, widen the three metrics to bigint, add column, add constraint) in one transaction, timed with its COMMIT"},
	rebuildFloor:  func([]string) ([]string, error) { return handSwapPostgres, nil },
	handMigration: handMigrationPostgres,
	lockUpTo:      1_000_000,
	tableBytes:    `SELECT pg_total_relation_size('task_session_subagents')`,

	healthFloor: func(bound instant.Boundary) (string, any) { return healthFloorPostgres, bound.Arg() },

	series: "generate_series(0, $1::int - 1) AS k(i)",
	settle: "ANALYZE task_session_subagents",

	floorJSON: floorJSON{
		get:     "j #>> '{%s}'",
		num:     "(j #>> '{%s}')::bigint",
		flag:    "CASE WHEN j #>> '{%s}' = 'true' THEN 1 ELSE 0 END",
		pathSep: ",",
		from: `(SELECT m.*, CASE WHEN m.metadata IS NULL OR m.metadata IN ('', 'null') THEN NULL ELSE m.metadata::jsonb END AS j FROM task_session_messages m
	WHERE strpos(m.metadata, 'subagent_task') > 0 OR (strpos(m.metadata, '\u00') > 0 AND m.metadata ~ '\\u00[5-7]')) m`,
		where: "j #>> '{normalized,kind}' = 'subagent_task'",
	},
	floorBegin:       "BEGIN",
	floorTimesCommit: true,

	fingerprint: `SELECT string_agg(c.oid::text || ':' || c.xmin::text, ',' ORDER BY c.oid)
FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace`,
	floorCatalog: func(owned, host []string) (string, []any) {
		return floorCatalogPostgres, []any{strings.Join(owned, ","), strings.Join(host, ",")}
	},
}

// handMigrationPostgres: the statements in one transaction.
func handMigrationPostgres(ctx context.Context, conn *sql.Conn, stmts []string) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := execAll(ctx, tx, stmts); err != nil {
		tx.Rollback() //nolint:errcheck
		return err
	}
	return tx.Commit()
}
