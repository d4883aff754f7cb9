package capture_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// AC-13: reads order by observed_at, then tool_call_id, then
// agent_execution_id — the execution tiebreak decides two rows that share
// both an observation time and a reused tool_call_id.
func TestList_AC13_OrderWithExecutionTiebreak(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		exec := func(e string) func(*capture.Frame) { return func(f *capture.Frame) { f.ExecutionID = e } }
		// Recorded in an order that matches none of the sort keys.
		s.record(t,
			frame("toolu_b", at(time.Second), exec(execE)),
			frame("toolu_z", at(0), exec(execL)),
			frame("toolu_b", at(time.Second), exec(execL)),
			frame("toolu_a", at(time.Second), exec(execL)),
			frame("toolu_b", at(time.Second), exec("")),
			frame("toolu_other_turn", at(-time.Second), func(f *capture.Frame) { f.TurnID = turn2 }),
		)
		type key struct{ tc, ex string }
		var got []key
		for _, r := range s.rows(t, sessA) {
			got = append(got, key{r.ToolCallID, r.AgentExecutionID})
		}
		require.Equal(t, []key{
			{"toolu_other_turn", execE},
			{"toolu_z", execL},
			{"toolu_a", execL},
			{"toolu_b", execE}, // 0f8f… < 7c9e… < unknown
			{"toolu_b", execL},
			{"toolu_b", capture.UnknownExecution},
		}, got)

		byTurn, err := capture.ListByTurn(context.Background(), s.DB.DB, s.Dialect, turn2)
		require.NoError(t, err)
		require.Len(t, byTurn, 1)
		require.Equal(t, "toolu_other_turn", byTurn[0].ToolCallID)
		empty, err := capture.ListBySession(context.Background(), s.DB.DB, s.Dialect, sessB)
		require.NoError(t, err)
		require.Empty(t, empty)
	})
}

// AC-16: deleting the parent session cascades to its rows, and only its rows.
func TestRecord_AC16_SessionDeleteCascades(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t, frame("toolu_1", at(0)), frame("toolu_2", at(0)),
			frame("toolu_1", at(0), func(f *capture.Frame) { f.SessionID, f.TaskID = sessB, taskB }))
		_, err := s.DB.DB.Exec(s.Q(`DELETE FROM task_sessions WHERE id = ?`), sessA)
		require.NoError(t, err)
		require.Equal(t, 0, s.count(t, "task_session_id = ?", sessA))
		require.Equal(t, 1, s.count(t, "task_session_id = ?", sessB))
	})
}

// Failure modes, "A turn row is deleted": the subagent rows of that turn
// survive with their turn_id, because turn_id carries no foreign key — the
// measurement outlives the turn row (spec: turn_id has no FK, by design).
func TestRecord_FailureMode_TurnDeletedRowsSurvive(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		ts := s.ts(at(0))
		_, err := s.DB.DB.Exec(s.Q(`INSERT INTO task_session_turns (id, task_session_id, task_id, started_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`),
			turn1, sessA, taskA, ts, ts, ts)
		require.NoError(t, err)
		s.record(t, frame("toolu_t1", at(0)), frame("toolu_t2", at(1), func(f *capture.Frame) { f.ToolStatus = "completed" }))
		before := s.rows(t, sessA)
		require.Len(t, before, 2)

		res, err := s.DB.DB.Exec(s.Q(`DELETE FROM task_session_turns WHERE id = ?`), turn1)
		require.NoError(t, err)
		n, err := res.RowsAffected()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the turn row was there and is gone")

		require.Equal(t, before, s.rows(t, sessA), "every subagent row of the deleted turn is intact, turn_id included")
		require.Equal(t, 2, s.count(t, "turn_id = ?", turn1))
	})
}

// AC-32: a late frame from an earlier execution, arriving after a later
// execution reused its tool_call_id, updates only its own row; the later
// execution's row is byte-identical in every column.
func TestRecord_AC32_LateFrameFromEarlierExecutionLeavesLaterRowIntact(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		const tc = "call_reused"
		earlier := func(f *capture.Frame) { f.ExecutionID = execE }
		later := func(f *capture.Frame) { f.ExecutionID = execL; f.TurnID = turn2 }
		s.record(t,
			frame(tc, at(0), earlier, func(f *capture.Frame) { f.ToolStatus = "in_progress" }),
			frame(tc, at(time.Minute), later, func(f *capture.Frame) {
				f.ToolStatus = "in_progress"
				f.Subagent = capture.SubagentTask{Description: "later run", Model: "model-L"}
			}),
			frame(tc, at(2*time.Minute), later, func(f *capture.Frame) {
				f.ToolStatus = "completed"
				f.Subagent = capture.SubagentTask{Status: "completed", TotalTokens: 4242, DurationMs: 1234, ToolUseCount: intp(7)}
			}))
		before := s.raw(t, sessA, execL, tc)

		// The earlier execution's late frames: a terminal one carrying
		// different metrics, then a non-terminal one.
		s.record(t,
			frame(tc, at(3*time.Minute), earlier, func(f *capture.Frame) {
				f.ToolStatus = "failed"
				f.Subagent = capture.SubagentTask{Status: "failed", Model: "model-E", Description: "earlier run",
					TotalTokens: 1, DurationMs: 2, ToolUseCount: intp(3), IsAsync: true}
			}),
			frame(tc, at(4*time.Minute), earlier, func(f *capture.Frame) { f.ToolStatus = "in_progress"; f.TurnID = turn2 }))

		require.Equal(t, before, s.raw(t, sessA, execL, tc), "the later execution's row is unchanged in every column")
		require.Equal(t, 2, s.count(t, "tool_call_id = ?", tc))
		e := s.one(t, execE, tc)
		require.Equal(t, "failed", *e.ToolStatus)
		require.Equal(t, "model-E", *e.Model)
		require.Equal(t, int64(1), *e.TotalTokens)
		require.Equal(t, turn1, *e.TurnID)
		require.True(t, e.SettledAt.Equal(at(3*time.Minute)))
	})
}

// The Writer keeps its upsert prepared. A Writer made before the table
// exists sends each frame as a plain statement (which fails, as it always
// did) and prepares once the table is there; a statement prepared before a
// schema change to the table keeps working after it; Close releases the
// statement and a later Record prepares it again.
func TestRecord_PreparedUpsertFollowsTheTable(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		db.Host(t)
		s := withSessions(t, db)
		require.Error(t, s.w.Record(ctx, frame("toolu_before", at(0))), "no table yet")
		require.Equal(t, int64(1), s.w.Counters().Failed)

		reconcileQuietly(t, db)
		s.record(t, frame("toolu_1", at(time.Second)))

		// A schema change after the statement was prepared: an operator's
		// column and index. The statement is prepared again underneath.
		_, err := db.DB.ExecContext(ctx, `ALTER TABLE task_session_subagents ADD COLUMN operator_note TEXT`)
		require.NoError(t, err)
		_, err = db.DB.ExecContext(ctx, `CREATE INDEX operator_idx ON task_session_subagents (description)`)
		require.NoError(t, err)
		s.record(t, frame("toolu_2", at(2*time.Second)), frame("toolu_1", at(3*time.Second), func(f *capture.Frame) { f.ToolStatus = "completed" }))

		require.NoError(t, s.w.Close())
		require.NoError(t, s.w.Close(), "a second Close is a no-op")
		s.record(t, frame("toolu_3", at(4*time.Second)))

		require.Equal(t, 3, s.count(t, "task_session_id = ?", sessA))
		require.NotNil(t, s.one(t, execE, "toolu_1").SettledAt)
		c := s.w.Counters()
		require.Equal(t, int64(4), c.Persisted)
		require.Equal(t, int64(1), c.Failed)
	})
}
