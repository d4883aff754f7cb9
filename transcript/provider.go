package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
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
	// "data: " prefix is accepted) and returns the events it completes. A
	// line that is not a JSON object (blank, SSE "event:"/comment framing)
	// is skipped; a JSON object that does not parse is an error.
	Feed(record []byte) ([]Event, error)
	// Close ends the stream: it returns events still buffered and how the
	// provider said the run ended.
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
	Model     string `json:"model,omitempty"`
}

// Provider names accepted by NewNormalizer.
const (
	ProviderClaude   = "claude"   // Claude Code stream-json (claude -p --output-format stream-json)
	ProviderOpenCode = "opencode" // OpenCode server event bus (GET /event)
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
	return f(c), nil
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
	return append(out, evs...), o, nil
}

// record trims a stream record; ok is false for blank lines and SSE framing
// that carries no data.
func record(b []byte) ([]byte, bool) {
	b = bytes.TrimSpace(b)
	if bytes.HasPrefix(b, []byte("data:")) {
		b = bytes.TrimSpace(b[len("data:"):])
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, false
	}
	return b, true
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
