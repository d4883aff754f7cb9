package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Normalizer turns one provider's event stream into normalized events, as the
// stream arrives: each Feed returns the events that record completes, ready to
// Append. Consumers never see a provider format (requirement 3).
type Normalizer interface {
	// Feed consumes one record of the provider stream (one JSON line; an SSE
	// "data: " prefix is accepted) and returns the events it completes.
	// Blank lines and SSE framing ("event:", "id:", "retry:", ":" comments)
	// are skipped; any other line that is not one of the provider's records
	// (plain text, a JSON object of another provider's shape) is ignored and
	// counted in Outcome.Ignored; text that starts as a JSON object but does
	// not parse, or a record of the provider that does not decode, is an
	// error.
	Feed(record []byte) ([]Event, error)
	// Close ends the stream: it returns events still buffered and how the
	// provider said the run ended. A stream with no record of the provider
	// at all is Failed with an error saying how many lines were ignored —
	// never an empty run that merely lacks its terminal record.
	Close() ([]Event, Outcome)
}

// Outcome is how a provider stream said the run ended.
type Outcome struct {
	// Status is Completed or Failed; Failed too when the stream ended without
	// the provider's terminal record.
	Status Status `json:"status"`
	Error  string `json:"error,omitempty"`
	// FinalText is the provider's own final response, where it reports one.
	FinalText string `json:"final_text,omitempty"`
	// Model is the model the stream reported ("" when it reported none).
	Model string `json:"model,omitempty"`
	// Records counts the lines that were records of the provider (whether
	// or not they produced events); Ignored the lines that were not.
	Records int `json:"records"`
	Ignored int `json:"ignored,omitempty"`
}

// ErrNoRecords: a provider stream held no record of its provider (the wrong
// --provider, or output that is not the provider's JSON stream).
var ErrNoRecords = errors.New("transcript: no provider record in the stream")

// Provider names accepted by NewNormalizer.
const (
	ProviderClaude   = "claude"   // Claude Code stream-json (claude -p --output-format stream-json)
	ProviderOpenCode = "opencode" // OpenCode `run --format json` output, or its server's event bus (GET /event, /global/event)
	ProviderCodex    = "codex"    // Codex exec JSONL (codex exec --json)
)

var normalizers = map[string]func(normalizerConfig) Normalizer{
	ProviderClaude:   func(normalizerConfig) Normalizer { return &claudeNormalizer{} },
	ProviderOpenCode: func(c normalizerConfig) Normalizer { return newOpenCodeNormalizer(c.session) },
	ProviderCodex:    func(normalizerConfig) Normalizer { return &codexNormalizer{started: map[string]bool{}} },
}

// NormalizerOption configures NewNormalizer and Normalize.
type NormalizerOption func(*normalizerConfig)

type normalizerConfig struct {
	session string
}

// WithSession names the child's own session in a provider stream that
// carries several sessions: the OpenCode server's /event stream carries
// every session the server runs, and only events of this session (by the
// sessionID the event carries) are the child's. Without it an OpenCode
// normalizer keeps the events of every session. Claude and Codex streams
// are the child process's own and ignore it.
func WithSession(id string) NormalizerOption {
	return func(c *normalizerConfig) { c.session = id }
}

// Providers lists the supported provider stream shapes.
func Providers() []string {
	out := make([]string, 0, len(normalizers))
	for p := range normalizers {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// NewNormalizer returns a normalizer for provider.
func NewNormalizer(provider string, opts ...NormalizerOption) (Normalizer, error) {
	f, ok := normalizers[provider]
	if !ok {
		return nil, fmt.Errorf("transcript: unknown provider %q (supported: %s)", provider, strings.Join(Providers(), ", "))
	}
	var c normalizerConfig
	for _, o := range opts {
		o(&c)
	}
	return checked{f(c)}, nil
}

// checked holds a normalizer to the event contract: a record that would make
// an event Append refuses (a tool call without its id or name, say) is an
// error of that record, as one that does not decode is, never a batch the
// store refuses whole. Close cannot fail: an event it would return that
// breaks the contract is left out, and the outcome says so.
type checked struct{ Normalizer }

func (c checked) Feed(b []byte) ([]Event, error) {
	evs, err := c.Normalizer.Feed(b)
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("record makes no valid event: %w", err)
		}
	}
	return evs, nil
}

func (c checked) Close() ([]Event, Outcome) {
	evs, out := c.Normalizer.Close()
	kept := evs[:0]
	for _, e := range evs {
		if err := e.validate(); err != nil {
			if out.Error != "" {
				out.Error += "; "
			}
			out.Error += "left out at the end of the stream: " + err.Error()
			continue
		}
		kept = append(kept, e)
	}
	return kept, out
}

// Normalize runs a whole provider stream through its normalizer.
func Normalize(provider string, r io.Reader, opts ...NormalizerOption) ([]Event, Outcome, error) {
	n, err := NewNormalizer(provider, opts...)
	if err != nil {
		return nil, Outcome{}, err
	}
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		evs, err := n.Feed(sc.Bytes())
		if err != nil {
			return nil, Outcome{}, fmt.Errorf("%s stream line %d: %w", provider, line, err)
		}
		out = append(out, evs...)
	}
	if err := sc.Err(); err != nil {
		return nil, Outcome{}, err
	}
	evs, o := n.Close()
	if o.Records == 0 {
		return append(out, evs...), o, fmt.Errorf("%w: %s", ErrNoRecords, o.Error)
	}
	return append(out, evs...), o, nil
}

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
