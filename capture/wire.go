package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// The ingest format is newline-delimited JSON, one frame per line:
//
//	{"session_id","task_id","turn_id","execution_id","tool_call_id",
//	 "parent_tool_call_id","tool_status","observed_at" (RFC3339; absent: now),
//	 "subagent_task":{"description","prompt","subagent_type","status",
//	   "agent_id","model","child_session_id","duration_ms","total_tokens",
//	   "tool_use_count","result_text","is_async","output_file",
//	   "can_read_output_file"}}
//
// An absent field is "not reported", as on the wire; "tool_use_count" absent
// (or null) is not the same as 0 (AC-8). Unknown fields are ignored.
type wireFrame struct {
	SessionID        wireText     `json:"session_id"`
	TaskID           wireText     `json:"task_id"`
	TurnID           wireText     `json:"turn_id"`
	ExecutionID      wireText     `json:"execution_id"`
	ToolCallID       wireText     `json:"tool_call_id"`
	ParentToolCallID wireText     `json:"parent_tool_call_id"`
	ToolStatus       wireText     `json:"tool_status"`
	ObservedAt       *string      `json:"observed_at"`
	SubagentTask     *wireSubtask `json:"subagent_task"`
}

type wireSubtask struct {
	Description       wireText `json:"description"`
	Prompt            string   `json:"prompt"`
	SubagentType      wireText `json:"subagent_type"`
	Status            wireText `json:"status"`
	AgentID           wireText `json:"agent_id"`
	Model             wireText `json:"model"`
	ChildSessionID    wireText `json:"child_session_id"`
	DurationMs        int64    `json:"duration_ms"`
	TotalTokens       int64    `json:"total_tokens"`
	ToolUseCount      *int     `json:"tool_use_count"`
	ResultText        string   `json:"result_text"`
	IsAsync           bool     `json:"is_async"`
	OutputFile        string   `json:"output_file"`
	CanReadOutputFile bool     `json:"can_read_output_file"`
}

// wireText is a stored text field as it arrived: its decoded value and, when
// the raw literal holds what the databases cannot store exactly (a NUL,
// bytes that are not UTF-8, a lone surrogate escape), why. Decoding never
// fails on that, so the frame's check can name the field.
type wireText struct {
	s, bad string
	raw    []byte // the literal's body, kept only when bad, for the report
}

func (t *wireText) UnmarshalJSON(raw []byte) error {
	if err := json.Unmarshal(raw, &t.s); err != nil {
		return err // *json.UnmarshalTypeError: the decoder adds the field name
	}
	if len(raw) > 0 && raw[0] == '"' {
		if t.bad = rawTextProblem(raw); t.bad != "" {
			t.raw = raw[1 : len(raw)-1]
		}
	}
	return nil
}

// wireKind names a field's expected JSON type in the frame's own words (the
// decoder names the Go type, which is no part of the format).
func wireKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "of the expected type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "of the expected type"
}

// ParseFrame reads one ingest line. An absent observed_at leaves
// Frame.ObservedAt zero (the writer then uses its clock). An identity field
// (session_id, task_id, execution_id, tool_call_id) holding a NUL, bytes that
// are not UTF-8 or a lone surrogate makes the line malformed
// (ErrUnstorableText), as Record refuses such a frame: the JSON decoder would
// otherwise turn the bytes into U+FFFD and merge distinct ids. Any other
// stored text field holding one is dropped from the frame, and Record stores
// it NULL, counts it and logs it, as it does for a Go string.
func ParseFrame(line []byte) (Frame, error) {
	var w wireFrame
	if err := json.Unmarshal(line, &w); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Frame{}, fmt.Errorf("field %s: %s is not %s", te.Field, clip(te.Value, excerptLen), wireKind(te.Type))
		}
		if te != nil {
			// The line is JSON but not an object; the decoder's message
			// would name this package's Go type.
			return Frame{}, fmt.Errorf("not a JSON object: a JSON %s", te.Value)
		}
		return Frame{}, fmt.Errorf("not a JSON object: %w", err)
	}
	if w.SubagentTask == nil {
		return Frame{}, errors.New("no subagent_task object")
	}
	p := w.SubagentTask
	for _, t := range []struct {
		name string
		v    wireText
	}{
		{"session_id", w.SessionID}, {"task_id", w.TaskID},
		{"execution_id", w.ExecutionID}, {"tool_call_id", w.ToolCallID},
	} {
		if t.v.bad != "" {
			return Frame{}, fmt.Errorf("%w: field %s %s: %s", ErrUnstorableText, t.name, excerpt(string(t.v.raw)), t.v.bad)
		}
	}
	f := Frame{
		SessionID: w.SessionID.s, TaskID: w.TaskID.s, ExecutionID: w.ExecutionID.s, ToolCallID: w.ToolCallID.s,
		Subagent: SubagentTask{
			Prompt:     p.Prompt,
			DurationMs: p.DurationMs, TotalTokens: p.TotalTokens, ToolUseCount: p.ToolUseCount,
			ResultText: p.ResultText, IsAsync: p.IsAsync, OutputFile: p.OutputFile, CanReadOutputFile: p.CanReadOutputFile,
		},
	}
	// A descriptive field the decoder already replaced (U+FFFD for bad bytes
	// and lone surrogates) is dropped here, by the raw literal, and recorded
	// so that Record stores it NULL, counts and logs it (dropUnstorable).
	wire := []wireText{ // in descriptiveText's order
		w.TurnID, w.ParentToolCallID, w.ToolStatus, p.Description, p.SubagentType, p.Status, p.AgentID, p.Model, p.ChildSessionID}
	for i, t := range descriptiveText(&f) {
		if wire[i].bad != "" {
			f.dropped = append(f.dropped, droppedText{field: t.name, why: wire[i].bad, excerpt: excerpt(string(wire[i].raw))})
			continue
		}
		*t.v = wire[i].s
	}
	if w.ObservedAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *w.ObservedAt)
		if err != nil {
			return Frame{}, fmt.Errorf("observed_at %s is not an RFC3339 instant", excerpt(*w.ObservedAt))
		}
		f.ObservedAt = t
	}
	return f, nil
}
