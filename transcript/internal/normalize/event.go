// Package normalize turns each provider's event stream into the transcript's
// normalized events: the event vocabulary (Event, Call, Result, EventType,
// Status), the contract every event is held to (Validate), and one
// normalizer per provider stream shape. The transcript package re-exports
// the vocabulary by alias, so a host reads it there and never imports this
// package; keeping it here lets the adapters, the bulk of the stream
// knowledge, stand apart from the store.
package normalize

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
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

// ErrInvalidEvent: an event does not satisfy the normalized contract.
var ErrInvalidEvent = errors.New("transcript: invalid event")

// Validate checks one event against the normalized contract: the store
// refuses to append an event it fails, and a normalizer's record that makes
// one is an error of that record.
func Validate(e Event) error {
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
