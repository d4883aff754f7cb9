package capture_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/dbtest"
)

// AC-12 on a row an older writer left terminal with settled_at NULL: a late
// non-terminal frame must not unsettle it, and AC-5 still fills the rest.
func TestRecord_AC12_StoredTerminalStatusFreezesWithoutSettledAt(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		s := newStore(t, db)
		db.Exec(t, `INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, tool_status, observed_at, updated_at)
 VALUES ('legacy-1', 'sess-a', 'task-a', 'unknown', 'toolu_legacy', 'completed', '2026-07-30 01:00:00+00:00', '2026-07-30 01:00:00+00:00')`)
		s.record(t, capture.Frame{SessionID: sessA, TaskID: taskA, ToolCallID: "toolu_legacy", ToolStatus: "in_progress",
			ObservedAt: at(0), Subagent: capture.SubagentTask{Model: "claude-opus-5[1m]"}})
		r := s.one(t, "unknown", "toolu_legacy")
		require.Equal(t, "completed", *r.ToolStatus)
		require.Nil(t, r.SettledAt, "no settlement instant is fabricated")
		require.Equal(t, "claude-opus-5[1m]", *r.Model)
	})
}
