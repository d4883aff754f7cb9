package capture_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
)

// descriptive maps each stored non-identity text field, by its wire name, to
// its column and to the frame field it is set through.
var descriptive = []struct {
	field, column string
	set           func(*capture.Frame, string)
}{
	{"turn_id", "turn_id", func(f *capture.Frame, v string) { f.TurnID = v }},
	{"parent_tool_call_id", "parent_tool_call_id", func(f *capture.Frame, v string) { f.ParentToolCallID = v }},
	{"tool_status", "tool_status", func(f *capture.Frame, v string) { f.ToolStatus = v }},
	{"subagent_task.description", "description", func(f *capture.Frame, v string) { f.Subagent.Description = v }},
	{"subagent_task.subagent_type", "subagent_type", func(f *capture.Frame, v string) { f.Subagent.SubagentType = v }},
	{"subagent_task.status", "agent_status", func(f *capture.Frame, v string) { f.Subagent.Status = v }},
	{"subagent_task.agent_id", "agent_id", func(f *capture.Frame, v string) { f.Subagent.AgentID = v }},
	{"subagent_task.model", "model", func(f *capture.Frame, v string) { f.Subagent.Model = v }},
	{"subagent_task.child_session_id", "child_session_id", func(f *capture.Frame, v string) { f.Subagent.ChildSessionID = v }},
}

// rawColumns is the column order of store.raw.
var rawColumns = []string{"id", "task_session_id", "task_id", "turn_id", "agent_execution_id", "tool_call_id",
	"parent_tool_call_id", "subagent_type", "description", "agent_id", "child_session_id", "model",
	"agent_status", "tool_status", "is_async", "total_tokens", "tool_use_count", "duration_ms",
	"source", "observed_at", "settled_at", "updated_at"}

// fullFrame sets every stored field to a storable value (tool_status not
// terminal, so settled_at does not depend on it).
func fullFrame(toolCallID string) capture.Frame {
	return frame(toolCallID, at(0), func(f *capture.Frame) {
		f.ParentToolCallID, f.ToolStatus = "toolu_parent", "in_progress"
		f.Subagent = capture.SubagentTask{Description: "Review the diff", SubagentType: "security-reviewer", Status: "running",
			AgentID: "agent-1", Model: "claude-opus-5", ChildSessionID: "ses_child", TotalTokens: 1234, DurationMs: 5678,
			ToolUseCount: intp(3), IsAsync: true, Prompt: "not stored"}
	})
}

// requireOnlyFieldNull requires the row of toolCallID to equal the reference
// row column for column, except column, which is NULL (id, tool_call_id and
// updated_at are the row's own).
func requireOnlyFieldNull(t *testing.T, s *store, ref []sql.NullString, toolCallID, column string) {
	t.Helper()
	got := s.raw(t, sessA, execE, toolCallID)
	for i, c := range rawColumns {
		switch c {
		case "id", "tool_call_id", "updated_at":
		case column:
			require.False(t, got[i].Valid, "%s: %s is stored NULL, got %q", toolCallID, c, got[i].String)
		default:
			require.Equal(t, ref[i], got[i], "%s: %s is kept", toolCallID, c)
		}
	}
}

// droppedWarnings returns the field named by each WARN about a text field
// stored NULL, in order, checking each names the frame and the reason.
func droppedWarnings(t *testing.T, s *store) []string {
	t.Helper()
	var fields []string
	for _, r := range s.log.records(t) {
		if r["level"] != "WARN" {
			continue
		}
		require.Contains(t, r["msg"], "stored NULL", "%v", r)
		require.Equal(t, sessA, r["session_id"])
		require.NotEmpty(t, r["reason"])
		fields = append(fields, r["field"].(string))
	}
	return fields
}

// Issue 22 §2 (AC-1): a NUL, bytes that are not UTF-8 or an encoded lone
// surrogate in a non-identity text field cost the frame that field, never its
// row. Record stores the field NULL — nothing altered, nothing escaped —
// keeps every other field, persists the frame, counts it under
// unstorable_text (a qualifier: attempted = skipped + persisted + failed
// still holds) and logs a WARN naming the field. On both dialects alike.
func TestRecord_AC1_UnstorableDescriptiveFieldStoredNull(t *testing.T) {
	bad := []string{"a\x00b", "a\xffb", "a\xed\xa0\x80b"} // NUL, not UTF-8, an encoded surrogate
	eachStore(t, func(t *testing.T, s *store) {
		s.record(t, fullFrame("tc-ref"))
		ref := s.raw(t, sessA, execE, "tc-ref")
		var want []string
		for i, d := range descriptive {
			f := fullFrame("tc-" + d.column)
			d.set(&f, bad[i%len(bad)])
			require.NoError(t, s.w.Record(context.Background(), f), d.field)
			requireOnlyFieldNull(t, s, ref, "tc-"+d.column, d.column)
			want = append(want, d.field)
		}
		n := int64(len(descriptive))
		require.Equal(t, capture.Counters{Attempted: n + 1, Persisted: n + 1, UnstorableText: n}, s.w.Counters())
		require.Equal(t, want, droppedWarnings(t, s))

		// On a merge the field is not reported (AC-4): what an earlier frame
		// stored is kept, and the frame's other fields still fill forward.
		f := fullFrame("tc-ref")
		f.Subagent.Model, f.Subagent.Description = "m\x00", "Reviewed"
		require.NoError(t, s.w.Record(context.Background(), f))
		r := s.one(t, execE, "tc-ref")
		require.Equal(t, "claude-opus-5", *r.Model)
		require.Equal(t, "Reviewed", *r.Description)
		require.Equal(t, n+1, s.w.Counters().UnstorableText)
	})
}

// Issue 22 §2 on the ingest path: the same rule for a line whose raw JSON
// literal holds a NUL escape, bytes that are not UTF-8 or a lone surrogate
// escape in a non-identity field — read before the decoder turns them into
// U+FFFD, so nothing replaced is ever stored. The line is not malformed: the
// frame is persisted with that field NULL, counted, and the WARN names the
// field and the line.
func TestIngest_AC1_UnstorableDescriptiveFieldStoredNull(t *testing.T) {
	wireNames := map[string]string{"turn_id": "turn_id", "parent_tool_call_id": "parent_tool_call_id", "tool_status": "tool_status"}
	bad := []string{`a\u0000b`, "a\xffb", `a\ud800b`, `a\udfffb`}
	line := func(toolCallID, field, value string) string {
		top := map[string]string{"turn_id": turn1, "parent_tool_call_id": "toolu_parent", "tool_status": "in_progress"}
		sub := map[string]string{"description": "Review the diff", "subagent_type": "security-reviewer", "status": "running",
			"agent_id": "agent-1", "model": "claude-opus-5", "child_session_id": "ses_child"}
		if _, ok := wireNames[field]; ok {
			top[field] = value
		} else if field != "" {
			sub[strings.TrimPrefix(field, "subagent_task.")] = value
		}
		var b strings.Builder
		b.WriteString(`{"session_id":"sess-a","task_id":"task-a","execution_id":"` + execE + `","tool_call_id":"` + toolCallID + `","observed_at":"` + at(0).Format("2006-01-02T15:04:05.999999999Z07:00") + `"`)
		for _, k := range []string{"turn_id", "parent_tool_call_id", "tool_status"} {
			b.WriteString(`,"` + k + `":"` + top[k] + `"`)
		}
		b.WriteString(`,"subagent_task":{"total_tokens":1234,"duration_ms":5678,"tool_use_count":3,"is_async":true,"prompt":"not stored"`)
		for _, k := range []string{"description", "subagent_type", "status", "agent_id", "model", "child_session_id"} {
			b.WriteString(`,"` + k + `":"` + sub[k] + `"`)
		}
		b.WriteString(`}}`)
		return b.String()
	}
	lines := []string{line("tc-ref", "", "")}
	for i, d := range descriptive {
		lines = append(lines, line("tc-"+d.column, d.field, bad[i%len(bad)]))
	}
	eachStore(t, func(t *testing.T, s *store) {
		res, malformed := ingestLines(t, s, lines)
		require.Empty(t, malformed)
		n := int64(len(descriptive))
		require.Equal(t, capture.Counters{Attempted: n + 1, Persisted: n + 1, UnstorableText: n}, res.Counters)
		ref := s.raw(t, sessA, execE, "tc-ref")
		var want []string
		for _, d := range descriptive {
			requireOnlyFieldNull(t, s, ref, "tc-"+d.column, d.column)
			want = append(want, d.field)
		}
		require.Equal(t, want, droppedWarnings(t, s))
		var warnLines []float64
		for _, r := range s.log.records(t) {
			if r["level"] == "WARN" {
				warnLines = append(warnLines, r["line"].(float64))
			}
		}
		require.Equal(t, []float64{2, 3, 4, 5, 6, 7, 8, 9, 10}, warnLines, "each WARN names its input line")
	})
}
