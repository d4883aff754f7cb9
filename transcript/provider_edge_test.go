package transcript_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/transcript"
)

// feed runs lines through a provider's normalizer and renders the events as
// the store would, so pairing is checked as a reader sees it.
func feed(t *testing.T, provider string, lines ...string) (*transcript.Transcript, transcript.Outcome) {
	t.Helper()
	s := newStore(t)
	require.NoError(t, s.Create(ctx, header("sess-edge", "agent-"+provider, transcript.KindRunInBackground)))
	n, err := transcript.NewNormalizer(provider)
	require.NoError(t, err)
	for i, l := range lines {
		evs, err := n.Feed([]byte(l))
		require.NoError(t, err, "line %d", i+1)
		require.NoError(t, s.Append(ctx, "sess-edge", "agent-"+provider, evs...))
	}
	rest, out := n.Close()
	require.NoError(t, s.Append(ctx, "sess-edge", "agent-"+provider, rest...))
	tr, err := s.Load("sess-edge", "agent-"+provider)
	require.NoError(t, err)
	return tr, out
}

// Codex reports a command the approval policy refused as status "declined"
// with no exit code: the tool did not run, so its result is a failure, never
// an ok with empty output. Any status other than "completed" is a failure.
func TestTranscript_CodexDeclinedCommandIsAFailedToolResult(t *testing.T) {
	tr, out := feed(t, transcript.ProviderCodex,
		`{"type":"thread.started","thread_id":"t1"}`,
		`{"type":"turn.started"}`,
		`{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"bash -lc 'rm -rf build'","aggregated_output":"","exit_code":null,"status":"in_progress"}}`,
		`{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"bash -lc 'rm -rf build'","aggregated_output":"","exit_code":null,"status":"declined"}}`,
		`{"type":"item.completed","item":{"id":"item_1","type":"mcp_tool_call","server":"fs","tool":"write","arguments":{"path":"x"},"result":null,"error":null,"status":"declined"}}`,
		`{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"I could not clean the build directory."}}`,
		`{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}`)
	require.Equal(t, transcript.Completed, out.Status)
	calls := tr.ToolCalls()
	require.Len(t, calls, 2)
	for _, c := range calls {
		require.NotNil(t, c.Result, c.Call.ID)
		require.True(t, c.Result.IsError, "%s: a declined tool call recorded as ok", c.Call.ID)
		require.Contains(t, c.Result.Error, "declined")
	}
	require.Equal(t, "I could not clean the build directory.", tr.FinalResponse())
}
