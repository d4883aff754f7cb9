package transcript

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/schemastate/schemastate/transcript/internal/normalize"
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
// terminal value, never changed again. Terminal reports whether it is one
// of the four terminal statuses.
type Status = normalize.Status

const (
	Running   = normalize.Running
	Completed = normalize.Completed
	Failed    = normalize.Failed
	Cancelled = normalize.Cancelled
	TimedOut  = normalize.TimedOut
)

// EventType is the kind of one normalized event. These four are the whole
// contract: every provider adapter produces only these.
type EventType = normalize.EventType

const (
	// UserMessage is a prompt delivered to the child (a lone prompt or one
	// step of a message sequence).
	UserMessage = normalize.UserMessage
	// AssistantMessage is text the child's model produced.
	AssistantMessage = normalize.AssistantMessage
	// ToolCall is a tool invocation, appended when the call starts. In a
	// rendered transcript it carries its final result (Event.Result).
	ToolCall = normalize.ToolCall
	// ToolResult is a tool call's final result, appended when it arrives. A
	// rendered transcript folds it into its call; one whose call is unknown
	// stays a standalone event.
	ToolResult = normalize.ToolResult
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

// Event is one normalized transcript event: Seq (assigned by the store: 1,
// 2, 3… in append order; the header is 0), At (when it happened; the store
// fills it in when zero), Type, Text (a user_message's or
// assistant_message's), Call (a tool_call's), Result (a tool_result's
// payload, or, in a rendered transcript, the final result folded into its
// tool_call), and ParentToolCallID: set on an event that belongs to a
// sub-agent the child started (the id of the child's tool call that started
// it, a Claude Task call, say), so the sub-agent's traffic is kept but read
// apart from the child's; empty on the child's own events, and the same
// whichever provider produced the event.
type Event = normalize.Event

// Call is a tool invocation: its ID, Name and JSON Input.
type Call = normalize.Call

// Result is a tool call's final result. A failed call has IsError set and its
// failure detail in Error (and whatever output the tool produced in Output);
// Seq and At are the result event's own, set when it is folded into its call.
type Result = normalize.Result

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
