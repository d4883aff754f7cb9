package health_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// BenchmarkHealth compares one full health evaluation with the floor — one
// scan of the qualifying-message predicate with the same normalization, the
// least work any correct check does — on a seeded store shaped like the
// reference store: 253 subagent invocations across 38 sessions, the rest
// ordinary message history (SCHEMASTATE_BENCH_MESSAGES, default 20000).
// The evaluate line's x_floor metric is the ratio.
//
//	go test -run '^$' -bench BenchmarkHealth ./health/
func BenchmarkHealth(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("SCHEMASTATE_BENCH_MESSAGES")); err == nil && v > 0 {
		n = v
	}
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			db := dbtest.Open(b, d)
			ctx := context.Background()
			seedBench(b, ctx, db, n)
			bound, err := keys.NewBoundary(keys.Format(k))
			require.NoError(b, err)

			var floorPerOp time.Duration
			b.Run("floor", func(b *testing.B) {
				q := health.FloorQuery(d)
				for i := 0; i < b.N; i++ {
					var c int64
					if err := db.QueryRowContext(ctx, q, bound.Arg()).Scan(&c); err != nil {
						b.Fatal(err)
					}
				}
				floorPerOp = b.Elapsed() / time.Duration(b.N)
			})
			b.Run("evaluate", func(b *testing.B) {
				var r *health.Report
				for i := 0; i < b.N; i++ {
					var err error
					if r, err = health.Evaluate(ctx, db.DB); err != nil {
						b.Fatal(err)
					}
				}
				if floorPerOp > 0 {
					b.ReportMetric(float64(b.Elapsed()/time.Duration(b.N))/float64(floorPerOp), "x_floor")
				}
				if r.Verdict != health.Shortfall || *r.Shortfall != 3 || *r.Excess != 2 || *r.Collisions != 1 {
					b.Fatalf("seeded store evaluated to %+v", countsOf(r))
				}
			})
		})
	}
}

func seedBench(b *testing.B, ctx context.Context, db *dbtest.DB, n int) {
	b.Helper()
	db.Host(b)
	_, err := reconcile.Reconcile(ctx, db.DB, quiet)
	require.NoError(b, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(b, err)
	exec := func(q string, args ...any) {
		if _, err := tx.ExecContext(ctx, db.Q(q), args...); err != nil {
			b.Fatal(err)
		}
	}
	exec(`DELETE FROM kandev_meta`)
	exec(`INSERT INTO kandev_meta (key, value) VALUES (?, ?)`, keys.CaptureSince, keys.Format(k))
	for s := 0; s < 38; s++ {
		exec(`INSERT INTO task_sessions (id, task_id) VALUES (?, ?)`, fmt.Sprintf("s%02d", s), fmt.Sprintf("task-%02d", s))
	}
	msg, err := tx.PrepareContext(ctx, db.Q(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`))
	require.NoError(b, err)
	row, err := tx.PrepareContext(ctx, db.Q(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, source, observed_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`))
	require.NoError(b, err)
	// History spans the activation instant: a quarter before, the rest after.
	at := func(i, of int) any {
		return keys.RowTime(db.Dialect, k.Add(time.Duration(i-of/4)*time.Second))
	}
	content := "Ordinary agent output: reading files, running tests, summarising the diff for the reviewer."
	for i := 0; i < n; i++ {
		sess := fmt.Sprintf("s%02d", i%38)
		meta := fmt.Sprintf(`{"tool_call_id":"toolu_%06d","status":"completed","normalized":{"kind":"tool_execute","tool_execute":{"command":"go test ./...","exit_code":0,"output":"ok  \tgithub.com/x/y\t0.41s"}}}`, i)
		switch i % 10 {
		case 0:
			meta = `{"usage":{"input_tokens":1204,"output_tokens":88},"model":"claude-opus-5[1m]","note":"a \u003cb\u003e tag, escaped by json.Marshal"}`
		case 1:
			meta = "{}"
		}
		if _, err := msg.ExecContext(ctx, fmt.Sprintf("m%06d", i), sess, "task-"+sess[1:], "turn-1", content, meta, at(i, n), at(i, n)); err != nil {
			b.Fatal(err)
		}
	}
	// 253 subagent invocations, spread through the same window, each captured;
	// then three missed writes, two orphan rows and one cross-execution reuse.
	for i := 0; i < 253; i++ {
		sess := fmt.Sprintf("s%02d", i%38)
		tc := fmt.Sprintf("toolu_sub_%03d", i)
		when := at(i*n/253, n)
		if _, err := msg.ExecContext(ctx, fmt.Sprintf("sub%03d", i), sess, "task-"+sess[1:], "turn-1", content, subagentMeta(tc), when, when); err != nil {
			b.Fatal(err)
		}
		if _, err := row.ExecContext(ctx, fmt.Sprintf("row%03d", i), sess, "task-"+sess[1:], "exec-1", tc, "live", when, when); err != nil {
			b.Fatal(err)
		}
	}
	late := keys.RowTime(db.Dialect, k.Add(time.Duration(n)*time.Second))
	for i := 0; i < 3; i++ {
		if _, err := msg.ExecContext(ctx, fmt.Sprintf("missed%d", i), "s01", "task-01", "turn-1", content, subagentMeta(fmt.Sprintf("toolu_missed_%d", i)), late, late); err != nil {
			b.Fatal(err)
		}
	}
	for i, tc := range []string{"toolu_orphan_0", "toolu_orphan_1"} {
		if _, err := row.ExecContext(ctx, fmt.Sprintf("orphan%d", i), "s01", "task-01", "exec-1", tc, "live", late, late); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := row.ExecContext(ctx, "reuse", "s24", "task-24", "exec-2", "toolu_sub_252", "live", late, late); err != nil {
		b.Fatal(err)
	}
	require.NoError(b, tx.Commit())
	if db.Dialect == dialect.Postgres {
		_, err = db.ExecContext(ctx, `ANALYZE task_session_messages; ANALYZE task_session_subagents`)
		require.NoError(b, err)
	}
}
