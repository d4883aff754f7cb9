package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

const cliExec = "6f1c2a9e-4b7d-4e21-9a3f-0d5b8c7e1a42"

// subagentStore is a reconciled host database with three live rows: two of
// session s1 (one real id, one 'unknown' observed after execution_since) and
// one of session s2.
func subagentStore(t *testing.T, db *dbtest.DB) {
	t.Helper()
	reconciledByCLI(t, db)
	db.Exec(t, `INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'k1');
INSERT INTO task_sessions (id, task_id) VALUES ('s2', 'k2')`)
	now := time.Now()
	recordFrames(t, db,
		capture.Frame{SessionID: "s1", TaskID: "k1", ToolCallID: "toolu_2", ExecutionID: "", ObservedAt: now.Add(time.Millisecond), ToolStatus: "in_progress"},
		capture.Frame{SessionID: "s1", TaskID: "k1", ToolCallID: "toolu_1", ExecutionID: cliExec, ObservedAt: now, ToolStatus: "in_progress"},
		capture.Frame{SessionID: "s2", TaskID: "k2", ToolCallID: "toolu_3", ExecutionID: cliExec, ObservedAt: now, ToolStatus: "in_progress"})
}

// `subagents --json`: rows in the AC-13 order with their execution identity,
// and the summary with every count and the coverage to disclose.
func TestCLI_Subagents_AC25_JSON(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		subagentStore(t, db)
		code, out, stderr := cli(t, "subagents", "--db", db.CLIDSN, "--session", "s1", "--json")
		require.Equal(t, exitOK, code, stderr)
		var got struct {
			Rows    []map[string]any `json:"rows"`
			Summary map[string]any   `json:"summary"`
		}
		decodeJSON(t, out, &got, out)
		require.Len(t, got.Rows, 2)
		for _, r := range got.Rows {
			for _, k := range []string{"task_session_id", "tool_call_id", "agent_execution_id", "source", "observed_at", "execution_identity"} {
				require.Contains(t, r, k)
			}
		}
		require.Equal(t, []any{"toolu_1", cliExec, "live", "real"},
			[]any{got.Rows[0]["tool_call_id"], got.Rows[0]["agent_execution_id"], got.Rows[0]["source"], got.Rows[0]["execution_identity"]})
		require.Equal(t, []any{"toolu_2", "unknown", "unrecorded_live"},
			[]any{got.Rows[1]["tool_call_id"], got.Rows[1]["agent_execution_id"], got.Rows[1]["execution_identity"]})
		s := got.Summary
		require.Equal(t, 2.0, s["rows"])
		require.Equal(t, 2.0, s["subagents"])
		require.Equal(t, 1.0, s["executions"])
		require.Equal(t, map[string]any{"live": 2.0, "backfill": 0.0}, s["by_source"])
		require.Equal(t, map[string]any{"real": 1.0, "unrecorded_legacy": 0.0, "unrecorded_live": 1.0, "unrecorded_backfill": 0.0, "not_an_identity": 0.0}, s["by_execution_identity"])
		cov := s["coverage"].(map[string]any)
		require.Equal(t, "activated", cov["state"])
		require.Equal(t, true, cov["nothing_to_backfill"])
		require.Nil(t, cov["fanout_unknown_before"])
		require.NotEmpty(t, cov["disclosures"])

		// An unknown session is no rows, exit 0; without execution_since
		// executions is null.
		db.Exec(t, `DELETE FROM kandev_meta WHERE key = 'subagent_context_execution_since'`)
		code, out, stderr = cli(t, "subagents", "--db", db.CLIDSN, "--session", "nobody", "--json")
		require.Equal(t, exitOK, code, stderr)
		decodeJSON(t, out, &got)
		require.Empty(t, got.Rows)
		require.Contains(t, out, `"rows": []`)
		require.Contains(t, got.Summary, "executions")
		require.Nil(t, got.Summary["executions"])
	})
}

// The text form says the same in words, rows first in the AC-13 order.
func TestCLI_Subagents_AC25_Text(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		subagentStore(t, db)
		code, out, stderr := cli(t, "subagents", "--db", db.CLIDSN, "--task", "k1")
		require.Equal(t, exitOK, code, stderr)
		lines := strings.Split(out, "\n")
		require.Regexp(t, `^task_session_id\s+tool_call_id\s+agent_execution_id\s+source\s+observed_at\s+execution_identity$`, lines[0])
		require.Regexp(t, `^s1\s+toolu_1\s+`+cliExec+`\s+live\s+\S+Z\s+real$`, lines[1])
		require.Regexp(t, `^s1\s+toolu_2\s+unknown\s+live\s+\S+Z\s+unrecorded_live$`, lines[2])
		for _, want := range []string{
			"rows:       2\n",
			"subagents:  2 (distinct session and tool call",
			"executions: 1 (distinct real execution ids; 'unknown' is never counted)\n",
			"by source:  live 2, backfill 0\n",
			"by execution identity: real 1, unrecorded_legacy 0, unrecorded_live 1, unrecorded_backfill 0, not_an_identity 0\n",
			"disclose with these counts:\n  - Complete from capture_since ",
			"  - backfill_through is '': the backfill matched nothing",
		} {
			require.Contains(t, out, want)
		}
		_, again, _ := cli(t, "subagents", "--db", db.CLIDSN, "--task", "k1")
		require.Equal(t, out, again, "deterministic")

		db.Exec(t, `DELETE FROM kandev_meta WHERE key = 'subagent_context_execution_since'`)
		_, out, _ = cli(t, "subagents", "--db", db.CLIDSN)
		require.Contains(t, out, "executions: not counted (execution_since is absent")
		require.Contains(t, out, "not_an_identity 3\n")

		code, _, _ = cli(t, "subagents", "--db", db.CLIDSN, "s1")
		require.Equal(t, exitUsage, code, "a positional argument is a usage error")
		db.Exec(t, `INSERT INTO kandev_meta (key, value) VALUES ('subagent_context_execution_since', 'yesterday')`)
		code, _, stderr = cli(t, "subagents", "--db", db.CLIDSN)
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr, `subagent_context_execution_since = "yesterday"`)
	})
}

// `status` carries the same counts store-wide, after everything it printed
// before; in --json as "subagents", equal to the whole store's summary.
func TestCLI_Status_AC25_StoreWideCounts(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		subagentStore(t, db)
		code, out, stderr := cli(t, "status", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitOK, code, stderr)
		var st map[string]json.RawMessage
		decodeJSON(t, out, &st)
		for _, k := range []string{"dialect", "keys", "keys_read", "state", "end_state", "indexes", "drift", "subagents"} {
			require.Contains(t, st, k)
		}
		_, all, _ := cli(t, "subagents", "--db", db.CLIDSN, "--json")
		var whole struct {
			Summary json.RawMessage `json:"summary"`
		}
		decodeJSON(t, all, &whole)
		require.JSONEq(t, string(whole.Summary), string(st["subagents"]))
		var counts struct{ Rows, Subagents, Executions int }
		decodeJSON(t, string(st["subagents"]), &counts)
		require.Equal(t, struct{ Rows, Subagents, Executions int }{3, 3, 1}, counts)

		code, out, stderr = cli(t, "status", "--db", db.CLIDSN)
		require.Equal(t, exitOK, code, stderr)
		require.True(t, strings.HasPrefix(out, "dialect: "), "existing output first")
		i := strings.Index(out, "subagents, store-wide:\n")
		require.Greater(t, i, strings.Index(out, "indexes on "), "the counts come last")
		require.Contains(t, out[i:], "rows:       3\nsubagents:  3 ")
		require.Contains(t, out[i:], "executions: 1 ")
	})
}
