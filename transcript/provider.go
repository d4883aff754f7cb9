package transcript

import (
	"bufio"
	"fmt"
	"io"

	"github.com/schemastate/schemastate/transcript/internal/normalize"
)

// Normalizer turns one provider's event stream into normalized events, as the
// stream arrives: each Feed returns the events that record completes, ready to
// Append. Consumers never see a provider format (requirement 3). Feed
// consumes one record (one JSON line; an SSE "data: " prefix is accepted):
// blank lines and SSE framing are skipped, a line that is not one of the
// provider's records is ignored and counted in Outcome.Ignored, and a JSON
// object that does not parse or decode as the provider's is an error. Close
// ends the stream: the events still buffered, and how the provider said the
// run ended; a stream with no record of the provider is Failed, never an
// empty run.
type Normalizer = normalize.Normalizer

// Outcome is how a provider stream said the run ended: Status (Completed
// or Failed; Failed too when the stream ended without the provider's
// terminal record), Error, FinalText (the provider's own final response,
// where it reports one), Model ("" when the stream reported none), and
// Records and Ignored (the lines that were records of the provider, whether
// or not they produced events, and the lines that were not).
type Outcome = normalize.Outcome

// ErrNoRecords: a provider stream held no record of its provider (the wrong
// --provider, or output that is not the provider's JSON stream).
var ErrNoRecords = normalize.ErrNoRecords

// Provider names accepted by NewNormalizer.
const (
	ProviderClaude   = normalize.ProviderClaude   // Claude Code stream-json (claude -p --output-format stream-json)
	ProviderOpenCode = normalize.ProviderOpenCode // OpenCode `run --format json` output, or its server's event bus (GET /event, /global/event)
	ProviderCodex    = normalize.ProviderCodex    // Codex exec JSONL (codex exec --json)
)

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
func Providers() []string { return normalize.Providers() }

// NewNormalizer returns a normalizer for provider. A record that would make
// an event Append refuses (a tool call without its id or name, say) is an
// error of that record, as one that does not decode is; Close leaves such
// an event out and says so in the outcome.
func NewNormalizer(provider string, opts ...NormalizerOption) (Normalizer, error) {
	var c normalizerConfig
	for _, o := range opts {
		o(&c)
	}
	return normalize.New(provider, c.session)
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
