package transcript_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/transcript"
)

// eventRow is what tells a transcript event apart: its type, what it says
// (text or tool name) and whose it is (the sub-agent's Task call, or "").
type eventRow struct {
	Type   transcript.EventType
	What   string
	Parent string
}

func eventRows(tr *transcript.Transcript) []eventRow {
	var out []eventRow
	for _, e := range tr.Events {
		r := eventRow{Type: e.Type, Parent: e.ParentToolCallID}
		if e.Call != nil {
			r.What = e.Call.Name
		} else {
			r.What = e.Text
		}
		out = append(out, r)
	}
	return out
}

const (
	claudeTaskCall     = "toolu_01Tk5SbAg3nT9qW2eR4tY6uI"
	claudeChildPrompt  = "Where is keys.WriteOnce called, and can two callers race?"
	claudeChildOpening = "I'll have a sub-agent find the call sites."
	claudeSubPrompt    = "Find every call site of keys.WriteOnce in this repository and report file:line for each."
	claudeSubFinal     = "keys.WriteOnce is called at backfill/backfill.go:88 and reconcile/execution.go:57."
	claudeChildFinal   = "Two call sites: backfill/backfill.go:88 and reconcile/execution.go:57. Both run inside the reconcile transaction, so WriteOnce never races itself."
)

// A Claude child that calls its own Task tool carries its sub-agent's
// records in its stream, tagged with parent_tool_use_id. They are kept but
// marked with the Task call they belong to (parent_tool_call_id), so the
// sub-agent's prompt is not read as a prompt delivered to the child, nor its
// messages and tool calls as the child's — in the running transcript (read
// from the log) and in the finished document alike. The child's own final
// response is its own last message.
func TestTranscript_ClaudeSubAgentTrafficIsMarkedWithItsTaskCall(t *testing.T) {
	s := newStore(t)
	h := header("sess-sub", "agent-claude-sub", transcript.KindRunInBackground)
	h.Provider = transcript.ProviderClaude
	require.NoError(t, s.Create(ctx, h))
	n, err := transcript.NewNormalizer(transcript.ProviderClaude)
	require.NoError(t, err)
	out := appendStream(t, s, h, n, fixtureLines(t, "claude_subagent.jsonl"))
	require.Equal(t, transcript.Completed, out.Status, out.Error)
	require.Equal(t, claudeChildFinal, out.FinalText)

	want := []eventRow{
		{Type: transcript.UserMessage, What: claudeChildPrompt},
		{Type: transcript.AssistantMessage, What: claudeChildOpening},
		{Type: transcript.ToolCall, What: "Task"},
		{Type: transcript.UserMessage, What: claudeSubPrompt, Parent: claudeTaskCall},
		{Type: transcript.AssistantMessage, What: "Searching for WriteOnce.", Parent: claudeTaskCall},
		{Type: transcript.ToolCall, What: "Grep", Parent: claudeTaskCall},
		{Type: transcript.AssistantMessage, What: claudeSubFinal, Parent: claudeTaskCall},
		{Type: transcript.AssistantMessage, What: claudeChildFinal},
	}
	check := func(tr *transcript.Transcript) {
		t.Helper()
		require.Equal(t, want, eventRows(tr))
		require.Equal(t, claudeChildFinal, tr.FinalResponse())
		for _, c := range tr.ToolCalls() {
			require.NotNil(t, c.Result, "%s lost its result", c.Call.Name)
		}
		task := tr.ToolCalls()[0]
		require.Equal(t, claudeTaskCall, task.Call.ID)
		require.Equal(t, claudeSubFinal, task.Result.Output, "the Task call's own result is the child's")
	}
	running, err := s.Load(h.ParentSessionID, h.AgentID)
	require.NoError(t, err)
	require.Equal(t, transcript.Running, running.Status)
	check(running)

	require.NoError(t, s.Finish(ctx, h.ParentSessionID, h.AgentID, transcript.End{Status: out.Status, Error: out.Error}))
	done, err := s.Load(h.ParentSessionID, h.AgentID)
	require.NoError(t, err)
	require.Equal(t, transcript.Completed, done.Status)
	check(done)

	// The document spells the mark parent_tool_call_id, and only on the
	// sub-agent's events (omitted on the child's own).
	raw, err := os.ReadFile(done.Path)
	require.NoError(t, err)
	var doc struct {
		Events []map[string]json.RawMessage `json:"events"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	var marks []string
	for _, e := range doc.Events {
		if v, ok := e["parent_tool_call_id"]; ok {
			marks = append(marks, string(v))
		}
	}
	require.Equal(t, []string{`"` + claudeTaskCall + `"`, `"` + claudeTaskCall + `"`, `"` + claudeTaskCall + `"`, `"` + claudeTaskCall + `"`}, marks)
}

// A child cut off while its sub-agent is still talking (the stream ends
// right after the sub-agent's last message): the child's final response is
// its own last message, never the sub-agent's.
func TestTranscript_ClaudeFinalResponseIsNeverASubAgentMessage(t *testing.T) {
	lines := fixtureLines(t, "claude_subagent.jsonl")
	cut := 0
	for i, l := range lines {
		if strings.Contains(l, claudeSubFinal) {
			cut = i + 1
			break
		}
	}
	require.NotZero(t, cut)
	tr, out := feed(t, transcript.ProviderClaude, lines[:cut]...)
	require.Equal(t, transcript.Failed, out.Status)
	require.Empty(t, out.FinalText)
	require.Equal(t, claudeSubFinal, tr.Events[len(tr.Events)-1].Text, "the sub-agent's message is kept")
	require.Equal(t, claudeTaskCall, tr.Events[len(tr.Events)-1].ParentToolCallID)
	require.Equal(t, claudeChildOpening, tr.FinalResponse())
}
