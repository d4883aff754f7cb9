package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/testkit/replicatest"
)

// Issue 12 §4: a --schema that cannot be read or evaluated is a usage error
// (exit 2) before any step runs — not a failed host_tables step with every
// key printed as absent.
func TestCLI_Reconcile_BadSchemaIsUsageError(t *testing.T) {
	bad := tempFile(t, "bad.hcl", []byte("table \"x\" {"))
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		for _, path := range []string{tempPath(t, "nonexistent.hcl"), bad} {
			for _, cmd := range []string{"reconcile", "plan", "status"} {
				code, out, errOut := cli(t, cmd, "--db", db.CLIDSN, "--schema", path)
				require.Equal(t, exitUsage, code, "%s %s: %s%s", cmd, path, out, errOut)
				require.Empty(t, out, cmd)
				require.Contains(t, errOut, filepath.Base(path), cmd)
			}
		}
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM kandev_meta`).Scan(&n))
		require.Zero(t, n, "nothing ran")
	})
}

// Issue 12 §4: after a lock-wait timeout nothing was read, and the report
// says so instead of printing every key as absent and every clause as false.
func TestCLI_Reconcile_LockTimeoutSaysKeysNotRead(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t)
		// Another replica holds the lock, stopped inside its shape step.
		finish := replicatest.HoldingTheLock(t, db.DB, hooks.FailpointShapeApplied)
		defer func() { _, err := finish(); require.NoError(t, err) }()

		code, out, errOut := cli(t, "reconcile", "--db", db.CLIDSN, "--lock-wait", "100ms")
		require.Equal(t, exitStepFailed, code, errOut)
		require.Contains(t, out, "keys: not read")
		require.Contains(t, out, "end state: not observed")
		require.NotContains(t, out, "(absent)")
		require.NotContains(t, out, "=false")

		code, out, _ = cli(t, "reconcile", "--db", db.CLIDSN, "--lock-wait", "100ms", "--json")
		require.Equal(t, exitStepFailed, code)
		var rep struct {
			KeysRead         bool `json:"keys_read"`
			EndStateObserved bool `json:"end_state_observed"`
		}
		decodeJSON(t, out, &rep)
		require.False(t, rep.KeysRead)
		require.False(t, rep.EndStateObserved)
	})
}

// A completed reconcile says the keys were read (the control for the test
// above).
func TestCLI_Reconcile_ReportSaysKeysRead(t *testing.T) {
	db := dbtest.Open(t, "sqlite").Host(t)
	code, out, errOut := cli(t, "reconcile", "--db", db.CLIDSN, "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"keys_read": true`)
	require.Contains(t, out, `"end_state_observed": true`)
}

// Issue 12 §4: flags may follow a positional argument, and an argument that
// is not understood is named.
func TestCLI_FlagsAnywhereAndUnexpectedArgumentsNamed(t *testing.T) {
	db := dbtest.Open(t, "sqlite")
	sessionStore(t, db, map[string]string{"s1": "t1"})
	frames := tempFile(t, "f.ndjson", []byte(`{"session_id":"s1","task_id":"t1","execution_id":"e1","tool_call_id":"c1","subagent_task":{}}`+"\n"))

	code, out, errOut := cli(t, "ingest", frames, "--db", db.CLIDSN, "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, int64(1), decodeSummary(t, out).Persisted)

	code, _, errOut = cli(t, "status", "mydb.db")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `schemastate status: unexpected argument "mydb.db"`)
	require.Contains(t, errOut, "--db mydb.db")

	code, _, errOut = cli(t, "ingest", frames, "other.ndjson", "--db", db.CLIDSN)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `schemastate ingest: unexpected argument "other.ndjson": ingest takes at most one FILE`)

	code, out, errOut = cli(t, "status", "--json", "--db", db.CLIDSN, "extra")
	require.Equal(t, exitUsage, code)
	require.Empty(t, out)
	require.Contains(t, errOut, `unexpected argument "extra"`)

	for _, cmd := range []string{"reconcile", "plan", "health", "demo", "generate", "bench", "parity"} {
		code, _, errOut := cli(t, cmd, "--db", db.CLIDSN, "stray")
		require.Equal(t, exitUsage, code, cmd)
		require.Contains(t, errOut, `schemastate `+cmd+`: unexpected argument "stray"`, cmd)
	}
	root := t.TempDir()
	for _, argv := range [][]string{
		{"transcript", "ls", "--root", root, "stray", "--session", "s"},
		{"transcript", "recover", "--root", root, "stray", "--db", db.CLIDSN},
		{"transcript", "record", "stray", "--root", root, "--session", "s", "--agent", "a", "--provider", "claude"},
		{"transcript", "show", "a.json", "stray"},
	} {
		code, _, errOut := cli(t, argv...)
		label := strings.Join(argv[:2], " ")
		require.Equal(t, exitUsage, code, label)
		require.Contains(t, errOut, `schemastate `+label+`: unexpected argument "stray"`, label)
	}
}

// Issue 12 §4: every command's -h shows its exit codes and shows defaults
// the same way (as flag defaults, never only in the synopsis).
func TestCLI_HelpShowsExitCodesEverywhere(t *testing.T) {
	argvs := [][]string{}
	for _, c := range commands {
		if c.name != "transcript" {
			argvs = append(argvs, []string{c.name, "-h"})
		}
	}
	for _, sub := range []string{"show", "ls", "recover", "record"} {
		argvs = append(argvs, []string{"transcript", sub, "-h"})
	}
	for _, argv := range argvs {
		code, out, errOut := cli(t, argv...)
		label := strings.Join(argv, " ")
		require.Equal(t, exitOK, code, label)
		require.Contains(t, out+errOut, "exit: 0 ", label)
		require.Contains(t, out+errOut, "usage: schemastate "+strings.Join(argv[:len(argv)-1], " "), label)
		// The last line ends: the shell's next output does not run onto it.
		require.True(t, strings.HasSuffix(out+errOut, "\n"), "%s: -h output ends without a newline: %q", label, errOut)
	}
	for _, argv := range [][]string{{"-h"}, {"transcript", "-h"}} {
		_, out, errOut := cli(t, argv...)
		require.True(t, strings.HasSuffix(out+errOut, "\n"), "%v: -h output ends without a newline", argv)
	}
	// record's exit 1 is not the other subcommands' "something found wrong".
	_, _, errOut := cli(t, "transcript", "record", "-h")
	require.Contains(t, errOut, "exit: 0 recorded (whatever the child's outcome), 1 a write failed, the transcript already existed, or no line was the provider's, 2 ")
	_, _, errOut = cli(t, "reconcile", "-h")
	require.Contains(t, strings.SplitN(errOut, "\n", 2)[0], "[--lock-wait D]", "the synopsis names every flag the README's command table does")
	_, _, errOut = cli(t, "transcript", "ls", "-h")
	require.Contains(t, errOut, "exit: 0 ok, 1 something found wrong, 2 ")
	_, _, errOut = cli(t, "transcript", "recover", "-h")
	require.NotContains(t, errOut, `(default "sqlite:kandev.db")`, "recover requires --db: it has no default")
	_, _, errOut = cli(t, "generate", "-h")
	require.Contains(t, errOut, "(default 328)")
	require.NotContains(t, strings.SplitN(errOut, "\n", 2)[0], "328", "defaults are shown once, by the flag")
	_, out, _ := cli(t, "-h")
	require.Contains(t, out, "parity")
	code, out, errOut := cli(t)
	require.Equal(t, exitUsage, code)
	require.Empty(t, out, "a usage error prints nothing on stdout")
	require.Contains(t, errOut, "usage: schemastate <command>")
	code, _, errOut = cli(t, "help", "status")
	require.Equal(t, exitOK, code)
	require.Contains(t, errOut, "usage: schemastate status")
}

// Issue 12 §4: a negative duration is refused while parsing.
func TestCLI_NegativeDurationRejected(t *testing.T) {
	db := dbtest.Open(t, "sqlite").Host(t)
	code, out, errOut := cli(t, "reconcile", "--db", db.CLIDSN, "--lock-wait", "-1s")
	require.Equal(t, exitUsage, code)
	require.Empty(t, out)
	require.Contains(t, errOut, `invalid value "-1s" for flag -lock-wait: must not be negative`)
}

// Issue 12 §4: a connection that fails the same way on each attempt is
// reported once.
func TestCLI_DialErrorPrintedOnce(t *testing.T) {
	code, _, errOut := cli(t, "status", "--db", "postgres://postgres@127.0.0.1:1/x")
	require.Equal(t, exitUsage, code)
	require.Equal(t, 1, strings.Count(errOut, "connection refused"), errOut)
}

// Issue 12 §4: messages speak the frame's and the commands' language: no Go
// type names, no doubled prefixes; health on a store without host tables
// names every missing table; plan there says reconcile would refuse instead of
// printing CREATE statements.
func TestCLI_MessagesWithoutGoTypesOrDoubledPrefixes(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		code, out, errOut := cli(t, "health", "--db", db.CLIDSN)
		require.Equal(t, exitUsage, code)
		require.Empty(t, out)
		require.Contains(t, errOut, "missing tables: kandev_meta, task_session_messages, task_session_subagents")
		require.NotContains(t, errOut, "health: health:")

		code, out, errOut = cli(t, "plan", "--db", db.CLIDSN)
		require.Equal(t, exitUsage, code)
		require.NotContains(t, out, "CREATE")
		require.Contains(t, errOut, "host tables missing: kandev_meta, task_session_messages, task_sessions")
		require.Contains(t, errOut, "reconcile refuses to run without them")
		code, out, _ = cli(t, "plan", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitUsage, code)
		require.Contains(t, out, `"missing_host_tables"`)

		sessionStore(t, db, map[string]string{"s1": "t1"})
		lines := strings.Join([]string{`[1]`, `"frame"`, `{"subagent_task":5}`, `{"session_id":7,"subagent_task":{}}`,
			`{"subagent_task":{"tool_use_count":"x"}}`, `{"subagent_task":{"is_async":1}}`}, "\n") + "\n"
		code, _, errOut = ingestCLI(t, lines, "--db", db.CLIDSN)
		require.Equal(t, exitIngestMalformed, code, errOut)
		require.Equal(t, 6, strings.Count(errOut, "malformed frame"), errOut)
		for _, goName := range []string{"capture.", "wireFrame", "wireSubtask", "Go value", "int64", "is not int", "is not bool", "is not string"} {
			require.NotContains(t, errOut, goName)
		}
		require.Contains(t, errOut, "stdin:1: malformed frame, skipped: not a JSON object: a JSON array")
		require.Contains(t, errOut, "stdin:3: malformed frame, skipped: field subagent_task: number is not an object")
		require.Contains(t, errOut, "stdin:4: malformed frame, skipped: field session_id: number is not a string")
	})
}

// readSpy is a stdin that records whether anything read it.
type readSpy struct{ read bool }

func (r *readSpy) Read(p []byte) (int, error) {
	r.read = true
	return 0, os.ErrClosed
}

// Issue 12 §4 (README agrees): ingest into a table not in its declared
// shape refuses before reading a single line.
func TestCLI_Ingest_RefusesBeforeReading(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		spy := &readSpy{}
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"ingest", "--db", db.CLIDSN}, spy, &out, &errb)
		require.Equal(t, exitUsage, code)
		require.Contains(t, errb.String(), "not in its declared shape")
		require.False(t, spy.read, "stdin was read")
		require.Empty(t, out.String(), "no counters: nothing was read")
	})
}

// Issue 12 §4: the shipped frames ingest into a demo store without a
// foreign-key failure, in either demo state; the one malformed line the
// stream carries on purpose (42) is the only line not recorded.
func TestCLI_ShippedFramesIngestIntoTheDemoStore(t *testing.T) {
	for _, state := range []string{"legacy", "fresh"} {
		t.Run(state, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
				code, _, errOut := cli(t, "demo", "--db", db.CLIDSN, "--state", state)
				require.Equal(t, exitOK, code, errOut)
				code, out, errOut := cli(t, "ingest", shippedStream, "--db", db.CLIDSN, "--json")
				require.Equal(t, exitIngestMalformed, code, errOut)
				require.NotContains(t, errOut, "WARN")
				require.Equal(t, ingestSummary{Counters: capture.Counters{Attempted: 41, Persisted: 40, SkippedNoIdentity: 1,
					AnomalousValue: 1, UnknownExecution: 6}, Malformed: 1}, decodeSummary(t, out))
			})
		})
	}
}

// The usage lists every command once, in the command table's order, and
// prints the same text at every run.
func TestCLI_UsageListsTheCommandTableInOrder(t *testing.T) {
	_, first, _ := cli(t, "-h")
	var listed []string
	for _, line := range strings.Split(first, "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(line, "  ") {
			listed = append(listed, f[0])
		}
	}
	var table []string
	for _, c := range commands {
		table = append(table, c.name)
	}
	require.Equal(t, table, listed)
	for range 5 {
		_, again, _ := cli(t, "-h")
		require.Equal(t, first, again)
	}
}
