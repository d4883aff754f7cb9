package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/proctest"
	"github.com/schemastate/schemastate/reconcile"
)

// tempFile writes data to a file named name in a new temporary directory
// and returns its path.
func tempFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := tempPath(t, name)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

// tempPath is a path in a new temporary directory, where nothing is yet.
func tempPath(t *testing.T, elem ...string) string {
	return filepath.Join(append([]string{t.TempDir()}, elem...)...)
}

// decodeJSON decodes a command's JSON output into v; output that is not
// JSON fails the test, with msgAndArgs.
func decodeJSON(t *testing.T, out string, v any, msgAndArgs ...any) {
	t.Helper()
	require.NoError(t, json.Unmarshal([]byte(out), v), msgAndArgs...)
}

// sessionStore is a declared-shape database (the host tables, reconciled)
// with the given parent sessions (id: task id).
func sessionStore(t *testing.T, db *dbtest.DB, sessions map[string]string) {
	t.Helper()
	db.Host(t)
	_, err := reconcile.Reconcile(context.Background(), db.DB, reconcile.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	for id, task := range sessions {
		_, err := db.DB.Exec(db.Q(`INSERT INTO task_sessions (id, task_id) VALUES (?, ?)`), id, task)
		require.NoError(t, err)
	}
}

// recordFrames writes frames to db through the live writer (its log
// discarded); each must be recorded.
func recordFrames(t *testing.T, db *dbtest.DB, frames ...capture.Frame) {
	t.Helper()
	w, err := capture.NewWriter(context.Background(), db.DB, db.Dialect, capture.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer w.Close()
	for i, f := range frames {
		require.NoError(t, w.Record(context.Background(), f), i)
	}
}

// reconciledByCLI gives db the host tables and runs the CLI's reconcile on
// it, which must exit 0: the declared shape, as a boot of the command leaves
// it (reconciled is the same through the library).
func reconciledByCLI(t *testing.T, db *dbtest.DB) {
	t.Helper()
	db.Host(t)
	code, _, stderr := cli(t, "reconcile", "--db", db.CLIDSN)
	require.Equal(t, exitOK, code, stderr)
}

// reconciled gives db the host tables and reconciles it through the
// library; only the shape step has to succeed.
func reconciled(t *testing.T, db *dbtest.DB) {
	t.Helper()
	db.Host(t)
	rep, _ := reconcile.Reconcile(context.Background(), db.DB)
	require.NotEqual(t, reconcile.Failed, rep.Step(reconcile.StepShape).Status, "%+v", rep.Steps)
}

// cli runs the schemastate CLI in-process with no stdin and returns its exit
// code, stdout and stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return cliIn(t, "", args...)
}

// cliIn is cli with stdin.
func cliIn(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// healthCLI, ingestCLI and transcriptCLI are cliIn of one command.
func healthCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return cliIn(t, "", withCommand("health", args)...)
}

func ingestCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return cliIn(t, stdin, withCommand("ingest", args)...)
}

func transcriptCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return cliIn(t, stdin, withCommand("transcript", args)...)
}

// withCommand is args after the command name.
func withCommand(name string, args []string) []string { return append([]string{name}, args...) }

// cliBinary is the schemastate binary, built once, for the tests that run it
// as a separate process: a "server" that records and exits, then a fresh
// process that locates what it left; a process whose memory is measured.
func cliBinary(t *testing.T) string {
	t.Helper()
	return proctest.Binary(t)
}

// runBinary runs `schemastate transcript args...` as a child process with
// stdin and returns its exit code and its stdout followed by its stderr.
func runBinary(t *testing.T, stdin []byte, args ...string) (int, string) {
	t.Helper()
	res, err := proctest.Run(cliBinary(t), stdin, withCommand("transcript", args)...)
	require.NoError(t, err)
	return res.Code, res.Stdout + res.Stderr
}

// recording is a `transcript record` process whose stdin stays open, as a
// live provider's stream does.
type recording struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   proctest.Buffer // stdout and stderr, read while it runs
}

func startRecording(t *testing.T, args ...string) *recording {
	t.Helper()
	return startRecordingWith(t, nil, args...)
}

// startRecordingWith is startRecording with env added to the process's
// environment.
func startRecordingWith(t *testing.T, env []string, args ...string) *recording {
	t.Helper()
	r := &recording{cmd: exec.Command(cliBinary(t), append([]string{"transcript", "record"}, args...)...)}
	r.cmd.Env = append(os.Environ(), env...)
	var err error
	r.stdin, err = r.cmd.StdinPipe()
	require.NoError(t, err)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	require.NoError(t, r.cmd.Start())
	t.Cleanup(func() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() })
	return r
}

func (r *recording) write(t *testing.T, lines ...string) {
	t.Helper()
	for _, l := range lines {
		_, err := io.WriteString(r.stdin, l)
		require.NoError(t, err)
	}
}

// wait returns the exit code, failing the test if the process does not end.
func (r *recording) wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("record did not end; output so far:\n%s", r.out.String())
		return -1
	}
}
