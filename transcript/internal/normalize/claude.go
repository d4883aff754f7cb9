package normalize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// claudeNormalizer reads Claude Code's stream-json output:
//
//	{"type":"system","subtype":"init","model":…}
//	{"type":"user","message":{"content":[{"type":"text",…}|{"type":"tool_result","tool_use_id":…,"is_error":…}]}}
//	{"type":"assistant","message":{"content":[{"type":"text",…}|{"type":"tool_use","id":…,"name":…,"input":…}|{"type":"thinking",…}]}}
//	{"type":"stream_event",…}   partial deltas (--include-partial-messages); the complete assistant record follows
//	{"type":"result","subtype":"success"|"error_max_turns"|"error_during_execution"|…,"is_error":…,"result":…,
//	 "structured_output":…,"terminal_reason":…,"api_error_status":…}
//
// The model is system/init's "model", else the first model an assistant
// record of the child's own reports (never Claude Code's "<synthetic>").
//
// The final response is the result record's: when the child's own last
// event is not already an assistant message saying it — a structured-output
// run (--json-schema) ends with a StructuredOutput tool call and no text —
// it is appended as the child's last assistant message (result.result, or
// structured_output as JSON when result is empty).
//
// A result with is_error set is a failure whatever its subtype: Claude Code
// reports an API error that ended the run as subtype "success", is_error
// true, terminal_reason "api_error" and api_error_status (429, 529, …); it
// is recorded as "API error (status N): <result>".
//
// A user or assistant record whose parent_tool_use_id is set is not the
// child's own: it belongs to a sub-agent the child started with its Task
// tool (that call's id). Its events are kept with ParentToolCallID set to
// that id, so the sub-agent's prompt is not read as one delivered to the
// child. The final response is the result record's, which is the child's.
type claudeNormalizer struct {
	tally
	out  Outcome
	done bool
	// last is the child's own last event, to tell whether the result's
	// final response is already its last assistant message.
	last *Event
}

type claudeBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type claudeRecord struct {
	Type            string `json:"type"`
	Subtype         string `json:"subtype"`
	Model           string `json:"model"`
	ParentToolUseID string `json:"parent_tool_use_id"` // null on the child's own records
	Message         *struct {
		Model   string          `json:"model"`
		Content json.RawMessage `json:"content"`
	} `json:"message"`
	IsError          bool            `json:"is_error"`
	Result           string          `json:"result"`
	StructuredOutput json.RawMessage `json:"structured_output"`
	Errors           []string        `json:"errors"`
	TerminalReason   string          `json:"terminal_reason"`
	APIErrorStatus   json.RawMessage `json:"api_error_status"` // a number; null on a healthy run
}

// claudeTypes are the record types Claude Code's stream-json writes; an
// object of another type that carries no session_id is not a Claude record.
var claudeTypes = map[string]bool{"system": true, "user": true, "assistant": true, "result": true, "stream_event": true}

func claudeRecognizes(p *probe) bool { return claudeTypes[p.Type] || p.Type != "" && p.SessionID != "" }

func (c *claudeNormalizer) Feed(b []byte) ([]Event, error) {
	return feedRecord(&c.tally, b, claudeRecognizes, c.handle)
}

// handle turns one Claude record into the child's events.
func (c *claudeNormalizer) handle(r *claudeRecord) ([]Event, error) {
	switch r.Type {
	case "system":
		if r.Subtype == "init" && r.Model != "" {
			c.out.Model = r.Model
		}
	case "user", "assistant":
		if r.Message == nil {
			return nil, nil
		}
		if m := r.Message.Model; c.out.Model == "" && r.Type == "assistant" && r.ParentToolUseID == "" && m != "" && m != "<synthetic>" {
			c.out.Model = m
		}
		blocks, err := claudeBlocks(r.Message.Content)
		if err != nil {
			return nil, err
		}
		evs := c.blocks(r.Type, blocks)
		for i := range evs {
			evs[i].ParentToolCallID = r.ParentToolUseID
		}
		if r.ParentToolUseID == "" && len(evs) > 0 {
			c.last = &evs[len(evs)-1]
		}
		return evs, nil
	case "result":
		return c.result(r), nil
	}
	return nil, nil
}

// result reads the terminal record; it returns the final response as the
// child's last assistant message when no such message says it yet.
func (c *claudeNormalizer) result(r *claudeRecord) []Event {
	c.done = true
	final := r.Result
	if final == "" && len(r.StructuredOutput) > 0 && string(r.StructuredOutput) != "null" {
		var b bytes.Buffer
		if json.Compact(&b, r.StructuredOutput) == nil {
			final = b.String()
		}
	}
	c.out.FinalText = final
	if !r.IsError && r.Subtype == "success" {
		c.out.Status = Completed
		if strings.TrimSpace(final) == "" || c.last != nil && c.last.Type == AssistantMessage && strings.TrimSpace(c.last.Text) == strings.TrimSpace(final) {
			return nil
		}
		ev := assistantMessage(final)
		c.last = &ev
		return []Event{ev}
	}
	c.out.Status = Failed
	detail := r.Subtype
	status := strings.Trim(string(r.APIErrorStatus), `"`)
	switch {
	case status != "" && status != "null":
		detail = "API error (status " + status + ")"
	case r.TerminalReason == "api_error":
		detail = "API error"
	case r.Subtype == "success" || r.Subtype == "":
		// is_error with subtype success: the subtype says nothing.
		detail = "error"
		if r.TerminalReason != "" {
			detail = r.TerminalReason
		}
	}
	if msg := strings.Join(append(r.Errors, r.Result), "; "); strings.Trim(msg, "; ") != "" {
		detail += ": " + strings.Trim(msg, "; ")
	}
	c.out.Error = detail
	return nil
}

// claudeBlocks reads message.content: a plain string or an array of blocks.
func claudeBlocks(raw json.RawMessage) ([]claudeBlock, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []claudeBlock{{Type: "text", Text: s}}, nil
	}
	var bs []claudeBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, fmt.Errorf("message.content: %w", err)
	}
	return bs, nil
}

// blocks emits a record's blocks in order; adjacent text blocks form one message.
func (c *claudeNormalizer) blocks(role string, bs []claudeBlock) []Event {
	var out []Event
	var text []string
	flush := func() {
		if t := strings.Join(text, "\n"); strings.TrimSpace(t) != "" {
			if role == "user" {
				out = append(out, userMessage(t))
			} else {
				out = append(out, assistantMessage(t))
			}
		}
		text = nil
	}
	for _, b := range bs {
		switch b.Type {
		case "text":
			text = append(text, b.Text)
		case "tool_use":
			flush()
			out = append(out, toolCall(b.ID, b.Name, b.Input))
		case "tool_result":
			flush()
			output := claudeResultText(b.Content)
			errText := ""
			if b.IsError {
				errText = output
			}
			out = append(out, toolResult(b.ToolUseID, output, b.IsError, errText))
		}
	}
	flush()
	return out
}

// claudeResultText flattens tool_result content: a string or text blocks.
func claudeResultText(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	var bs []claudeBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return string(raw)
	}
	var parts []string
	for _, b := range bs {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func (c *claudeNormalizer) Close() ([]Event, Outcome) {
	if !c.done {
		o := unterminated(ProviderClaude)
		o.Model = c.out.Model
		return nil, c.outcome(ProviderClaude, o)
	}
	return nil, c.outcome(ProviderClaude, c.out)
}
