package transcript_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/transcript"
)

func fixture(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "transcripts", name))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
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
	cases := []struct {
		provider, fixture string
		hostPrompt        bool // the stream does not echo the prompt; the host appends it
		final             string
		calls             []pairedCall
	}{
		{
			provider: transcript.ProviderClaude, fixture: "claude_success.jsonl",
			final: "There are 2 Go files under ./keys (instant.go, keys.go). `go vet ./keys` does not pass: it reports unreachable code at keys/keys.go:42:2.",
			calls: []pairedCall{
				{Name: "Glob", Input: `{"pattern":"keys/*.go"}`, Output: "/work/main/keys/instant.go\n/work/main/keys/keys.go"},
				{Name: "Bash", Input: `{"command":"go vet ./keys","description":"Vet the keys package"}`,
					Output:  "Exit code 1\n# github.com/schemastate/schemastate/keys\nkeys/keys.go:42:2: unreachable code",
					IsError: true, Error: "Exit code 1\n# github.com/schemastate/schemastate/keys\nkeys/keys.go:42:2: unreachable code"},
			},
		},
		{
			provider: transcript.ProviderOpenCode, fixture: "opencode_success.jsonl",
			final: "There are 2 Go files under ./keys (instant.go, keys.go), and `go vet ./keys` passes.",
			calls: []pairedCall{
				{Name: "glob", Input: `{"pattern":"keys/*.go"}`, Output: "/work/main/keys/instant.go\n/work/main/keys/keys.go"},
				{Name: "read", Input: `{"filePath":"/work/main/keys/doc.go"}`, IsError: true, Error: "Error: File not found: /work/main/keys/doc.go"},
				{Name: "bash", Input: `{"command":"go vet ./keys","description":"Vet the keys package"}`},
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
		t.Run(c.provider, func(t *testing.T) {
			h := header("sess-providers", "agent-"+c.provider, transcript.KindRunInBackground)
			h.Provider = c.provider
			require.NoError(t, s.Create(ctx, h))
			if c.hostPrompt {
				require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, msg(transcript.UserMessage, prompt)))
			}
			n, err := transcript.NewNormalizer(c.provider)
			require.NoError(t, err)
			b, err := os.ReadFile(filepath.Join("..", "testdata", "transcripts", c.fixture))
			require.NoError(t, err)
			for _, line := range strings.Split(string(b), "\n") {
				evs, err := n.Feed([]byte(line))
				require.NoError(t, err)
				require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, evs...))
			}
			rest, out := n.Close()
			require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, rest...))
			require.Equal(t, transcript.Completed, out.Status, out.Error)
			require.Equal(t, c.final, out.FinalText)
			require.NoError(t, s.Finish(ctx, h.ParentSessionID, h.AgentID, transcript.End{Status: out.Status, Error: out.Error}))

			tr, err := s.Load(h.ParentSessionID, h.AgentID)
			require.NoError(t, err)
			require.Equal(t, transcript.Completed, tr.Status)
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
	}
	for _, c := range cases {
		t.Run(c.provider, func(t *testing.T) {
			evs, out, err := transcript.Normalize(c.provider, fixture(t, c.fixture))
			require.NoError(t, err)
			require.Equal(t, transcript.Failed, out.Status)
			require.Contains(t, out.Error, c.errContains)

			s := newStore(t)
			h := header("sess-fail", "agent-"+c.provider, transcript.KindScheduled)
			require.NoError(t, s.Create(ctx, h))
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
	for _, p := range transcript.Providers() {
		n, err := transcript.NewNormalizer(p)
		require.NoError(t, err)
		evs, err := n.Feed([]byte("   "))
		require.NoError(t, err)
		require.Empty(t, evs)
		_, err = n.Feed([]byte(`{"type": `))
		require.Error(t, err, p)
		// A stream cut off before its terminal record is a failure, never a success.
		_, out := n.Close()
		require.Equal(t, transcript.Failed, out.Status, p)
		require.Contains(t, out.Error, "without a terminal record")
	}
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
