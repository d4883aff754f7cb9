package capture

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

// Whatever an ingest line holds, ParseFrame returns a frame or a short
// error, never panics; a frame it returns holds only text the databases
// store exactly (identity and descriptive fields: UTF-8, no NUL), and
// written back as a line it parses to the same frame. The seed corpus is in
// testdata/fuzz/FuzzParseFrame.
func FuzzParseFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, line []byte) {
		fr, err := ParseFrame(line)
		if err != nil {
			if n := len(err.Error()); n > maxReason {
				t.Fatalf("ParseFrame(%q): a %d-byte error: %v", line, n, err)
			}
			return
		}
		texts := map[string]string{"session_id": fr.SessionID, "task_id": fr.TaskID, "execution_id": fr.ExecutionID, "tool_call_id": fr.ToolCallID}
		for _, d := range descriptiveText(&fr) {
			texts[d.name] = *d.v
		}
		for name, v := range texts {
			if !utf8.ValidString(v) || containsNUL(v) {
				t.Fatalf("ParseFrame(%q): field %s holds text that cannot be stored: %q", line, name, v)
			}
		}
		again, err := ParseFrame(wireLine(t, fr))
		if err != nil {
			t.Fatalf("ParseFrame(%q) = %+v, which written back does not parse: %v", line, fr, err)
		}
		if !again.ObservedAt.Equal(fr.ObservedAt) {
			t.Fatalf("ParseFrame(%q): observed_at %v reads back as %v", line, fr.ObservedAt, again.ObservedAt)
		}
		fr.dropped, fr.ObservedAt, again.ObservedAt = nil, time.Time{}, time.Time{}
		if !reflect.DeepEqual(fr, again) {
			t.Fatalf("ParseFrame(%q) = %+v, which written back reads as %+v", line, fr, again)
		}
	})
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// wireLine is fr written as an ingest line.
func wireLine(t *testing.T, fr Frame) []byte {
	t.Helper()
	p := fr.Subagent
	task := map[string]any{
		"description": p.Description, "prompt": p.Prompt, "subagent_type": p.SubagentType, "status": p.Status,
		"agent_id": p.AgentID, "model": p.Model, "child_session_id": p.ChildSessionID,
		"duration_ms": p.DurationMs, "total_tokens": p.TotalTokens, "tool_use_count": p.ToolUseCount,
		"result_text": p.ResultText, "is_async": p.IsAsync, "output_file": p.OutputFile, "can_read_output_file": p.CanReadOutputFile,
	}
	w := map[string]any{
		"session_id": fr.SessionID, "task_id": fr.TaskID, "turn_id": fr.TurnID, "execution_id": fr.ExecutionID,
		"tool_call_id": fr.ToolCallID, "parent_tool_call_id": fr.ParentToolCallID, "tool_status": fr.ToolStatus,
		"subagent_task": task,
	}
	if !fr.ObservedAt.IsZero() {
		w["observed_at"] = fr.ObservedAt.Format(time.RFC3339Nano)
	}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
