package capture

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	SessionID        string       `json:"session_id"`
	TaskID           string       `json:"task_id"`
	TurnID           string       `json:"turn_id"`
	ExecutionID      string       `json:"execution_id"`
	ToolCallID       string       `json:"tool_call_id"`
	ParentToolCallID string       `json:"parent_tool_call_id"`
	ToolStatus       string       `json:"tool_status"`
	ObservedAt       *string      `json:"observed_at"`
	SubagentTask     *wireSubtask `json:"subagent_task"`
}

type wireSubtask struct {
	Description       string `json:"description"`
	Prompt            string `json:"prompt"`
	SubagentType      string `json:"subagent_type"`
	Status            string `json:"status"`
	AgentID           string `json:"agent_id"`
	Model             string `json:"model"`
	ChildSessionID    string `json:"child_session_id"`
	DurationMs        int64  `json:"duration_ms"`
	TotalTokens       int64  `json:"total_tokens"`
	ToolUseCount      *int   `json:"tool_use_count"`
	ResultText        string `json:"result_text"`
	IsAsync           bool   `json:"is_async"`
	OutputFile        string `json:"output_file"`
	CanReadOutputFile bool   `json:"can_read_output_file"`
}

// ParseFrame reads one ingest line. An absent observed_at leaves
// Frame.ObservedAt zero (the writer then uses its clock).
func ParseFrame(line []byte) (Frame, error) {
	var w wireFrame
	if err := json.Unmarshal(line, &w); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Frame{}, fmt.Errorf("field %s: %s is not %s", te.Field, te.Value, te.Type)
		}
		return Frame{}, fmt.Errorf("not a JSON object: %w", err)
	}
	if w.SubagentTask == nil {
		return Frame{}, errors.New("no subagent_task object")
	}
	f := Frame{
		SessionID: w.SessionID, TaskID: w.TaskID, TurnID: w.TurnID, ExecutionID: w.ExecutionID,
		ToolCallID: w.ToolCallID, ParentToolCallID: w.ParentToolCallID, ToolStatus: w.ToolStatus,
		Subagent: SubagentTask(*w.SubagentTask),
	}
	if w.ObservedAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *w.ObservedAt)
		if err != nil {
			return Frame{}, fmt.Errorf("observed_at %q is not an RFC3339 instant", *w.ObservedAt)
		}
		f.ObservedAt = t
	}
	return f, nil
}

// Malformed is an ingest line that is not a valid frame.
type Malformed struct {
	Line   int
	Reason string
}

// IngestResult is what one Ingest did.
type IngestResult struct {
	Lines     int      `json:"lines"`     // lines read, blank ones included
	Frames    int      `json:"frames"`    // lines that parsed and reached the writer
	Malformed int      `json:"malformed"` // lines that did not parse
	Counters  Counters `json:"counters"`  // this Writer's counters after the run
}

// Ingest reads newline-delimited frames from r and records each in order. A
// line that does not parse is passed to onMalformed and skipped; blank lines
// are ignored. Lines are read one at a time, so input of any size streams.
// The error is a read error or ctx's; a failed write is not an error here —
// it is counted as failed, as on the live path.
func (w *Writer) Ingest(ctx context.Context, r io.Reader, onMalformed func(Malformed)) (IngestResult, error) {
	var res IngestResult
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		if err := ctx.Err(); err != nil {
			res.Counters = w.Counters()
			return res, err
		}
		line, readErr := br.ReadBytes('\n')
		if len(line) > 0 {
			res.Lines++
			if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
				f, err := ParseFrame(trimmed)
				if err != nil {
					res.Malformed++
					if onMalformed != nil {
						onMalformed(Malformed{Line: res.Lines, Reason: err.Error()})
					}
				} else {
					res.Frames++
					_ = w.Record(ctx, f) // counted and logged by Record (AC-27)
				}
			}
		}
		if readErr == io.EOF {
			break
		}
		if readErr != nil {
			res.Counters = w.Counters()
			return res, fmt.Errorf("capture: read frames: %w", readErr)
		}
	}
	res.Counters = w.Counters()
	return res, nil
}
