package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/reconcile"
)

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
