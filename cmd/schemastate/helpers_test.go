package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/proctest"
)

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
