package normalize

import (
	"encoding/json"
	"fmt"
	"strings"
)

// codexNormalizer reads `codex exec --json` JSONL:
//
//	{"type":"thread.started","thread_id":…}  {"type":"turn.started"}
//	{"type":"item.started","item":{"id":…,"type":"command_execution","command":…,"status":"in_progress"}}
//	{"type":"item.completed","item":{"id":…,"type":"command_execution","aggregated_output":…,"exit_code":…,"status":"completed"|"failed"}}
//	{"type":"item.completed","item":{"id":…,"type":"mcp_tool_call","server":…,"tool":…,"arguments":…,"result":…,"error":…,"status":…}}
//	{"type":"item.completed","item":{"id":…,"type":"file_change","changes":[…],"status":…}}
//	{"type":"item.completed","item":{"id":…,"type":"agent_message","text":…}}
//	{"type":"turn.completed","usage":…} | {"type":"turn.failed","error":{"message":…}} | {"type":"error","message":…}
//
// A tool item becomes a tool_call when it starts (or completes, if it never
// reported a start) and a tool_result when it completes. Reasoning items are
// not transcript content.
//
// A top-level "error" record is an error the run reported. Codex prints one
// for a fatal error (the turn then ends turn.failed) and for a stream error
// it retries (the turn may then end turn.completed), and the JSONL does not
// say which. A run that reported an error is never recorded as completed:
// "error" followed by turn.completed is a failed outcome whose error names
// the first reported error. Non-fatal notices (deprecations, config
// warnings) come as items of type "error", not as this record, and do not
// change the outcome.
type codexNormalizer struct {
	tally
	started map[string]bool
	out     Outcome
	done    bool
}

type codexItem struct {
	ID               string          `json:"id"`
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	Command          string          `json:"command"`
	AggregatedOutput string          `json:"aggregated_output"`
	ExitCode         *int            `json:"exit_code"`
	Status           string          `json:"status"`
	Server           string          `json:"server"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
	Result           *struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Changes []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"changes"`
	Query string `json:"query"`
}

type codexEvent struct {
	Type    string     `json:"type"`
	Item    *codexItem `json:"item"`
	Message string     `json:"message"`
	Error   *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (c *codexNormalizer) Feed(b []byte) ([]Event, error) {
	return feedRecord(&c.tally, b, codexRecognizes, c.handle)
}

// handle turns one Codex record into the child's events.
func (c *codexNormalizer) handle(ev *codexEvent) ([]Event, error) {
	switch ev.Type {
	case "item.started":
		if ev.Item != nil {
			return c.call(ev.Item), nil
		}
	case "item.completed":
		if ev.Item != nil {
			return c.completed(ev.Item)
		}
	case "turn.completed":
		c.done = true
		switch {
		case c.out.Error == "":
			c.out.Status = Completed
		case c.out.Status != Failed: // an error was reported, and no turn failed yet
			c.out.Status = Failed
			c.out.Error = "error before turn.completed: " + c.out.Error
		}
	case "turn.failed":
		c.done, c.out.Status = true, Failed
		if ev.Error != nil {
			c.out.Error = ev.Error.Message
		}
	case "error":
		if c.out.Error == "" {
			c.out.Error = ev.Message
		}
	}
	return nil, nil
}

// codexRecognizes: `codex exec --json` writes thread.*, turn.*, item.* and
// error records.
func codexRecognizes(p *probe) bool {
	return p.Type == "error" || strings.HasPrefix(p.Type, "thread.") || strings.HasPrefix(p.Type, "turn.") || strings.HasPrefix(p.Type, "item.")
}

// call emits the tool_call of a tool item once.
func (c *codexNormalizer) call(it *codexItem) []Event {
	name, input, ok := codexTool(it)
	if !ok || c.started[it.ID] {
		return nil
	}
	c.started[it.ID] = true
	return []Event{toolCall(it.ID, name, input)}
}

func (c *codexNormalizer) completed(it *codexItem) ([]Event, error) {
	switch it.Type {
	case "agent_message":
		c.out.FinalText = it.Text
		if it.Text == "" {
			return nil, nil
		}
		return []Event{assistantMessage(it.Text)}, nil
	case "command_execution":
		out := c.call(it)
		failed := notCompleted(it.Status) || it.ExitCode != nil && *it.ExitCode != 0
		errText := ""
		switch {
		case !failed:
		case it.ExitCode != nil && *it.ExitCode != 0:
			errText = fmt.Sprintf("exit code %d", *it.ExitCode)
		case it.Status != "" && it.Status != "failed":
			errText = "command " + it.Status
		default:
			errText = "command failed"
		}
		return append(out, toolResult(it.ID, it.AggregatedOutput, failed, errText)), nil
	case "mcp_tool_call":
		out := c.call(it)
		var parts []string
		if it.Result != nil {
			for _, p := range it.Result.Content {
				if p.Type == "text" {
					parts = append(parts, p.Text)
				}
			}
		}
		failed, errText := notCompleted(it.Status) || it.Error != nil, ""
		if it.Error != nil {
			errText = it.Error.Message
		} else if failed {
			errText = "tool call " + it.Status
		}
		return append(out, toolResult(it.ID, strings.Join(parts, "\n"), failed, errText)), nil
	case "file_change":
		out := c.call(it)
		var lines []string
		for _, ch := range it.Changes {
			lines = append(lines, ch.Kind+" "+ch.Path)
		}
		failed := notCompleted(it.Status)
		errText := ""
		if failed {
			errText = "patch failed to apply"
			if it.Status != "failed" {
				errText = "patch " + it.Status
			}
		}
		return append(out, toolResult(it.ID, strings.Join(lines, "\n"), failed, errText)), nil
	case "web_search":
		out := c.call(it)
		return append(out, toolResult(it.ID, "", false, "")), nil
	}
	return nil, nil
}

// notCompleted reports whether a completed item's status says it did not
// succeed: "failed", "declined" (refused by the approval policy, never run),
// or any other status than "completed". An item without a status is judged by
// its other fields.
func notCompleted(status string) bool { return status != "" && status != "completed" }

// codexTool names a tool item and its input; ok is false for non-tool items.
func codexTool(it *codexItem) (string, json.RawMessage, bool) {
	mustJSON := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	switch it.Type {
	case "command_execution":
		return "shell", mustJSON(map[string]string{"command": it.Command}), true
	case "mcp_tool_call":
		return it.Server + "." + it.Tool, it.Arguments, true
	case "file_change":
		return "apply_patch", mustJSON(map[string]any{"changes": it.Changes}), true
	case "web_search":
		return "web_search", mustJSON(map[string]string{"query": it.Query}), true
	}
	return "", nil, false
}

func (c *codexNormalizer) Close() ([]Event, Outcome) {
	if !c.done {
		o := unterminated(ProviderCodex)
		if c.out.Error != "" {
			o.Error = c.out.Error
		}
		o.FinalText = c.out.FinalText
		return nil, c.outcome(ProviderCodex, o)
	}
	return nil, c.outcome(ProviderCodex, c.out)
}
