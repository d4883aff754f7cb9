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
	"github.com/schemastate/schemastate/internal/dsn"
	"github.com/schemastate/schemastate/reconcile"
	"github.com/schemastate/schemastate/transcript"
)

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "transcripts", name))
	require.NoError(t, err)
	return b
}

func reconciled(t *testing.T, db *dbtest.DB) {
	t.Helper()
	db.Host(t)
	rep, _ := reconcile.Reconcile(context.Background(), db.DB)
	require.NotEqual(t, reconcile.Failed, rep.Step(reconcile.StepShape).Status, "%+v", rep.Steps)
}

type lsOutput struct {
	Agents   []transcript.IndexEntry `json:"agents"`
	Problems int                     `json:"agents_with_problems"`
}

// Acceptance test 5: a server process records background children and exits
// (one of them killed mid-run with SIGKILL); a NEW process then locates every
// child transcript from the persisted session index (background_agent_log and
// the transcript directory) — no ui_events, no scrollback, no in-memory
// registry — and reads it. The killed child is found running, and once the
// host's lifecycle has ended it, recover finishes it as interrupted.
func TestCLI_Transcript_AT5_RestartAndLocate(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciled(t, db)
		root := filepath.Join(t.TempDir(), "builder", "conversation")
		const ws, sess = "/workspaces/pulse", "schedule-cron--fba2d19b_1787243435990159000"
		common := []string{"--root", root, "--session", sess, "--db", db.CLIDSN, "--workspace", ws}

		// The "server": separate processes that record and exit.
		code, out := runBinary(t, readFixture(t, "codex_success.jsonl"), append([]string{"record"}, append(common, "--agent", "workshop-background-task-1", "--provider", "codex",
			"--kind", "run_in_background", "--execution", "exec-1", "--model", "gpt-5-codex", "--prompt", "Vet ./keys.")...)...)
		require.Equal(t, 0, code, out)
		code, out = runBinary(t, readFixture(t, "opencode_failure.jsonl"), append([]string{"record"}, append(common, "--agent", "measurement-validator", "--provider", "opencode",
			"--kind", "scheduled", "--execution", "exec-2")...)...)
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "failed ")

		// A child killed mid-run: its stream is still open when the server dies.
		r := startRecording(t, append(common, "--agent", "killed-child", "--provider", "claude", "--kind", "todo_delegate")...)
		r.write(t, fixtureLinesCLI(t, "claude_success.jsonl")[:10]...)
		logPath := filepath.Join(root, "background", sess, "killed-child.events.jsonl")
		require.Eventually(t, func() bool {
			tr, err := transcript.LoadPath(logPath)
			return err == nil && len(tr.ToolCalls()) == 1 && tr.ToolCalls()[0].Result != nil
		}, 20*time.Second, 5*time.Millisecond)
		require.NoError(t, r.cmd.Process.Signal(syscall.SIGKILL))
		_ = r.cmd.Wait()

		// After the restart: a new process, nothing in memory.
		code, out = runBinary(t, nil, "ls", "--root", root, "--session", sess, "--db", db.CLIDSN, "--json")
		require.Equal(t, 0, code, out)
		var ls lsOutput
		require.NoError(t, json.Unmarshal([]byte(out), &ls))
		require.Len(t, ls.Agents, 3)
		byAgent := map[string]transcript.IndexEntry{}
		for _, a := range ls.Agents {
			byAgent[a.AgentID] = a
		}
		ok := byAgent["workshop-background-task-1"]
		require.Len(t, ok.Lifecycle, 1)
		require.Equal(t, "completed", ok.Lifecycle[0].Status)
		require.Equal(t, "ok", ok.Lifecycle[0].TranscriptStatus)
		require.Equal(t, "gpt-5-codex", ok.Lifecycle[0].Model)
		require.Equal(t, "failed", byAgent["measurement-validator"].Lifecycle[0].Status)
		require.Contains(t, byAgent["measurement-validator"].Lifecycle[0].Error, "APIError: Rate limit reached")
		killed := byAgent["killed-child"]
		require.Equal(t, "running", killed.Lifecycle[0].Status)
		require.Equal(t, transcript.Running, killed.Transcript.Status)

		// Locate by the persisted reference, then read it directly.
		code, out = runBinary(t, nil, "show", ok.Lifecycle[0].TranscriptPath, "--json")
		require.Equal(t, 0, code, out)
		var tr transcript.Transcript
		require.NoError(t, json.Unmarshal([]byte(out), &tr))
		require.Equal(t, transcript.Completed, tr.Status)
		require.Equal(t, "Vet ./keys.", tr.Events[0].Text)
		require.Contains(t, tr.FinalResponse(), "There are 2 Go files under ./keys")
		require.Len(t, tr.ToolCalls(), 2)
		require.True(t, tr.ToolCalls()[1].Result.IsError)

		code, out = runBinary(t, nil, "show", "--root", root, "--session", sess, "--agent", "killed-child", "--json")
		require.Equal(t, 0, code, out)
		require.NoError(t, json.Unmarshal([]byte(out), &tr))
		require.Equal(t, transcript.Running, tr.Status)
		require.Equal(t, "Count the Go files under ./keys and tell me whether `go vet ./keys` passes.", tr.Events[0].Text)

		// recover leaves the killed child alone while its lifecycle row is running…
		code, out = runBinary(t, nil, "recover", "--root", root, "--db", db.CLIDSN, "--json")
		require.Equal(t, 0, code, out)
		// …and finishes it once the host's lifecycle has ended it.
		l, err := transcript.NewLifecycle(db.DB)
		require.NoError(t, err)
		_, err = l.End(context.Background(), transcript.Identity{WorkspacePath: ws, SessionID: sess, AgentID: "killed-child"}, transcript.Failed, time.Now(), "server restarted")
		require.NoError(t, err)
		code, out = runBinary(t, nil, "ls", "--root", root, "--session", sess, "--db", db.CLIDSN)
		require.Equal(t, exitFoundWrong, code, out)
		require.Contains(t, out, "run recover")

		code, out = runBinary(t, nil, "recover", "--root", root, "--db", db.CLIDSN, "--json")
		require.Equal(t, exitFoundWrong, code, out)
		var rep transcript.RecoverReport
		require.NoError(t, json.Unmarshal([]byte(out), &rep))
		require.Len(t, rep.Finished, 1)
		require.Equal(t, "killed-child", rep.Finished[0].AgentID)
		code, out = runBinary(t, nil, "show", "--root", root, "--session", sess, "--agent", "killed-child", "--json")
		require.Equal(t, 0, code, out)
		require.NoError(t, json.Unmarshal([]byte(out), &tr))
		require.Equal(t, transcript.Failed, tr.Status)
		require.True(t, strings.HasPrefix(tr.Error, "interrupted: "), tr.Error)

		code, _ = runBinary(t, nil, "recover", "--root", root, "--db", db.CLIDSN)
		require.Equal(t, 0, code, "nothing left to recover")
	})
}

func TestCLI_Transcript_ShowRendersAndFlagsCorruption(t *testing.T) {
	root := t.TempDir()
	code, out, errOut := transcriptCLI(t, string(readFixture(t, "claude_failure.jsonl")),
		"record", "--root", root, "--session", "s1", "--agent", "a1", "--provider", "claude", "--kind", "scheduled")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "failed ")

	code, out, _ = transcriptCLI(t, "", "show", "--root", root, "--session", "s1", "--agent", "a1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "status failed  error: error_max_turns")
	require.Contains(t, out, "Bash toolu_01Mn2oP3qR4sT5uV6wX7yZ8a")
	require.Contains(t, out, "→ FAILED")
	require.Contains(t, out, "Command timed out after 2m 0.0s")

	doc := filepath.Join(root, "background", "s1", "a1.json")
	require.NoError(t, os.WriteFile(doc, []byte(`{"format":"nope"`), 0o644))
	code, _, errOut = transcriptCLI(t, "", "show", doc)
	require.Equal(t, exitFoundWrong, code)
	require.Contains(t, errOut, "corrupt")
	code, out, _ = transcriptCLI(t, "", "ls", "--root", root, "--session", "s1")
	require.Equal(t, exitFoundWrong, code)
	require.Contains(t, out, "unreadable")

	code, _, errOut = transcriptCLI(t, "", "show", filepath.Join(root, "background", "s1", "nobody.json"))
	require.Equal(t, exitFoundWrong, code)
	require.Contains(t, errOut, "not found")
}

func TestCLI_Transcript_UsageAndDatabaseErrorsExit2(t *testing.T) {
	root := t.TempDir()
	for name, args := range map[string][]string{
		"no subcommand":         {},
		"unknown subcommand":    {"tail"},
		"show without target":   {"show"},
		"show path and flags":   {"show", "x.json", "--root", root},
		"ls without session":    {"ls", "--root", root},
		"recover without root":  {"recover"},
		"record bad provider":   {"record", "--root", root, "--session", "s", "--agent", "a", "--provider", "cursor"},
		"show traversal":        {"show", "--root", root, "--session", "s", "--agent", ".."},
		"record traversal":      {"record", "--root", root, "--session", "../etc", "--agent", "a", "--provider", "codex"},
		"ls unreachable db":     {"ls", "--root", root, "--session", "s", "--db", "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"},
		"recover missing table": {"recover", "--root", root, "--db", "sqlite:" + filepath.Join(root, "empty.db")},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, _ := transcriptCLI(t, "", args...)
			require.Equal(t, exitUsage, code)
		})
	}
	// recover with the table present but nothing to do is not an error.
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciled(t, db)
		code, out, errOut := transcriptCLI(t, "", "recover", "--root", t.TempDir(), "--db", db.CLIDSN)
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, out, "0 finished, 0 rows ended, 0 alive, 0 problems")
	})
}

// ls names a recorded persistence failure: the lifecycle row says the
// transcript write failed, so the listing must not present it as auditable.
func TestCLI_Transcript_LsReportsRecordedWriteFailure(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		reconciled(t, db)
		blocker := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(blocker, nil, 0o644))
		code, _, _ := transcriptCLI(t, string(readFixture(t, "codex_success.jsonl")), "record", "--root", filepath.Join(blocker, "conv"),
			"--session", "s", "--agent", "a", "--provider", "codex", "--db", db.CLIDSN, "--workspace", "/ws")
		require.Equal(t, exitFoundWrong, code)
		code, out, _ := transcriptCLI(t, "", "ls", "--root", t.TempDir(), "--session", "s", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitFoundWrong, code)
		var ls lsOutput
		require.NoError(t, json.Unmarshal([]byte(out), &ls))
		require.Len(t, ls.Agents, 1)
		require.Nil(t, ls.Agents[0].Transcript)
		require.Equal(t, "completed", ls.Agents[0].Lifecycle[0].Status)
		require.Contains(t, strings.Join(ls.Agents[0].Problems, "\n"), "persistence failure recorded")
	})
}

// A database error says what and where: --db given empty is refused (it used
// to reach the lifecycle as nil and panic), and a --db without
// background_agent_log is named — which database, which table — before
// anything is read or written, by every subcommand that takes --db.
func TestCLI_Transcript_DatabaseErrorsNameTheDatabase(t *testing.T) {
	root := t.TempDir()
	code, _, errOut := transcriptCLI(t, "", "recover", "--root", root, "--db", "")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--db")

	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		target, err := dsn.Parse(db.CLIDSN)
		require.NoError(t, err)
		root := filepath.Join(t.TempDir(), "conv")
		for name, args := range map[string][]string{
			"ls":      {"ls", "--root", root, "--session", "s", "--db", db.CLIDSN},
			"recover": {"recover", "--root", root, "--db", db.CLIDSN},
			"record":  {"record", "--root", root, "--session", "s", "--agent", "a", "--provider", "codex", "--db", db.CLIDSN, "--workspace", "/ws"},
		} {
			code, _, errOut := transcriptCLI(t, string(readFixture(t, "codex_success.jsonl")), args...)
			require.Equal(t, exitUsage, code, name)
			require.Contains(t, errOut, target.Display, name)
			require.Contains(t, errOut, "background_agent_log", name)
		}
		_, err = os.Stat(root)
		require.True(t, os.IsNotExist(err), "record wrote a transcript whose lifecycle it could not record")
	})
}

// record's one line of output must not present a transcript that was not
// written as if it were there: when persistence failed, the line says so.
func TestCLI_Transcript_RecordSaysWhenTheTranscriptWasNotWritten(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
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
