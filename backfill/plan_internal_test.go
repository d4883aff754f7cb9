package backfill

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// On PostgreSQL the backfill's one scan of the messages can run in parallel
// workers, as the floor's does (docs/benchmarks.md): the candidate test is
// priced as the rare match it is, so the planner does not charge the
// parallel scan for handing a third of the table to its leader. Setup cost
// and the table-size threshold are zeroed so a small table shows the plan
// a large one gets; the per-tuple transfer cost keeps its default, which is
// what decides between the two plans.
func TestBackfill_PostgresScanCanRunInParallel(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres)
	db.Host(t)
	ctx := context.Background()
	_, err := db.ExecContext(ctx, `INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1')`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
		SELECT 'm' || n, 's1', 'k1', 't', 'x',
			CASE WHEN n % 100 = 0 THEN '{"tool_call_id":"toolu_' || n || '","normalized":{"kind":"subagent_task","subagent_task":{}}}'
			ELSE '{"type":"message","text":"an ordinary message of ordinary length, written by the agent"}' END,
			TIMESTAMP '2026-07-30 01:39:37', TIMESTAMP '2026-07-30 01:39:37'
		FROM generate_series(1, 20000) AS g(n)`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `ANALYZE task_session_messages`)
	require.NoError(t, err)

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	for _, s := range []string{"SET LOCAL parallel_setup_cost = 0", "SET LOCAL min_parallel_table_scan_size = 0", "SET LOCAL max_parallel_workers_per_gather = 2"} {
		_, err := tx.ExecContext(ctx, s)
		require.NoError(t, err)
	}
	st := postgresStatements(MaxMetadata)
	for name, stmt := range map[string]string{"the plain cast's scan": st.fast} {
		plan := dbtest.StringsFrom(t, tx, "EXPLAIN "+stmt)
		require.Contains(t, strings.Join(plan, "\n"), "Parallel Seq Scan on task_session_messages", "%s:\n%s", name, strings.Join(plan, "\n"))
	}
}
