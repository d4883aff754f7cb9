package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/dbtest"
	"github.com/schemastate/schemastate/transcript"
)

// lifecycleRow reads the row of (ws, sess, agent) as stored.
func lifecycleRow(t *testing.T, db *dbtest.DB, ws, sess, agent string) *transcript.Entry {
	t.Helper()
	l, err := transcript.NewLifecycle(db.DB)
	require.NoError(t, err)
	e, err := l.Get(context.Background(), transcript.Identity{WorkspacePath: ws, SessionID: sess, AgentID: agent})
	require.NoError(t, err)
	return e
}

func countLifecycleRows(t *testing.T, db *dbtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM background_agent_log`).Scan(&n))
	return n
}

func fixtureLinesCLI(t *testing.T, name string) []string {
	t.Helper()
	return strings.SplitAfter(strings.TrimRight(string(readFixture(t, name)), "\n"), "\n")
}

// Issue 12 §3: an invalid child or session id is refused before anything is
// written — no lifecycle row left running for ever, no file, exit 2.
func TestCLI_Transcript_InvalidIDLeavesNoRowAndNoFile(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciled(t, db)
		root := filepath.Join(t.TempDir(), "conv")
		for _, id := range []string{"../../x", "..", "a/b", ".hidden", strings.Repeat("x", 300)} {
			for _, which := range []string{"--agent", "--session"} {
				args := map[string]string{"--agent": "a", "--session": "s"}
				args[which] = id
				code, out, errOut := transcriptCLI(t, string(readFixture(t, "claude_success.jsonl")), "record", "--root", root,
					"--session", args["--session"], "--agent", args["--agent"], "--provider", "claude", "--db", db.CLIDSN, "--workspace", "/ws")
				require.Equal(t, exitUsage, code, "%s %q: %s%s", which, id, out, errOut)
				require.Contains(t, errOut, "invalid id", "%s %q", which, id)
				require.Equal(t, 0, countLifecycleRows(t, db), "%s %q left a background_agent_log row", which, id)
				_, err := os.Stat(root)
				require.True(t, os.IsNotExist(err), "%s %q wrote below the root", which, id)
			}
		}
	})
}

// Issue 12 §3: a record process stopped mid-stream by SIGTERM or SIGINT (how
// a host cancels a child) ends the transcript AND its lifecycle row as
// cancelled, with the same end time and error — not a failed document beside
// a row still running with transcript_status 'ok'. The provider's stream is
// still open when the signal comes: the stop must not wait for it.
func TestCLI_Transcript_SignalEndsTranscriptAndRowAsCancelled(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				reconciled(t, db)
				root := t.TempDir()
				const ws, sess, agent = "/ws", "s", "cancelled-child"
				r := startRecording(t, "--root", root, "--session", sess, "--agent", agent, "--provider", "claude",
					"--db", db.CLIDSN, "--workspace", ws)
				r.write(t, fixtureLinesCLI(t, "claude_success.jsonl")[:10]...)
				logPath := filepath.Join(root, "background", sess, agent+".events.jsonl")
				require.Eventually(t, func() bool {
					tr, err := transcript.LoadPath(logPath)
					return err == nil && len(tr.ToolCalls()) == 1 && tr.ToolCalls()[0].Result != nil
				}, 20*time.Second, 5*time.Millisecond)
				require.NoError(t, r.cmd.Process.Signal(sig))
				code := r.wait(t)
				require.Equal(t, exitOK, code, r.out.String())
				require.Contains(t, r.out.String(), "cancelled "+filepath.Join(root, "background", sess, agent+".json"))

				tr, err := transcript.LoadPath(filepath.Join(root, "background", sess, agent+".json"))
				require.NoError(t, err)
				require.Equal(t, transcript.Cancelled, tr.Status)
				require.Contains(t, tr.Error, "cancelled")
				require.Len(t, tr.ToolCalls(), 1, "what arrived before the signal is kept")
				row := lifecycleRow(t, db, ws, sess, agent)
				require.NotNil(t, row)
				require.Equal(t, "cancelled", row.Status)
				require.NotNil(t, row.CompletedAt)
				require.WithinDuration(t, *tr.EndedAt, *row.CompletedAt, time.Millisecond)
				require.Equal(t, tr.Error, row.Error)
				require.Equal(t, "ok", row.TranscriptStatus)
				require.NotContains(t, r.out.String(), "context canceled")
			})
		})
	}
}

// Issue 12 §3: --timeout ends a child whose stream never ends as timed_out,
// transcript and row alike.
func TestCLI_Transcript_TimeoutEndsTranscriptAndRowAsTimedOut(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciled(t, db)
		root := t.TempDir()
		const ws, sess, agent = "/ws", "s", "slow-child"
		r := startRecording(t, "--root", root, "--session", sess, "--agent", agent, "--provider", "codex",
			"--db", db.CLIDSN, "--workspace", ws, "--timeout", "1500ms")
		r.write(t, fixtureLinesCLI(t, "codex_success.jsonl")[:3]...)
		code := r.wait(t) // stdin stays open: only the timeout ends it
		require.Equal(t, exitOK, code, r.out.String())
		require.True(t, strings.HasPrefix(r.out.String(), "timed_out "), r.out.String())
		tr, err := transcript.LoadPath(filepath.Join(root, "background", sess, agent+".json"))
		require.NoError(t, err)
		require.Equal(t, transcript.TimedOut, tr.Status)
		require.Contains(t, tr.Error, "--timeout 1.5s")
		row := lifecycleRow(t, db, ws, sess, agent)
		require.Equal(t, "timed_out", row.Status)
		require.NotNil(t, row.CompletedAt)
		require.Equal(t, tr.Error, row.Error)
		require.Equal(t, "ok", row.TranscriptStatus)
	})
	code, _, errOut := transcriptCLI(t, "", "record", "--root", t.TempDir(), "--session", "s", "--agent", "a", "--provider", "codex", "--timeout", "-1s")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "negative")
}

// Issue 12 §3: a cancel that arrives while record is finishing — the
// document already published, the row's update waiting on a lock — must not
// abort that update: the two end the same, exactly once.
func TestCLI_Transcript_CancelWhileFinishingLeavesBothAgreeing(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciled(t, db)
		root := t.TempDir()
		const ws, sess, agent = "/ws", "s", "finishing-child"
		r := startRecordingWith(t, []string{"SCHEMASTATE_LOG=info"}, "--root", root, "--session", sess, "--agent", agent, "--provider", "claude",
			"--db", db.CLIDSN, "--workspace", ws)
		require.Eventually(t, func() bool {
			row := lifecycleRow(t, db, ws, sess, agent)
			return row != nil && row.TranscriptStatus == "ok"
		}, 20*time.Second, 5*time.Millisecond, "create recorded")
		release := db.LockWrites(t, "background_agent_log")
		r.write(t, fixtureLinesCLI(t, "claude_success.jsonl")...)
		require.NoError(t, r.stdin.Close())
		doc := filepath.Join(root, "background", sess, agent+".json")
		require.Eventually(t, func() bool { _, err := os.Stat(doc); return err == nil }, 20*time.Second, 5*time.Millisecond)
		// The document is published; the row's end waits on the lock.
		require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
		// The stop has reached the command (it logs it as it comes) while
		// the row's end still waits on the lock.
		require.Eventually(t, func() bool {
			return strings.Contains(r.out.String(), "stop requested") && strings.Contains(r.out.String(), "terminated signal received")
		}, 20*time.Second, 5*time.Millisecond)
		release()
		code := r.wait(t)
		require.Equal(t, exitOK, code, r.out.String())

		tr, err := transcript.LoadPath(doc)
		require.NoError(t, err)
		require.Equal(t, transcript.Completed, tr.Status, "the stream had ended completed before the signal")
		row := lifecycleRow(t, db, ws, sess, agent)
		require.Equal(t, "completed", row.Status, r.out.String())
		require.NotNil(t, row.CompletedAt)
		require.WithinDuration(t, *tr.EndedAt, *row.CompletedAt, time.Millisecond)
		require.Equal(t, "ok", row.TranscriptStatus)
	})
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

// Issue 12 §4: ls and recover on a --root that does not exist say so and
// fail, instead of reporting an empty store.
func TestCLI_Transcript_MissingRootIsAnError(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciled(t, db)
		missing := filepath.Join(t.TempDir(), "no-such-root")
		for name, args := range map[string][]string{
			"ls":            {"ls", "--root", missing, "--session", "s"},
			"ls with db":    {"ls", "--root", missing, "--session", "s", "--db", db.CLIDSN},
			"recover":       {"recover", "--root", missing, "--db", db.CLIDSN},
			"recover, file": {"recover", "--root", dbPathOrFile(t, db), "--db", db.CLIDSN},
		} {
			code, out, errOut := transcriptCLI(t, "", args...)
			require.Equal(t, exitUsage, code, name)
			require.Empty(t, out, name)
			require.Regexp(t, `--root .*: (no such directory|not a directory)`, errOut, name)
		}
	})
}

// dbPathOrFile names a regular file (not a directory).
func dbPathOrFile(t *testing.T, _ *dbtest.DB) string {
	f := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	return f
}

// Issue 12 §4: show on a file that is not a transcript says that, not "not
// found": a provider stream, another JSON document, a directory.
func TestCLI_Transcript_ShowNamesAFileThatIsNotATranscript(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "package.json")
	require.NoError(t, os.WriteFile(other, []byte(`{"name":"x","version":"1.0.0"}`), 0o644))
	stray := filepath.Join(dir, "stray.events.jsonl")
	require.NoError(t, os.WriteFile(stray, readFixture(t, "codex_success.jsonl"), 0o644))
	for _, path := range []string{filepath.Join("..", "..", "testdata", "transcripts", "claude_success.jsonl"), other, stray, dir} {
		code, _, errOut := transcriptCLI(t, "", "show", path)
		require.Equal(t, exitFoundWrong, code, path)
		require.Contains(t, errOut, "not a transcript", path)
		require.NotContains(t, errOut, "not found", path)
	}
	code, _, errOut := transcriptCLI(t, "", "show", filepath.Join(dir, "nobody.json"))
	require.Equal(t, exitFoundWrong, code)
	require.Contains(t, errOut, "not found", "a name that holds nothing is still not found")
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
