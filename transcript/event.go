package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Format names the transcript document layout; it is the first field of every
// readable transcript so a reader can tell what it holds.
const Format = "schemastate.background-transcript/v1"

// Kind is what started a background execution. The contract is the same for
// every kind (requirement 3): nothing in this package branches on it.
type Kind string

// Kinds the host starts today. Any other non-empty kind is accepted as is.
const (
	KindRunInBackground Kind = "run_in_background"
	KindTodoDelegate    Kind = "todo_delegate"
	KindScheduled       Kind = "scheduled"
)

// Status is a transcript's state: running until Finish, then exactly one
// terminal value, never changed again.
type Status string

const (
	Running   Status = "running"
	Completed Status = "completed"
	Failed    Status = "failed"
	Cancelled Status = "cancelled"
	TimedOut  Status = "timed_out"
)

// Terminal reports whether s is one of the four terminal statuses.
func (s Status) Terminal() bool {
	switch s {
	case Completed, Failed, Cancelled, TimedOut:
		return true
	}
	return false
}

// EventType is the kind of one normalized event. These four are the whole
// contract: every provider adapter produces only these.
type EventType string

const (
	// UserMessage is a prompt delivered to the child (a lone prompt or one
	// step of a message sequence).
	UserMessage EventType = "user_message"
	// AssistantMessage is text the child's model produced.
	AssistantMessage EventType = "assistant_message"
	// ToolCall is a tool invocation, appended when the call starts. In a
	// rendered transcript it carries its final result (Event.Result).
	ToolCall EventType = "tool_call"
	// ToolResult is a tool call's final result, appended when it arrives. A
	// rendered transcript folds it into its call; one whose call is unknown
	// stays a standalone event.
	ToolResult EventType = "tool_result"
)

// Header is what a transcript knows before the child's first provider turn.
type Header struct {
	ParentSessionID string    `json:"parent_session_id"`
	AgentID         string    `json:"agent_id"`
	ExecutionID     string    `json:"execution_id,omitempty"`
	Kind            Kind      `json:"kind"`
	Provider        string    `json:"provider,omitempty"`
	Model           string    `json:"model,omitempty"`
	StartedAt       time.Time `json:"started_at"`
}

// Event is one normalized transcript event.
type Event struct {
	// Seq is assigned by the store: 1, 2, 3… in append order (the header is 0).
	Seq int64 `json:"seq"`
	// At is when the event happened; the store fills it in when zero.
	At   time.Time `json:"at"`
	Type EventType `json:"type"`
	// Text is the message text of a user_message or assistant_message.
	Text string `json:"text,omitempty"`
	// Call describes a tool_call.
	Call *Call `json:"call,omitempty"`
	// Result is a tool_result's payload, or — in a rendered transcript — the
	// final result folded into its tool_call (nil while none arrived).
	Result *Result `json:"result,omitempty"`
	// ParentToolCallID is set on an event that is not the child's own but
	// belongs to a sub-agent the child started: it is the id of the child's
	// tool call that started that sub-agent (a Claude Task call, say), so
	// the sub-agent's prompt, messages and tool calls are kept but read apart
	// from the child's. Empty on the child's own events. Providers that
	// report sub-agent traffic inside the child's stream set it; the field
	// means the same whichever provider produced the event.
	ParentToolCallID string `json:"parent_tool_call_id,omitempty"`
}

// Call is a tool invocation.
type Call struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
}

// Result is a tool call's final result. A failed call has IsError set and its
// failure detail in Error (and whatever output the tool produced in Output).
type Result struct {
	CallID  string `json:"call_id"`
	Output  string `json:"output,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	Error   string `json:"error,omitempty"`
	// Seq and At are the result event's own, set when it is folded into its call.
	Seq int64      `json:"seq,omitempty"`
	At  *time.Time `json:"at,omitempty"`
}

// Transcript is a readable transcript: the document written at finish, or the
// rendering of a running transcript's event log.
type Transcript struct {
	Format string `json:"format"`
	Header
	Status  Status     `json:"status"`
	EndedAt *time.Time `json:"ended_at,omitempty"`
	Error   string     `json:"error,omitempty"`
	// LastSeq is the seq of the last durable event.
	LastSeq int64 `json:"last_seq"`
	// TornBytes counts bytes of an incomplete last log line (a crash while it
	// was being written) that were ignored.
	TornBytes int     `json:"torn_bytes,omitempty"`
	Events    []Event `json:"events"`

	// Path is the file the transcript was read from.
	Path string `json:"-"`
}

// FinalResponse is the text of the child's own last assistant message ("" if
// none); a sub-agent's message (ParentToolCallID set) is never its response.
func (t *Transcript) FinalResponse() string {
	for i := len(t.Events) - 1; i >= 0; i-- {
		if t.Events[i].Type == AssistantMessage && t.Events[i].ParentToolCallID == "" {
			return t.Events[i].Text
		}
	}
	return ""
}

// ToolCalls returns the tool_call events, each carrying its final result
// (Result nil when the call never got one); a sub-agent's calls are among
// them, marked by ParentToolCallID.
func (t *Transcript) ToolCalls() []Event {
	var out []Event
	for _, e := range t.Events {
		if e.Type == ToolCall {
			out = append(out, e)
		}
	}
	return out
}

// validate checks an event a caller asks to append.
func (e Event) validate() error {
	switch e.Type {
	case UserMessage, AssistantMessage:
		if e.Text == "" {
			return fmt.Errorf("%w: %s without text", ErrInvalidEvent, e.Type)
		}
		if e.Call != nil || e.Result != nil {
			return fmt.Errorf("%w: %s carries a tool payload", ErrInvalidEvent, e.Type)
		}
	case ToolCall:
		if e.Call == nil || e.Call.ID == "" || e.Call.Name == "" {
			return fmt.Errorf("%w: tool_call needs call.id and call.name", ErrInvalidEvent)
		}
		if e.Result != nil {
			return fmt.Errorf("%w: tool_call carries a result; append it as a tool_result", ErrInvalidEvent)
		}
		if len(e.Call.Input) > 0 && !json.Valid(e.Call.Input) {
			return fmt.Errorf("%w: tool_call %s: input is not JSON", ErrInvalidEvent, e.Call.ID)
		}
	case ToolResult:
		if e.Result == nil || e.Result.CallID == "" {
			return fmt.Errorf("%w: tool_result needs result.call_id", ErrInvalidEvent)
		}
		if e.Call != nil {
			return fmt.Errorf("%w: tool_result carries a call", ErrInvalidEvent)
		}
	default:
		return fmt.Errorf("%w: unknown event type %q", ErrInvalidEvent, e.Type)
	}
	return nil
}

// logLine is one line of the append-only event log: line 1 is the header
// (seq 0), every other line one event.
type logLine struct {
	Event
	Header *Header `json:"header,omitempty"`
	// Status is "running" on the header line, so the raw log reads as a
	// running transcript; the terminal status lives only in the .json.
	Status Status `json:"status,omitempty"`
}

const headerType EventType = "header"

// compactInput gives a tool input the compact bytes the log holds: the
// document's indentation re-indents it.
func compactInput(e *Event) {
	if e.Call != nil && len(e.Call.Input) > 0 {
		var c bytes.Buffer
		if json.Compact(&c, e.Call.Input) == nil {
			e.Call.Input = c.Bytes()
		}
	}
}
