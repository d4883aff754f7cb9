package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/transcript"
)

// osc52 writes "hi" to the terminal's clipboard when printed raw.
const osc52 = "\x1b]52;c;aGk=\x07"

// `transcript show` prints provider text with its control characters
// escaped: an OSC 52 sequence (and a CSI, a CR, a C1 control) is shown, never
// reaches the terminal; --json is unchanged, the text exact after decoding.
func TestCLI_TranscriptShow_EscapesControlCharactersInText(t *testing.T) {
	root := filepath.Join(t.TempDir(), "conversation")
	s, err := transcript.NewStore(root)
	require.NoError(t, err)
	text := "copy " + osc52 + " then \x1b[2J\rclear\u009b1m, tab\tand\nnewline kept"
	require.NoError(t, s.Create(context.Background(), transcript.Header{ParentSessionID: "sess-esc", AgentID: "agent-esc",
		Kind: transcript.KindScheduled, Model: "m" + osc52, StartedAt: time.Now()}))
	require.NoError(t, s.Append(context.Background(), "sess-esc", "agent-esc",
		transcript.Event{Type: transcript.AssistantMessage, Text: text},
		transcript.Event{Type: transcript.ToolCall, Call: &transcript.Call{ID: "c1", Name: "Bash" + osc52, Input: json.RawMessage(`{"cmd":"\u009b"}`)}},
		transcript.Event{Type: transcript.ToolResult, Result: &transcript.Result{CallID: "c1", Output: "out" + osc52}}))

	code, out, stderr := cli(t, "transcript", "show", "--root", root, "--session", "sess-esc", "--agent", "agent-esc")
	require.Equal(t, exitOK, code, stderr)
	for _, raw := range []string{"\x1b", "\x07", "\r", "\u009b"} {
		require.NotContains(t, out, raw)
	}
	require.Contains(t, out, `copy \x1b]52;c;aGk=\x07 then \x1b[2J\x0dclear\u009b1m, tab`+"\tand\n    newline kept")
	require.Contains(t, out, `model m\x1b]52;c;aGk=\x07`)
	require.Contains(t, out, `Bash\x1b]52;c;aGk=\x07 c1  {"cmd":"\u009b"}`)
	require.Contains(t, out, `out\x1b]52;c;aGk=\x07`)

	code, js, stderr := cli(t, "transcript", "show", "--root", root, "--session", "sess-esc", "--agent", "agent-esc", "--json")
	require.Equal(t, exitOK, code, stderr)
	var doc transcript.Transcript
	require.NoError(t, json.Unmarshal([]byte(js), &doc))
	require.Equal(t, text, doc.Events[0].Text)
	require.Equal(t, "m"+osc52, doc.Model)
	want, err := s.Load("sess-esc", "agent-esc")
	require.NoError(t, err)
	wantJSON, err := json.MarshalIndent(want, "", "  ")
	require.NoError(t, err)
	require.Equal(t, string(wantJSON)+"\n", js, "--json prints what the transcript is, as before")
}

// The text output of `subagents` escapes what writers sent: a tool call id
// carrying an OSC 52 sequence is shown escaped, on one line; --json keeps
// the value as stored.
func TestCLI_Subagents_TextEscapesControlCharacters(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		subagentStore(t, db)
		w, err := capture.NewWriter(context.Background(), db.DB, db.Dialect, capture.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		defer w.Close()
		id := "toolu_" + osc52 + "\tx\ny"
		require.NoError(t, w.Record(context.Background(), capture.Frame{SessionID: "s2", TaskID: "k2", ToolCallID: id,
			ExecutionID: cliExec, ObservedAt: time.Now(), ToolStatus: "in_progress"}))

		code, out, stderr := cli(t, "subagents", "--db", db.CLIDSN, "--session", "s2")
		require.Equal(t, exitOK, code, stderr)
		require.NotContains(t, out, "\x1b")
		require.NotContains(t, out, "\x07")
		require.Contains(t, out, `toolu_\x1b]52;c;aGk=\x07\tx\ny`)
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "toolu_") {
				require.Contains(t, line, cliExec, "the row stays on one line")
			}
		}

		code, js, stderr := cli(t, "subagents", "--db", db.CLIDSN, "--session", "s2", "--json")
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, js, `toolu_\u001b]52;c;aGk=\u0007\tx\ny`)
	})
}
