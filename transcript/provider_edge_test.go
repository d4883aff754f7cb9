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
	n, err := transcript.NewNormalizer(provider)
	require.NoError(t, err)
	return feedTo(t, provider, n, lines...)
}

// feedTo is feed through a normalizer the caller built (with options).
func feedTo(t *testing.T, provider string, n transcript.Normalizer, lines ...string) (*transcript.Transcript, transcript.Outcome) {
	t.Helper()
	s, h := created(t, "sess-edge", "agent-"+provider, transcript.KindRunInBackground)
	out := appendStream(t, s, h, n, lines)
	tr, err := s.Load(h.ParentSessionID, h.AgentID)
	require.NoError(t, err)
	return tr, out
}

// appendStream feeds lines through n and appends the events it makes to h's
// transcript in s, then what n's Close makes, as a recording does; it
// returns the stream's outcome.
func appendStream(t *testing.T, s *transcript.Store, h transcript.Header, n transcript.Normalizer, lines []string) transcript.Outcome {
	t.Helper()
	for i, l := range lines {
		evs, err := n.Feed([]byte(l))
		require.NoError(t, err, "line %d", i+1)
		require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, evs...))
	}
	rest, out := n.Close()
	require.NoError(t, s.Append(ctx, h.ParentSessionID, h.AgentID, rest...))
	return out
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

// A host whose tool events reach the store on separate paths can append a
// tool's result before its call. The rendered transcript (running or
// finished) still pairs them: the call carries the result and no unpaired
// result is left over; the call keeps its own place in the order.
func TestTranscript_ResultAppendedBeforeItsCallIsStillPaired(t *testing.T) {
	s, _ := created(t, "sess-ooo", "agent-ooo", transcript.KindRunInBackground)
	require.NoError(t, s.Append(ctx, "sess-ooo", "agent-ooo", msg(transcript.UserMessage, "go")))
	require.NoError(t, s.Append(ctx, "sess-ooo", "agent-ooo", result("c1", "42 files", false, "")))
	require.NoError(t, s.Append(ctx, "sess-ooo", "agent-ooo", call("c1", "Glob", `{"pattern":"**"}`), msg(transcript.AssistantMessage, "42")))
	check := func(tr *transcript.Transcript) {
		t.Helper()
		var types []transcript.EventType
		for _, e := range tr.Events {
			types = append(types, e.Type)
		}
		require.Equal(t, []transcript.EventType{transcript.UserMessage, transcript.ToolCall, transcript.AssistantMessage}, types)
		c := tr.ToolCalls()[0]
		require.NotNil(t, c.Result, "the call lost its result")
		require.Equal(t, "42 files", c.Result.Output)
		require.Equal(t, int64(2), c.Result.Seq)
		require.Equal(t, int64(4), tr.LastSeq)
	}
	tr, err := s.Load("sess-ooo", "agent-ooo")
	require.NoError(t, err)
	check(tr)
	require.NoError(t, s.Finish(ctx, "sess-ooo", "agent-ooo", transcript.End{Status: transcript.Completed}))
	tr, err = s.Load("sess-ooo", "agent-ooo")
	require.NoError(t, err)
	check(tr)
}

// OpenCode announces a tool call as "pending" before it runs. A session that
// fails (or a stream that ends) before the call leaves pending still made
// that call: it stays in the transcript, without a result, and none is
// invented.
func TestTranscript_OpenCodePendingToolCallSurvivesAFailure(t *testing.T) {
	tr, out := feed(t, transcript.ProviderOpenCode,
		`{"type":"message.updated","properties":{"info":{"id":"m1","role":"user"}}}`,
		`{"type":"message.part.updated","properties":{"part":{"id":"p1","messageID":"m1","type":"text","text":"Delete the build directory."}}}`,
		`{"type":"message.updated","properties":{"info":{"id":"m2","role":"assistant","modelID":"gpt-5"}}}`,
		`{"type":"message.part.updated","properties":{"part":{"id":"p2","messageID":"m2","type":"tool","callID":"call_1","tool":"bash","state":{"status":"pending","input":{"command":"rm -rf build"}}}}}`,
		`{"type":"session.error","properties":{"error":{"name":"MessageAbortedError","data":{"message":"aborted"}}}}`)
	require.Equal(t, transcript.Failed, out.Status)
	require.Contains(t, out.Error, "MessageAbortedError")
	calls := tr.ToolCalls()
	require.Len(t, calls, 1, "the pending call was lost")
	require.Equal(t, "bash", calls[0].Call.Name)
	require.Equal(t, "call_1", calls[0].Call.ID)
	require.JSONEq(t, `{"command":"rm -rf build"}`, string(calls[0].Call.Input))
	require.Nil(t, calls[0].Result)
}

// Without system/init, the model is the first the child's own assistant
// records report — never a sub-agent's, never Claude Code's "<synthetic>".
func TestTranscript_ClaudeModelFromAssistantRecords(t *testing.T) {
	_, out := feed(t, transcript.ProviderClaude,
		`{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error: 529"}]},"parent_tool_use_id":null,"session_id":"s"}`,
		`{"type":"assistant","message":{"model":"claude-haiku-4-5","content":[{"type":"text","text":"sub"}]},"parent_tool_use_id":"toolu_1","session_id":"s"}`,
		`{"type":"assistant","message":{"model":"claude-opus-4-1","content":[{"type":"text","text":"done"}]},"parent_tool_use_id":null,"session_id":"s"}`,
		`{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s"}`)
	require.Equal(t, transcript.Completed, out.Status)
	require.Equal(t, "claude-opus-4-1", out.Model)
}

// `opencode run --format json` has no terminal line: a stream cut off inside
// a step, or right after a step that asked for tools, is not a completed run.
func TestTranscript_OpenCodeRunCutOffIsFailed(t *testing.T) {
	lines := fixtureLines(t, "opencode_run_success.jsonl")
	for name, cut := range map[string][]string{
		"inside a step":           lines[:len(lines)-1],
		"after a tool-calls step": lines[:4],
	} {
		tr, out := feed(t, transcript.ProviderOpenCode, cut...)
		require.Equal(t, transcript.Failed, out.Status, name)
		require.Contains(t, out.Error, "ended before its last step finished", name)
		require.NotEmpty(t, tr.Events, name)
	}
	_, out := feed(t, transcript.ProviderOpenCode, lines...)
	require.Equal(t, transcript.Completed, out.Status)
}
