package capture_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// BenchmarkRecord measures frames/s through Writer.Record per dialect, on the
// two paths a frame takes — creating a row, and merging onto one (a subagent
// is typically seen on several frames) — against a floor: a plain single-row
// INSERT of the same 22 columns over the same connection settings. The ratio
// record/floor is the cost of the conflict clause and the normalization.
//
//	go test -run '^$' -bench BenchmarkRecord -benchtime 3s ./capture/
func BenchmarkRecord(b *testing.B) {
	for _, d := range []dialect.Dialect{dialect.SQLite, dialect.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			b.Run("record_new_row", func(b *testing.B) {
				w, _ := benchStore(b, d)
				f := benchFrame()
				for i := 0; b.Loop(); i++ {
					f.ToolCallID = fmt.Sprintf("toolu_%d", i)
					if err := w.Record(context.Background(), f); err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b)
			})
			b.Run("record_merge", func(b *testing.B) {
				w, _ := benchStore(b, d)
				f := benchFrame()
				for i := 0; b.Loop(); i++ {
					f.ToolCallID = fmt.Sprintf("toolu_%d", i%8) // an 8-way fan-out, seen again and again
					if err := w.Record(context.Background(), f); err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b)
			})
			b.Run("floor_plain_insert", func(b *testing.B) {
				_, db := benchStore(b, d)
				stmt, now := floorInsert(b, db)
				defer stmt.Close()
				for i := 0; b.Loop(); i++ {
					// A random id of the kind Record writes, so the floor
					// inserts into the primary key at random places too.
					_, err := stmt.ExecContext(context.Background(), uuid.NewString(), sessA, taskA, turn1, execE,
						fmt.Sprintf("toolu_%d", i), nil, "reviewer", "review the diff", "agent-1", nil, "claude-opus-5[1m]",
						"completed", "completed", 1, int64(27000), int64(12), int64(93000), "live", now, now, now)
					if err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b)
			})
		})
	}
}

func benchStore(b *testing.B, d dialect.Dialect) (*capture.Writer, *dbtest.DB) {
	b.Helper()
	db := dbtest.Open(b, d)
	declared(b, db)
	_, err := db.DB.Exec(db.Q(`INSERT INTO task_sessions (id, task_id) VALUES (?, ?)`), sessA, taskA)
	require.NoError(b, err)
	w, err := capture.NewWriter(context.Background(), db.DB, d)
	require.NoError(b, err)
	return w, db
}

func benchFrame() capture.Frame {
	return capture.Frame{SessionID: sessA, TaskID: taskA, TurnID: turn1, ExecutionID: execE, ToolStatus: "completed",
		Subagent: capture.SubagentTask{Description: "review the diff", SubagentType: "reviewer", Status: "completed",
			AgentID: "agent-1", Model: "claude-opus-5[1m]", TotalTokens: 27000, ToolUseCount: intp(12), DurationMs: 93000}}
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
}
