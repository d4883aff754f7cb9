//go:build !windows

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
