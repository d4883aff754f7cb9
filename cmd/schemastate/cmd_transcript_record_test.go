package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/transcript"
)

// record's one line of output must not present a transcript that was not
// written as if it were there: when persistence failed, the line says so.
func TestCLI_Transcript_RecordSaysWhenTheTranscriptWasNotWritten(t *testing.T) {
	blocker := tempFile(t, "file", nil)
	root := filepath.Join(blocker, "conv")
	code, out, errOut := transcriptCLI(t, string(readFixture(t, "codex_success.jsonl")), "record", "--root", root,
		"--session", "s", "--agent", "a", "--provider", "codex")
	require.Equal(t, exitFoundWrong, code)
	require.Contains(t, errOut, "not a directory")
	require.Equal(t, "completed "+filepath.Join(root, "background", "s", "a.json")+" (transcript NOT written: see the errors above)\n", out)

	root = t.TempDir()
	code, out, errOut = transcriptCLI(t, string(readFixture(t, "codex_success.jsonl")), "record", "--root", root,
		"--session", "s", "--agent", "a", "--provider", "codex")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "completed "+filepath.Join(root, "background", "s", "a.json")+"\n", out)
}

// --provider-session keeps only the child's own events when an OpenCode
// server is shared: the other child's failure no longer ends this one.
func TestCLI_Transcript_RecordProviderSessionFiltersASharedServer(t *testing.T) {
	stream := string(readFixture(t, "opencode_shared_server.jsonl"))
	record := func(extra ...string) string {
		root := t.TempDir()
		args := append([]string{"record", "--root", root, "--session", "s", "--agent", "a", "--provider", "opencode"}, extra...)
		_, out, _ := transcriptCLI(t, stream, args...)
		return out
	}
	require.True(t, strings.HasPrefix(record("--provider-session", "ses_4e7b2c9d1aa0Kq3wE5rT7yU9iO"), "completed "))
	require.False(t, strings.HasPrefix(record(), "completed "), "without the filter the other child's failure lands here")
}

// Issue 12 §3/§5: the model the provider stream reports is recorded when the
// host gave none, in the document and the lifecycle row; a model the host
// gave is never overwritten.
func TestCLI_Transcript_RecordKeepsTheStreamsModel(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciled(t, db)
		root := t.TempDir()
		for _, c := range []struct{ fixture, provider, agent, flag, want string }{
			{"claude_success.jsonl", "claude", "claude-no-model", "", "claude-sonnet-4-5-20250929"},
			{"opencode_success.jsonl", "opencode", "opencode-no-model", "", "claude-sonnet-4-5"},
			{"claude_success.jsonl", "claude", "claude-host-model", "host-given-model", "host-given-model"},
		} {
			args := []string{"record", "--root", root, "--session", "s", "--agent", c.agent, "--provider", c.provider, "--db", db.CLIDSN, "--workspace", "/ws"}
			if c.flag != "" {
				args = append(args, "--model", c.flag)
			}
			code, out, errOut := transcriptCLI(t, string(readFixture(t, c.fixture)), args...)
			require.Equal(t, exitOK, code, out+errOut)
			code, out, _ = transcriptCLI(t, "", "show", "--root", root, "--session", "s", "--agent", c.agent, "--json")
			require.Equal(t, exitOK, code)
			var tr transcript.Transcript
			require.NoError(t, json.Unmarshal([]byte(out), &tr))
			require.Equal(t, c.want, tr.Model, c.agent)
			require.Equal(t, c.want, lifecycleRow(t, db, "/ws", "s", c.agent).Model, c.agent)
		}
	})
}

// Issue 12 §4/§5: a stream none of whose lines is the provider's (the wrong
// --provider) is a loud error saying how many lines were ignored, and the
// transcript says the same — never a quiet empty transcript.
func TestCLI_Transcript_RecordWithNoProviderLineSaysWhatItIgnored(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciled(t, db)
		root := t.TempDir()
		lines := fixtureLinesCLI(t, "claude_success.jsonl")
		for _, provider := range []string{"opencode", "codex"} {
			code, out, errOut := transcriptCLI(t, strings.Join(lines, ""), "record", "--root", root, "--session", "s", "--agent", provider,
				"--provider", provider, "--db", db.CLIDSN, "--workspace", "/ws")
			require.Equal(t, exitFoundWrong, code, out)
			want := "no " + provider + " record in the stream: " + itoa(len(lines)) + " line(s) ignored"
			require.Contains(t, errOut, want)
			require.True(t, strings.HasPrefix(out, "failed "), out)
			tr, err := transcript.LoadPath(filepath.Join(root, "background", "s", provider+".json"))
			require.NoError(t, err)
			require.Equal(t, transcript.Failed, tr.Status)
			require.Contains(t, tr.Error, want)
			require.Empty(t, tr.Events)
			row := lifecycleRow(t, db, "/ws", "s", provider)
			require.Equal(t, "failed", row.Status)
			require.Contains(t, row.Error, want)
		}
	})
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Issue 12 §5: provider streams as users produce them, recorded through the
// CLI: `opencode run --format json` (success, and an APIError with status
// 500 kept as such), the /global/event wrapping, a Claude structured-output
// run (its final response is the result, not ""), and a Claude API error
// reported as subtype "success" with is_error (named by its status).
func TestCLI_Transcript_ProviderStreamsAsUsersProduceThem(t *testing.T) {
	const keysAnswer = "There are 2 Go files under ./keys (instant.go, keys.go), and `go vet ./keys` passes."
	for _, c := range []struct {
		fixture, provider string
		status            transcript.Status
		final, err        string
		calls             int
	}{
		{"opencode_run_success.jsonl", "opencode", transcript.Completed, keysAnswer, "", 2},
		{"opencode_run_api_error.jsonl", "opencode", transcript.Failed, "Loading yesterday's export.", "APIError: Internal server error (status 500)", 1},
		{"opencode_global_event.jsonl", "opencode", transcript.Completed, keysAnswer, "", 3},
		{"claude_structured_output.jsonl", "claude", transcript.Completed,
			`{"go_files":["instant.go","keys.go"],"count":2,"vet_passes":false,"vet_findings":["keys/keys.go:42:2: unreachable code"]}`, "", 2},
		{"claude_api_error_429.jsonl", "claude", transcript.Failed, "", "API error (status 429): API Error: 429 {", 1},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			root := t.TempDir()
			code, out, errOut := transcriptCLI(t, string(readFixture(t, c.fixture)), "record", "--root", root, "--session", "s", "--agent", "a",
				"--provider", c.provider, "--prompt", "the prompt")
			require.Equal(t, exitOK, code, errOut)
			require.True(t, strings.HasPrefix(out, string(c.status)+" "), out)
			code, out, _ = transcriptCLI(t, "", "show", "--root", root, "--session", "s", "--agent", "a", "--json")
			require.Equal(t, exitOK, code)
			var tr transcript.Transcript
			require.NoError(t, json.Unmarshal([]byte(out), &tr))
			require.Equal(t, c.status, tr.Status)
			if c.err == "" {
				require.Empty(t, tr.Error)
			} else {
				require.True(t, strings.HasPrefix(tr.Error, c.err), tr.Error)
			}
			if c.final != "" {
				require.Equal(t, c.final, tr.FinalResponse())
			}
			require.Len(t, tr.ToolCalls(), c.calls)
			for _, call := range tr.ToolCalls() {
				require.NotNil(t, call.Result, "every call paired: %s", call.Call.Name)
			}
		})
	}
}
