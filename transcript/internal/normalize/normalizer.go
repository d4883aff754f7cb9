package normalize

import (
	"errors"
	"fmt"
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

// Provider names accepted by New.
const (
	ProviderClaude   = "claude"   // Claude Code stream-json (claude -p --output-format stream-json)
	ProviderOpenCode = "opencode" // OpenCode `run --format json` output, or its server's event bus (GET /event, /global/event)
	ProviderCodex    = "codex"    // Codex exec JSONL (codex exec --json)
)

// normalizers builds each provider's normalizer; session is the child's
// own session in a stream that carries several ("" keeps every session's).
var normalizers = map[string]func(session string) Normalizer{
	ProviderClaude:   func(string) Normalizer { return &claudeNormalizer{} },
	ProviderOpenCode: func(session string) Normalizer { return newOpenCodeNormalizer(session) },
	ProviderCodex:    func(string) Normalizer { return &codexNormalizer{started: map[string]bool{}} },
}

// Providers lists the supported provider stream shapes, sorted.
func Providers() []string {
	out := make([]string, 0, len(normalizers))
	for p := range normalizers {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// New returns provider's normalizer, held to the event contract; session
// keeps only that session's events of a stream that carries several.
func New(provider, session string) (Normalizer, error) {
	f, ok := normalizers[provider]
	if !ok {
		return nil, fmt.Errorf("transcript: unknown provider %q (supported: %s)", provider, strings.Join(Providers(), ", "))
	}
	return checked{f(session)}, nil
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
		if err := Validate(e); err != nil {
			return nil, fmt.Errorf("record makes no valid event: %w", err)
		}
	}
	return evs, nil
}

func (c checked) Close() ([]Event, Outcome) {
	evs, out := c.Normalizer.Close()
	kept := evs[:0]
	for _, e := range evs {
		if err := Validate(e); err != nil {
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
