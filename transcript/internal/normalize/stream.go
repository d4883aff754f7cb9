package normalize

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// lineKind is what one line of a stream is before a normalizer reads it.
type lineKind int

const (
	lineSkip   lineKind = iota // blank, or SSE framing that carries no data
	lineOther                  // text that is not a JSON object: ignored
	lineObject                 // a JSON object (after any SSE "data:" prefix)
)

// record trims a stream line and says what it is.
func record(b []byte) ([]byte, lineKind) {
	b = bytes.TrimSpace(b)
	if bytes.HasPrefix(b, []byte("data:")) {
		b = bytes.TrimSpace(b[len("data:"):])
	} else {
		for _, f := range []string{"event:", "id:", "retry:", ":"} {
			if bytes.HasPrefix(b, []byte(f)) {
				return nil, lineSkip
			}
		}
	}
	switch {
	case len(b) == 0:
		return nil, lineSkip
	case b[0] != '{':
		return nil, lineOther
	}
	return b, lineObject
}

// tally counts a stream's recognized and ignored lines (Outcome.Records,
// Outcome.Ignored); every normalizer embeds one.
type tally struct{ records, ignored int }

// line classifies a raw line: ok is true for a JSON object to decode, and
// a non-object line is counted as ignored.
func (t *tally) line(b []byte) ([]byte, bool) {
	b, k := record(b)
	if k == lineOther {
		t.ignored++
	}
	return b, k == lineObject
}

// probe is what tells whose record a JSON object is, read before the
// object is decoded as the provider's: an object of another provider's
// shape is ignored (and counted), never a decoding error.
type probe struct {
	Type       string          `json:"type"`
	SessionID  string          `json:"session_id"` // Claude Code
	SessionIDC string          `json:"sessionID"`  // opencode run
	Properties json.RawMessage `json:"properties"` // OpenCode bus
	Part       json.RawMessage `json:"part"`       // opencode run
	Error      json.RawMessage `json:"error"`
	Payload    json.RawMessage `json:"payload"` // OpenCode /global/event
}

// object decodes the probe of a JSON object and counts it as one of the
// provider's records (recognizes) or as ignored; it reports whether the
// caller should decode the object as the provider's.
func (t *tally) object(b []byte, recognizes func(*probe) bool) (bool, error) {
	var p probe
	if err := json.Unmarshal(b, &p); err != nil {
		return false, err
	}
	if !recognizes(&p) {
		t.ignored++
		return false, nil
	}
	t.records++
	return true, nil
}

// feedRecord is every provider's Feed: it decodes a raw line as one of the
// provider's records (T), counting it (line, object), and hands it to
// handle; a line that is not one yields no events and, unless it is a
// malformed record, no error.
func feedRecord[T any](t *tally, b []byte, recognizes func(*probe) bool, handle func(*T) ([]Event, error)) ([]Event, error) {
	b, ok := t.line(b)
	if !ok {
		return nil, nil
	}
	if ok, err := t.object(b, recognizes); !ok {
		return nil, err
	}
	var rec T
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	return handle(&rec)
}

// outcome stamps the counts on o; with no record at all the stream was
// not the provider's, whatever o said.
func (t *tally) outcome(provider string, o Outcome) Outcome {
	o.Records, o.Ignored = t.records, t.ignored
	switch {
	case t.records > 0:
	case t.ignored == 0:
		o.Status, o.Error = Failed, fmt.Sprintf("no %s record in the stream: it was empty", provider)
	default:
		o.Status, o.Error = Failed, fmt.Sprintf("no %s record in the stream: %d line(s) ignored (is the provider right?)", provider, t.ignored)
	}
	return o
}

func userMessage(text string) Event { return Event{Type: UserMessage, Text: text} }

func assistantMessage(text string) Event { return Event{Type: AssistantMessage, Text: text} }

func toolCall(id, name string, input json.RawMessage) Event {
	if len(input) == 0 || string(input) == "null" {
		input = nil
	}
	return Event{Type: ToolCall, Call: &Call{ID: id, Name: name, Input: input}}
}

func toolResult(id, output string, isErr bool, errText string) Event {
	return Event{Type: ToolResult, Result: &Result{CallID: id, Output: output, IsError: isErr, Error: errText}}
}

// unterminated is the outcome of a stream that ended without the provider's
// terminal record.
func unterminated(provider string) Outcome {
	return Outcome{Status: Failed, Error: provider + " stream ended without a terminal record"}
}
