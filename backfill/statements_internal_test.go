package backfill

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

var updateStatements = flag.Bool("update-statements", false, "rewrite testdata/statements.golden from the statements built now")

// The statements Run executes are pinned byte for byte, for both dialects
// and for the default and a small metadata limit: a change to how they are
// built that changes their text fails here, and a deliberate one rewrites
// the file with -update-statements and shows up in its diff.
func TestBackfill_StatementTextIsPinned(t *testing.T) {
	var b strings.Builder
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		for _, maxMeta := range []int64{MaxMetadata, 4096} {
			s := dialects.Must(d)(maxMeta)
			fmt.Fprintf(&b, "==== %s, maxMeta %d\n", d, maxMeta)
			for i, p := range s.prepare {
				fmt.Fprintf(&b, "---- prepare[%d]\n%s\n", i, p)
			}
			fmt.Fprintf(&b, "---- winners\n%s\n---- fast\n%s\n---- max\n%s\n---- insert\n%s\n", s.winners, s.fast, s.max, s.insert)
			for i, c := range s.cleanup {
				fmt.Fprintf(&b, "---- cleanup[%d]\n%s\n", i, c)
			}
		}
	}
	const golden = "testdata/statements.golden"
	if *updateStatements {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, []byte(b.String()), 0o644))
		return
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), b.String(), "the backfill's statements changed: go test -run TestBackfill_StatementTextIsPinned -update-statements ./backfill/")
}

// The backfill's INSERT names exactly the columns, in order, and the
// conflict target that writers.json's "backfill" writer says it does, on
// both dialects, and writes the contract's source and execution sentinel.
// A column added to the statement and not the contract, or the other way
// round, fails here.
func TestBackfill_StatementIsTheContracts(t *testing.T) {
	w := dbtest.BuiltinWriter(t, "backfill")
	require.Equal(t, []string{Source}, w.Column("source").Values)
	require.Equal(t, []string{Unknown}, w.Column("agent_execution_id").Values)
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		stmts := dialects.Must(d)(1 << 20)
		m := regexp.MustCompile(`(?s)INSERT INTO task_session_subagents \((.*?)\)\s*SELECT.*ON CONFLICT \(([^)]*)\) DO NOTHING`).FindStringSubmatch(stmts.insert)
		require.NotNil(t, m, stmts.insert)
		require.Equal(t, w.Insert, contract.SplitList(m[1]), d)
		require.Equal(t, w.Conflict, contract.SplitList(m[2]), d)
		require.Empty(t, w.Update, "DO NOTHING updates no column")
	}
}

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
