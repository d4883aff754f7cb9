package transcript_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/transcript"
)

// fixturePath names a provider fixture, below testdata/transcripts.
func fixturePath(name string) string {
	return filepath.Join("..", "testdata", "transcripts", name)
}

// fixture opens a provider fixture as the stream a provider writes.
func fixture(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(fixturePath(name))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// readFixture reads a provider fixture whole.
func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(fixturePath(name))
	require.NoError(t, err)
	return b
}

// fixtureLines reads a provider fixture as its stream records.
func fixtureLines(t *testing.T, name string) []string {
	t.Helper()
	return strings.Split(strings.TrimRight(string(readFixture(t, name)), "\n"), "\n")
}

// pairedCall is what a consumer needs from a tool call, whatever the provider.
type pairedCall struct {
	Name    string
	Input   string
	Output  string
	IsError bool
	Error   string
}

// Acceptance test 4: one real-shaped fixture per provider transport, streamed
// through its normalizer into the store record by record as a live child
// would, yields the same normalized contract: the prompt (where the provider
// echoes it; otherwise the host's own prompt append), a final assistant
// response, and tool calls paired with their final results, failures
// included.
func TestTranscript_AT4_EveryProviderFixtureYieldsTheSameContract(t *testing.T) {
	const prompt = "Count the Go files under ./keys and tell me whether `go vet ./keys` passes."
	// One OpenCode run, carried by its SSE stream and its /global/event
	// stream alike; `opencode run` gives the same final answer.
	const opencodeFinal = "There are 2 Go files under ./keys (instant.go, keys.go), and `go vet ./keys` passes."
	opencodeCalls := []pairedCall{
		{Name: "glob", Input: `{"pattern":"keys/*.go"}`, Output: "/work/main/keys/instant.go\n/work/main/keys/keys.go"},
		{Name: "read", Input: `{"filePath":"/work/main/keys/doc.go"}`, IsError: true, Error: "Error: File not found: /work/main/keys/doc.go"},
		{Name: "bash", Input: `{"command":"go vet ./keys","description":"Vet the keys package"}`},
	}
	cases := []struct {
		provider, fixture string
		hostPrompt        bool // the stream does not echo the prompt; the host appends it
		final             string
		model             string // the model the stream reports
		calls             []pairedCall
	}{
		{
			provider: transcript.ProviderClaude, fixture: "claude_success.jsonl", model: "claude-sonnet-4-5-20250929",
			final: "There are 2 Go files under ./keys (instant.go, keys.go). `go vet ./keys` does not pass: it reports unreachable code at keys/keys.go:42:2.",
			calls: []pairedCall{
				{Name: "Glob", Input: `{"pattern":"keys/*.go"}`, Output: "/work/main/keys/instant.go\n/work/main/keys/keys.go"},
				{Name: "Bash", Input: `{"command":"go vet ./keys","description":"Vet the keys package"}`,
					Output:  "Exit code 1\n# github.com/schemastate/schemastate/keys\nkeys/keys.go:42:2: unreachable code",
					IsError: true, Error: "Exit code 1\n# github.com/schemastate/schemastate/keys\nkeys/keys.go:42:2: unreachable code"},
			},
		},
		{
			provider: transcript.ProviderOpenCode, fixture: "opencode_success.jsonl", model: "claude-sonnet-4-5",
			final: opencodeFinal, calls: opencodeCalls,
		},
		{
			// The same run as the server's /global/event stream: every bus
			// event wrapped as {"directory":…,"payload":{…}}.
			provider: transcript.ProviderOpenCode, fixture: "opencode_global_event.jsonl", model: "claude-sonnet-4-5",
			final: opencodeFinal, calls: opencodeCalls,
		},
		{
			// `opencode run --format json`: the transport users run from a
			// shell. It does not echo the prompt, nor name the model.
			provider: transcript.ProviderOpenCode, fixture: "opencode_run_success.jsonl", hostPrompt: true,
			final: opencodeFinal,
			calls: []pairedCall{
				{Name: "glob", Input: `{"pattern":"keys/*.go"}`, Output: "/work/main/keys/instant.go\n/work/main/keys/keys.go"},
				{Name: "bash", Input: `{"command":"go vet ./keys","description":"Vet the keys package"}`},
			},
		},
		{
			// claude --json-schema: the answer is a StructuredOutput tool
			// call, then result.result; no assistant text follows the call.
			provider: transcript.ProviderClaude, fixture: "claude_structured_output.jsonl", model: "claude-sonnet-4-5-20250929",
			final: `{"go_files":["instant.go","keys.go"],"count":2,"vet_passes":false,"vet_findings":["keys/keys.go:42:2: unreachable code"]}`,
			calls: []pairedCall{
				{Name: "Bash", Input: `{"command":"ls keys/*.go; go vet ./keys","description":"List and vet the keys package"}`,
					Output:  "Exit code 1\nkeys/instant.go\nkeys/keys.go\n# github.com/schemastate/schemastate/keys\nkeys/keys.go:42:2: unreachable code",
					IsError: true, Error: "Exit code 1\nkeys/instant.go\nkeys/keys.go\n# github.com/schemastate/schemastate/keys\nkeys/keys.go:42:2: unreachable code"},
				{Name: "StructuredOutput", Input: `{"go_files":["instant.go","keys.go"],"count":2,"vet_passes":false,"vet_findings":["keys/keys.go:42:2: unreachable code"]}`,
					Output: "Structured output provided successfully"},
			},
		},
		{
			provider: transcript.ProviderCodex, fixture: "codex_success.jsonl", hostPrompt: true,
			final: "There are 2 Go files under ./keys (instant.go, keys.go). `go vet ./keys` fails with one finding: unreachable code at keys/keys.go:42:2.",
			calls: []pairedCall{
				{Name: "shell", Input: `{"command":"bash -lc 'ls keys/*.go'"}`, Output: "keys/instant.go\nkeys/keys.go\n"},
				{Name: "shell", Input: `{"command":"bash -lc 'go vet ./keys'"}`, Output: "# github.com/schemastate/schemastate/keys\nkeys/keys.go:42:2: unreachable code\n",
					IsError: true, Error: "exit code 1"},
			},
		},
	}
	require.Equal(t, []string{"claude", "codex", "opencode"}, transcript.Providers(), "every supported provider has a case here")
	s := newStore(t)
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			h := header("sess-providers", "agent-"+strings.TrimSuffix(c.fixture, ".jsonl"), transcript.KindRunInBackground)
			h.Provider, h.Model = c.provider, "" // the host gave no model
			require.NoError(t, s.Create(ctx, h))
			if c.hostPrompt {
				require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, msg(transcript.UserMessage, prompt)))
			}
			n, err := transcript.NewNormalizer(c.provider)
			require.NoError(t, err)
			out := appendStream(t, s, h, n, strings.Split(string(readFixture(t, c.fixture)), "\n"))
			require.Equal(t, transcript.Completed, out.Status, out.Error)
			require.Equal(t, c.final, out.FinalText)
			require.Equal(t, c.model, out.Model)
			require.NoError(t, s.Finish(ctx, h.ParentSessionID, h.AgentID, transcript.End{Status: out.Status, Error: out.Error, Model: out.Model}))

			tr, err := s.Load(h.ParentSessionID, h.AgentID)
			require.NoError(t, err)
			require.Equal(t, transcript.Completed, tr.Status)
			require.Equal(t, c.model, tr.Model, "the stream's model, the host having given none")
			require.Equal(t, transcript.UserMessage, tr.Events[0].Type)
			require.Equal(t, prompt, tr.Events[0].Text)
			require.Equal(t, c.final, tr.FinalResponse(), "final assistant response")
			var got []pairedCall
			for _, e := range tr.ToolCalls() {
				require.NotNil(t, e.Result, "tool call %s has no paired result", e.Call.ID)
				require.Equal(t, e.Call.ID, e.Result.CallID)
				got = append(got, pairedCall{Name: e.Call.Name, Input: string(e.Call.Input),
					Output: e.Result.Output, IsError: e.Result.IsError, Error: e.Result.Error})
			}
			require.Equal(t, c.calls, got)
			for _, e := range tr.Events {
				require.NotEqual(t, transcript.ToolResult, e.Type, "every result is paired with its call")
			}
		})
	}
}

// The failure fixtures: each provider's own terminal error becomes the
// outcome's error, and partial progress before it is kept.
func TestTranscript_ProviderFailureFixtures(t *testing.T) {
	cases := []struct {
		provider, fixture, errContains string
		toolErr                        string
		unpaired                       int
	}{
		{transcript.ProviderClaude, "claude_failure.jsonl", "error_max_turns", "Command timed out after 2m 0.0s", 0},
		{transcript.ProviderOpenCode, "opencode_failure.jsonl", "APIError: Rate limit reached for gpt-5", "", 1},
		{transcript.ProviderCodex, "codex_failure.jsonl", "stream disconnected before completion", "tool call failed: connection refused (127.0.0.1:7077)", 0},
		// `opencode run --format json`: the provider's own APIError, status
		// and message, not a generic "ended without a terminal record".
		{transcript.ProviderOpenCode, "opencode_run_api_error.jsonl", "APIError: Internal server error (status 500)", "", 0},
		// subtype "success" with is_error: an API error naming its status.
		{transcript.ProviderClaude, "claude_api_error_429.jsonl", "API error (status 429): API Error: 429 {", "", 0},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			evs, out, err := transcript.Normalize(c.provider, fixture(t, c.fixture))
			require.NoError(t, err)
			require.Equal(t, transcript.Failed, out.Status)
			require.Contains(t, out.Error, c.errContains)
			require.False(t, strings.HasPrefix(out.Error, "success"), out.Error)

			s, h := created(t, "sess-fail", "agent-"+c.provider, transcript.KindScheduled)
			require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, evs...))
			require.NoError(t, s.Finish(ctx, h.ParentSessionID, h.AgentID, transcript.End{Status: out.Status, Error: out.Error}))
			tr, err := s.Load(h.ParentSessionID, h.AgentID)
			require.NoError(t, err)
			require.Equal(t, transcript.Failed, tr.Status)
			require.Contains(t, tr.Error, c.errContains)
			unpaired := 0
			for _, e := range tr.ToolCalls() {
				if e.Result == nil {
					unpaired++ // interrupted: the call never got a result, and none is invented
					continue
				}
				if c.toolErr != "" {
					require.True(t, e.Result.IsError)
					require.Contains(t, e.Result.Error, c.toolErr)
				}
			}
			require.Equal(t, c.unpaired, unpaired)
		})
	}
}

func TestTranscript_NormalizerRejectsUnknownProviderAndBadRecords(t *testing.T) {
	_, err := transcript.NewNormalizer("cursor")
	require.ErrorContains(t, err, `unknown provider "cursor"`)
	first := map[string]string{
		transcript.ProviderClaude:   `{"type":"system","subtype":"init","session_id":"s1","model":"m"}`,
		transcript.ProviderOpenCode: `{"type":"server.connected","properties":{}}`,
		transcript.ProviderCodex:    `{"type":"thread.started","thread_id":"t1"}`,
	}
	for _, p := range transcript.Providers() {
		n, err := transcript.NewNormalizer(p)
		require.NoError(t, err)
		evs, err := n.Feed([]byte("   "))
		require.NoError(t, err)
		require.Empty(t, evs)
		_, err = n.Feed([]byte(`{"type": `))
		require.Error(t, err, p)
		_, err = n.Feed([]byte(first[p]))
		require.NoError(t, err, p)
		// A stream cut off before its terminal record is a failure, never a success.
		_, out := n.Close()
		require.Equal(t, transcript.Failed, out.Status, p)
		require.Contains(t, out.Error, "without a terminal record")
		require.Equal(t, 1, out.Records, p)
	}
}

// A stream with no record of its provider — the wrong --provider, or plain
// text — is a loud failure naming how many lines were ignored, never an
// empty run that merely ended early; blank lines and SSE framing are not
// counted.
func TestTranscript_StreamWithNoProviderRecordIsAnError(t *testing.T) {
	for _, c := range []struct{ provider, fixture string }{
		{transcript.ProviderOpenCode, "claude_success.jsonl"},
		{transcript.ProviderClaude, "opencode_success.jsonl"},
		{transcript.ProviderCodex, "opencode_run_success.jsonl"},
		{transcript.ProviderClaude, "codex_success.jsonl"},
		{transcript.ProviderCodex, "claude_success.jsonl"},
		{transcript.ProviderCodex, "opencode_success.jsonl"},
		{transcript.ProviderOpenCode, "codex_failure.jsonl"},
		{transcript.ProviderClaude, "opencode_global_event.jsonl"},
	} {
		lines := fixtureLines(t, c.fixture)
		evs, out, err := transcript.Normalize(c.provider, strings.NewReader(strings.Join(lines, "\n")+"\n\n: keep-alive\n"))
		require.ErrorIs(t, err, transcript.ErrNoRecords, c.provider+" < "+c.fixture)
		require.Empty(t, evs)
		require.Equal(t, transcript.Failed, out.Status)
		require.Equal(t, 0, out.Records)
		require.Equal(t, len(lines), out.Ignored)
		require.Contains(t, out.Error, fmt.Sprintf("no %s record in the stream: %d line(s) ignored", c.provider, len(lines)))
	}
	_, out, err := transcript.Normalize(transcript.ProviderClaude, strings.NewReader("Hello, I am Claude.\nDone.\n"))
	require.ErrorIs(t, err, transcript.ErrNoRecords)
	require.Equal(t, 2, out.Ignored)
	_, out, err = transcript.Normalize(transcript.ProviderCodex, strings.NewReader(""))
	require.ErrorIs(t, err, transcript.ErrNoRecords)
	require.Equal(t, "no codex record in the stream: it was empty", out.Error)
}

// An SSE "data: " frame is accepted as is (OpenCode's /event endpoint).
func TestTranscript_OpenCodeAcceptsSSEFraming(t *testing.T) {
	n, err := transcript.NewNormalizer(transcript.ProviderOpenCode)
	require.NoError(t, err)
	rec, _ := json.Marshal(map[string]any{"type": "message.updated", "properties": map[string]any{"info": map[string]any{"id": "m1", "role": "user"}}})
	_, err = n.Feed(append([]byte("data: "), rec...))
	require.NoError(t, err)
	evs, err := n.Feed([]byte(`data: {"type":"message.part.updated","properties":{"part":{"id":"p1","messageID":"m1","type":"text","text":"hi"}}}`))
	require.NoError(t, err)
	require.Equal(t, []transcript.Event{{Type: transcript.UserMessage, Text: "hi"}}, evs)
}
