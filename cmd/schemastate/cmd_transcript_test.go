package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/dsn"
	"github.com/schemastate/schemastate/transcript"
)

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "transcripts", name))
	require.NoError(t, err)
	return b
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
		require.NoError(t, r.cmd.Process.Kill())
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
		blocker := tempFile(t, "file", nil)
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
	return tempFile(t, "file", nil)
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
