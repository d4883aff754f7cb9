//go:build !windows

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/transcript"
)

// stopped starts bin args, sends it SIGTERM once it has run for a moment,
// and returns how long it took to end after the signal, its exit code and
// its stderr; the test fails if it has not ended 5 s after.
func stopped(t *testing.T, bin string, args ...string) (time.Duration, int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("ended before the signal (%v): %s", err, stderr.String())
	case <-time.After(700 * time.Millisecond):
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	sent := time.Now()
	select {
	case <-done:
		return time.Since(sent), cmd.ProcessState.ExitCode(), stderr.String()
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("still running 5 s after SIGTERM: %s", stderr.String())
	}
	return 0, 0, ""
}

// SIGTERM ends `transcript show` and `transcript ls` within 1 s while they
// read a log that takes far longer (8 GiB, no newline), and `ingest
// /dev/zero` (which before went on reading, the signal caught and never
// checked), keeping what ingest had recorded.
func TestCLI_SIGTERMEndsTranscriptReadsAndIngestWithinOneSecond(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the CLI as child processes")
	}
	bin := cliBinary(t)
	root := filepath.Join(t.TempDir(), "conversation")
	s, err := transcript.NewStore(root)
	require.NoError(t, err)
	require.NoError(t, s.Create(context.Background(), transcript.Header{ParentSessionID: "sess-big", AgentID: "agent-big", Kind: transcript.KindScheduled}))
	p, err := s.PathsFor("sess-big", "agent-big")
	require.NoError(t, err)
	fi, err := os.Stat(p.Log)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(p.Log, fi.Size()+8<<30)) // sparse: no disk used

	for _, args := range [][]string{
		{"transcript", "show", p.Log},
		{"transcript", "show", "--json", "--root", root, "--session", "sess-big", "--agent", "agent-big"},
		{"transcript", "ls", "--root", root, "--session", "sess-big"},
	} {
		took, code, stderr := stopped(t, bin, args...)
		t.Logf("%v: ended %v after SIGTERM, exit %d", args, took, code)
		require.Less(t, took, time.Second, "%v: %s", args, stderr)
		require.NotEqual(t, exitOK, code, stderr)
		require.Contains(t, stderr, "context canceled", args)
	}

	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		sessionStore(t, db, map[string]string{"s1": "t1"})
		took, code, stderr := stopped(t, bin, "ingest", "--db", db.CLIDSN, "/dev/zero")
		t.Logf("ingest /dev/zero: ended %v after SIGTERM, exit %d", took, code)
		require.Less(t, took, time.Second, stderr)
		require.Equal(t, exitUsage, code, stderr)
		require.Contains(t, stderr, "schemastate ingest: interrupted")
	})
}

// A FIFO in place of a log, and a log that is a symbolic link to /dev/zero,
// are refused by `transcript show` and named by `transcript ls`, at once:
// before, the FIFO hung both and /dev/zero grew without end.
func TestCLI_TranscriptRefusesAFIFOAndADeviceInPlaceOfALog(t *testing.T) {
	root := filepath.Join(t.TempDir(), "conversation")
	s, err := transcript.NewStore(root)
	require.NoError(t, err)
	for _, c := range []struct {
		agent, what string
		plant       func(string) error
	}{
		{"agent-fifo", "named pipe (FIFO)", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"agent-zero", "symbolic link", func(p string) error { return os.Symlink("/dev/zero", p) }},
	} {
		require.NoError(t, s.Create(context.Background(), transcript.Header{ParentSessionID: "sess-dev", AgentID: c.agent, Kind: transcript.KindScheduled}))
		p, err := s.PathsFor("sess-dev", c.agent)
		require.NoError(t, err)
		require.NoError(t, os.Remove(p.Log))
		require.NoError(t, c.plant(p.Log))

		done := make(chan struct{})
		go func() {
			defer close(done)
			code, out, stderr := cli(t, "transcript", "show", "--root", root, "--session", "sess-dev", "--agent", c.agent)
			require.Equal(t, exitFoundWrong, code, out)
			require.Contains(t, stderr, p.Log+" is a "+c.what)
			code, out, stderr = cli(t, "transcript", "show", p.Log)
			require.Equal(t, exitFoundWrong, code, out)
			require.Contains(t, stderr, p.Log+" is a "+c.what)
			code, out, _ = cli(t, "transcript", "ls", "--root", root, "--session", "sess-dev")
			require.Equal(t, exitFoundWrong, code, out)
			require.Contains(t, out, p.Log+" is a "+c.what)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: show or ls did not return", c.what)
		}
	}
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
