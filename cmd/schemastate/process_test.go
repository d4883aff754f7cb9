package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/testkit/proctest"
)

// The CLI as a child process: built once, run to its end, or kept running
// with its stdin open.

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

// childResult is how a child process ended: its exit code (-1 when it could
// not be run, stderr then saying why), stdout and stderr.
type childResult struct {
	code   int
	out    string
	stderr string
}

// runCLI runs the binary with args and the extra environment.
func runCLI(t *testing.T, bin string, env []string, args ...string) childResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); !ok && err != nil {
		return childResult{code: -1, stderr: err.Error()}
	}
	return childResult{code: cmd.ProcessState.ExitCode(), out: out.String(), stderr: errb.String()}
}
