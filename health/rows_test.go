package health_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/keys"
)

func (s *store) key(name, value string) {
	s.t.Helper()
	s.exec(`INSERT INTO kandev_meta (key, value) VALUES (?, ?)`, name, value)
}

// activate writes capture_since (and execution_since, as a fully activated
// installation has both) at k.
func (s *store) activate(k time.Time) {
	s.t.Helper()
	s.key(keys.CaptureSince, instant.Format(k))
	s.key(keys.ExecutionSince, instant.Format(k))
}

// subagentMeta is the metadata the host writes on a subagent tool-call message.
func subagentMeta(toolCallID string) string {
	b, _ := json.Marshal(map[string]any{
		"tool_call_id": toolCallID,
		"status":       "completed",
		"normalized": map[string]any{
			"kind": "subagent_task",
			"subagent_task": map[string]any{
				"status": "completed", "agent_id": "agent-1", "model": "claude-opus-5[1m]", "total_tokens": 1234,
			},
		},
	})
	return string(b)
}

// message inserts a subagent tool-call message for (session, toolCallID) at at,
// with the session's task id.
func (s *store) message(session, toolCallID string, at time.Time) {
	s.t.Helper()
	s.rawMessage(session, "task-"+session, subagentMeta(toolCallID), s.ts(at))
}

// rawMessage inserts a message with exactly the given task_id, metadata and
// created_at bind values (nil → SQL NULL).
func (s *store) rawMessage(session string, taskID, metadata, createdAt any) {
	s.t.Helper()
	s.n++
	s.exec(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		fmt.Sprintf("m%04d", s.n), session, taskID, "turn-1", "…", metadata, createdAt, createdAt)
}

// row inserts a subagent row as a live writer (or the backfill) would.
func (s *store) row(session, execution, toolCallID, source string, at time.Time) {
	s.t.Helper()
	s.rawRow(session, execution, toolCallID, source, s.ts(at))
}

func (s *store) rawRow(session, execution, toolCallID, source string, observedAt any) {
	s.t.Helper()
	s.n++
	s.exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, source, observed_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		fmt.Sprintf("r%04d", s.n), session, "task-"+session, execution, toolCallID, source, observedAt, observedAt)
}

// captured is a message and the row a working writer produces for it.
func (s *store) captured(session, toolCallID string, at time.Time) {
	s.t.Helper()
	s.message(session, toolCallID, at)
	s.row(session, "exec-1", toolCallID, "live", at)
}

func (s *store) ts(t time.Time) any { return instant.RowTime(s.db.Dialect, t) }
