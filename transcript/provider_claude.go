package transcript

import (
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
//	{"type":"result","subtype":"success"|"error_max_turns"|"error_during_execution","is_error":…,"result":…}
//
// A user or assistant record whose parent_tool_use_id is set is not the
// child's own: it belongs to a sub-agent the child started with its Task
// tool (that call's id). Its events are kept with ParentToolCallID set to
// that id, so the sub-agent's prompt is not read as one delivered to the
// child. The final response is the result record's, which is the child's.
type claudeNormalizer struct {
	out  Outcome
	done bool
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
		Content json.RawMessage `json:"content"`
	} `json:"message"`
	IsError bool     `json:"is_error"`
	Result  string   `json:"result"`
	Errors  []string `json:"errors"`
}

func (c *claudeNormalizer) Feed(b []byte) ([]Event, error) {
	b, ok := record(b)
	if !ok {
		return nil, nil
	}
	var r claudeRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	switch r.Type {
	case "system":
		if r.Model != "" {
			c.out.Model = r.Model
		}
	case "user", "assistant":
		if r.Message == nil {
			return nil, nil
		}
		blocks, err := claudeBlocks(r.Message.Content)
		if err != nil {
			return nil, err
		}
		evs := c.blocks(r.Type, blocks)
		for i := range evs {
			evs[i].ParentToolCallID = r.ParentToolUseID
		}
		return evs, nil
	case "result":
		c.done = true
		c.out.FinalText = r.Result
		if r.Subtype == "success" && !r.IsError {
			c.out.Status = Completed
			break
		}
		c.out.Status = Failed
		detail := r.Subtype
		if msg := strings.Join(append(r.Errors, r.Result), "; "); strings.Trim(msg, "; ") != "" {
			detail += ": " + strings.Trim(msg, "; ")
		}
		c.out.Error = detail
	}
	return nil, nil
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
		return nil, o
	}
	return nil, c.out
}
