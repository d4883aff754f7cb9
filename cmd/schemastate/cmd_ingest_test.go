package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

func decodeSummary(t *testing.T, out string) ingestSummary {
	t.Helper()
	var s ingestSummary
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&s), out)
	return s
}

// The stream in testdata/frames/stream.ndjson replays a realistic session:
// a 3-way async fan-out (with a duplicate and an out-of-order frame), an
// 8-way fan-out with usage (then a later zero and a later negative), a resume
// under a second execution that reuses a tool-call id (then a late frame from
// the first execution), a 5-way OpenCode fan-out without execution ids (one
// nested, one first seen without a turn), a blank line, one malformed line
// (42) and one frame without a task id. The rows below are what the spec
// prescribes for it.
func TestIngest_ReplaysStreamIntoPrescribedRows(t *testing.T) {
	const (
		e1 = "3b241101-e2bb-4255-8caf-4136c566a962"
		e2 = "9d5ed678-fe57-4cca-9d75-9e0e8f3c2e4b"
	)
	base := time.Date(2026, 8, 3, 15, 32, 20, 0, time.UTC)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }

	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		sessionStore(t, db, map[string]string{"sess-claude": "task-review", "sess-opencode": "task-refactor"})
		code, out, errOut := ingestCLI(t, "", "--db", db.CLIDSN, "--json", shippedStream)
		require.Equal(t, exitIngestMalformed, code, errOut)
		require.Contains(t, errOut, "stream.ndjson:42: malformed frame")
		require.Equal(t, 1, strings.Count(errOut, "malformed frame"), errOut)

		// 43 lines: 1 blank, 1 malformed, 41 frames; one has no task id (AC-2);
		// the 6 OpenCode frames carry no execution id (AC-31); one frame
		// reports a negative (AC-9).
		require.Equal(t, ingestSummary{Counters: capture.Counters{Attempted: 41, Persisted: 40, SkippedNoIdentity: 1,
			AnomalousValue: 1, UnknownExecution: 6}, Malformed: 1}, decodeSummary(t, out))

		ctx := context.Background()
		claude, err := capture.ListBySession(ctx, db.DB, db.Dialect, "sess-claude")
		require.NoError(t, err)
		opencode, err := capture.ListBySession(ctx, db.DB, db.Dialect, "sess-opencode")
		require.NoError(t, err)
		require.Len(t, claude, 15, "3 + 8 under the first execution, 4 under the second")
		require.Len(t, opencode, 5, "toolu_o6 was malformed, toolu_o7 had no task id")
		rows := map[string]capture.Row{}
		for _, r := range append(claude, opencode...) {
			require.Equal(t, "live", r.Source)
			rows[r.AgentExecutionID+"/"+r.ToolCallID] = r
		}
		for turn, n := range map[string]int{"turn-r1": 3, "turn-r2": 8, "turn-r3": 4, "turn-o1": 5} {
			rs, err := capture.ListByTurn(ctx, db.DB, db.Dialect, turn)
			require.NoError(t, err)
			require.Len(t, rs, n, turn)
		}

		// AC-32: the reused id under the second execution is its own row, and
		// the first execution's late "error" frame changed only its own row:
		// tool_status/settled_at stay frozen (AC-12), model replaced (AC-5),
		// turn kept (AC-2a).
		a1 := rows[e1+"/toolu_01A"]
		require.Equal(t, "turn-r1", *a1.TurnID)
		require.True(t, a1.ObservedAt.Equal(ms(1000)))
		require.Equal(t, "completed", *a1.ToolStatus)
		require.True(t, a1.SettledAt.Equal(ms(2000)))
		require.Equal(t, "claude-haiku-5", *a1.Model)
		require.Equal(t, "failed", *a1.AgentStatus)
		require.Equal(t, "late report", *a1.Description)
		require.Equal(t, "security-reviewer", *a1.SubagentType)
		require.True(t, a1.IsAsync)
		a2 := rows[e2+"/toolu_01A"]
		require.Equal(t, "turn-r3", *a2.TurnID)
		require.True(t, a2.ObservedAt.Equal(ms(40020)))
		require.True(t, a2.SettledAt.Equal(ms(50020)))
		require.Equal(t, "claude-opus-5[1m]", *a2.Model)
		require.Equal(t, "second pass 2", *a2.Description)
		require.Equal(t, []int64{5002, 2, 9002}, []int64{*a2.TotalTokens, *a2.ToolUseCount, *a2.DurationMs})
		require.False(t, a2.IsAsync)

		// The async fan-out: every metric NULL, never 0; settled by tool_status.
		for _, tc := range []string{"toolu_01A", "toolu_01B", "toolu_01C"} {
			r := rows[e1+"/"+tc]
			require.Nil(t, r.TotalTokens, tc)
			require.Nil(t, r.ToolUseCount, tc)
			require.Nil(t, r.DurationMs, tc)
			require.Equal(t, "async_launched", *rows[e1+"/toolu_01B"].AgentStatus)
		}
		// Out of order: 01C was created by its terminal frame; the earlier
		// in_progress frame arriving late filled its description only.
		c := rows[e1+"/toolu_01C"]
		require.True(t, c.ObservedAt.Equal(ms(2020)))
		require.True(t, c.SettledAt.Equal(ms(2020)))
		require.Equal(t, "completed", *c.ToolStatus)
		require.Equal(t, "review test-reviewer", *c.Description)

		// The 8-way fan-out's usage, including the later zero (AC-7a), the
		// later negative (AC-9), a reported-zero tool count (AC-8) and
		// missing fields left NULL.
		for i := 1; i <= 8; i++ {
			r := rows[e1+"/toolu_02_"+string(rune('0'+i))]
			require.Equal(t, int64(20000+i*1000), *r.TotalTokens, i)
			require.Equal(t, int64(30000+i*100), *r.DurationMs, i)
			require.True(t, r.SettledAt.Equal(ms(20000+i*10)), i)
			require.True(t, r.ObservedAt.Equal(ms(10000+i*10)), i)
		}
		require.Equal(t, int64(0), *rows[e1+"/toolu_02_4"].ToolUseCount)
		require.Equal(t, int64(5), *rows[e1+"/toolu_02_5"].ToolUseCount)
		require.Nil(t, rows[e1+"/toolu_02_3"].SubagentType)
		require.Nil(t, rows[e1+"/toolu_02_6"].Model)

		// OpenCode: the sentinel, never terminal (AC-10), nested (AC-6), turn
		// filled forward (AC-2a).
		for i := 1; i <= 5; i++ {
			r := rows["unknown/toolu_o"+string(rune('0'+i))]
			require.Equal(t, "in_progress", *r.ToolStatus)
			require.Equal(t, "started", *r.AgentStatus)
			require.Nil(t, r.SettledAt)
			require.Nil(t, r.AgentID)
			require.Equal(t, "turn-o1", *r.TurnID)
			require.Equal(t, "ses_child"+string(rune('0'+i)), *r.ChildSessionID)
		}
		require.Equal(t, "toolu_o1", *rows["unknown/toolu_o5"].ParentToolCallID)

		// Replaying the same stream adds no row (AC-3) and counts again.
		code, _, _ = ingestCLI(t, "", "--db", db.CLIDSN, shippedStream)
		require.Equal(t, exitIngestMalformed, code)
		var n int
		require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_subagents`).Scan(&n))
		require.Equal(t, 20, n)
	})
}

// Malformed lines are reported with their number and reason and skipped;
// blank lines are ignored; everything else is recorded. Exit 1.
func TestIngest_MalformedLinesAreReportedAndSkipped(t *testing.T) {
	good := `{"session_id":"s1","task_id":"t1","tool_call_id":"ok-%d","subagent_task":{}}`
	lines := []string{
		strings.Replace(good, "%d", "1", 1),
		``,
		`{"session_id":"s1","task_id":"t1","tool_call_id":"x","subagent_task":{"total_tokens":"12"}}`,
		`{"session_id":"s1","task_id":"t1","tool_call_id":"x","observed_at":"yesterday","subagent_task":{}}`,
		`{"session_id":"s1","task_id":"t1","tool_call_id":"x"}`,
		`not json`,
		`{"session_id":"s1","task_id":"t1","tool_call_id":"x","subagent_task":{"tool_use_count":1.5}}`,
		`   `,
		strings.Replace(good, "%d", "2", 1),
	}
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		sessionStore(t, db, map[string]string{"s1": "t1"})
		code, out, errOut := ingestCLI(t, strings.Join(lines, "\n"), "--db", db.CLIDSN, "-")
		require.Equal(t, exitIngestMalformed, code, errOut)
		for _, want := range []string{
			"stdin:3: malformed frame, skipped: field subagent_task.total_tokens",
			"stdin:4: malformed frame, skipped: observed_at \"yesterday\"",
			"stdin:5: malformed frame, skipped: no subagent_task object",
			"stdin:6: malformed frame, skipped: not a JSON object",
			"stdin:7: malformed frame, skipped: field subagent_task.tool_use_count",
		} {
			require.Contains(t, errOut, want)
		}
		require.Equal(t, 5, strings.Count(errOut, "malformed frame"))
		require.Contains(t, out, "persisted            2\n")
		require.Contains(t, out, "malformed            5\n")
		var n int
		require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_subagents`).Scan(&n))
		require.Equal(t, 2, n)

		// Every line valid: exit 0.
		code, out, errOut = ingestCLI(t, lines[0]+"\n", "--db", db.CLIDSN, "--json")
		require.Equal(t, exitOK, code, errOut)
		require.Equal(t, ingestSummary{Counters: capture.Counters{Attempted: 1, Persisted: 1, UnknownExecution: 1}}, decodeSummary(t, out))
	})
}

// Exit 2: usage errors, a missing file, and a table not in its declared shape
// (the pre-amendment table) — said plainly, with the fix — and a failed write.
func TestIngest_ExitTwoOnUsageAndDatabaseErrors(t *testing.T) {
	line := `{"session_id":"s1","task_id":"t1","tool_call_id":"c1","subagent_task":{}}` + "\n"
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		db.Host(t).Legacy(t)
		code, out, errOut := ingestCLI(t, line, "--db", db.CLIDSN)
		require.Equal(t, exitUsage, code)
		require.Empty(t, out)
		require.Contains(t, errOut, "not in its declared shape")
		require.Contains(t, errOut, "schemastate reconcile")

		code, _, _ = ingestCLI(t, line, "--db", db.CLIDSN, "a", "b")
		require.Equal(t, exitUsage, code)
		code, _, errOut = ingestCLI(t, line, "--db", db.CLIDSN, tempPath(t, "absent.ndjson"))
		require.Equal(t, exitUsage, code, errOut)
		code, _, _ = ingestCLI(t, line, "--nope")
		require.Equal(t, exitUsage, code)
	})
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		// No parent session: the foreign key refuses the write (AC-27 path).
		sessionStore(t, db, nil)
		code, out, errOut := ingestCLI(t, line, "--db", db.CLIDSN, "--json")
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, "WARN")
		require.Contains(t, errOut, "line=1 ", "the failure WARN names the input line")
		require.Contains(t, errOut, "1 frame(s) failed")
		require.Equal(t, capture.Counters{Attempted: 1, Failed: 1}, decodeSummary(t, out).Counters)
	})
}

// The NUL frame has the same outcome on both dialects: line 2's description
// is stored NULL, named in a WARN with its line, and the rest of its frame is
// written (issue 22 §2: before, the whole frame was refused; earlier still, a
// row on SQLite and a failed write on PostgreSQL). Distinct non-UTF-8 ids are
// reported malformed and never share a row; exit 1 for them.
func TestIngest_NULFrameSameOutcomeOnBothDialects(t *testing.T) {
	frame := func(tc, desc string) string {
		return `{"session_id":"s1","task_id":"t1","tool_call_id":"` + tc + `","subagent_task":{"description":"` + desc + `","model":"m"}}`
	}
	in := strings.Join([]string{
		frame("tc-1", "fine"),
		frame("tc-nul", `a\u0000b`),
		frame("tc-\xff", "first agent"),
		frame("tc-\xfe", "second agent"),
		frame("tc-2", "fine"),
	}, "\n")
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		sessionStore(t, db, map[string]string{"s1": "t1"})
		code, out, errOut := ingestCLI(t, in, "--db", db.CLIDSN, "--json")
		require.Equal(t, exitIngestMalformed, code, errOut)
		require.Contains(t, errOut, `level=WARN msg="subagent context text field stored NULL: it holds text no dialect can store exactly" session_id=s1 tool_call_id=tc-nul field=subagent_task.description`)
		require.Contains(t, errOut, `line=2`)
		require.Contains(t, errOut, `stdin:3: malformed frame, skipped: capture: frame identity holds a NUL or is not UTF-8: field tool_call_id "tc-\xff"`)
		require.Contains(t, errOut, `stdin:4: malformed frame, skipped: capture: frame identity holds a NUL or is not UTF-8: field tool_call_id "tc-\xfe"`)
		require.Equal(t, 2, strings.Count(errOut, "malformed frame"), errOut)
		require.Equal(t, ingestSummary{Counters: capture.Counters{Attempted: 3, Persisted: 3, UnstorableText: 1, UnknownExecution: 3}, Malformed: 2}, decodeSummary(t, out))
		var desc sql.NullString
		var model string
		require.NoError(t, db.DB.QueryRow(`SELECT description, model FROM task_session_subagents WHERE tool_call_id = 'tc-nul'`).Scan(&desc, &model))
		require.False(t, desc.Valid, "stored NULL, not altered or escaped")
		require.Equal(t, "m", model, "the frame's other fields are kept")
		var ids []string
		rows, err := db.DB.Query(`SELECT tool_call_id FROM task_session_subagents ORDER BY tool_call_id`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []string{"tc-1", "tc-2", "tc-nul"}, ids)
	})
}

// --max-line sets the limit; a longer line is reported with its number and
// length and the stream goes on. A non-positive limit is a usage error.
func TestIngest_MaxLineFlag(t *testing.T) {
	line := func(tc string) string {
		return `{"session_id":"s1","task_id":"t1","tool_call_id":"` + tc + `","subagent_task":{}}`
	}
	long := `{"session_id":"s1","task_id":"t1","tool_call_id":"long","subagent_task":{"description":"` + strings.Repeat("x", 5000) + `"}}`
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		sessionStore(t, db, map[string]string{"s1": "t1"})
		code, out, errOut := ingestCLI(t, line("a")+"\n"+long+"\n"+line("b")+"\n", "--db", db.CLIDSN, "--max-line", "4096", "--json")
		require.Equal(t, exitIngestMalformed, code, errOut)
		require.Contains(t, errOut, fmt.Sprintf("stdin:2: malformed frame, skipped: line of %d bytes is longer than the maximum line length (4096 bytes)", len(long)))
		require.Equal(t, int64(2), decodeSummary(t, out).Persisted)

		code, _, errOut = ingestCLI(t, line("a")+"\n"+long+"\n", "--db", db.CLIDSN)
		require.Equal(t, exitOK, code, "the default limit is 16 MiB: %s", errOut)
		code, _, _ = ingestCLI(t, line("a"), "--db", db.CLIDSN, "--max-line", "0")
		require.Equal(t, exitUsage, code)
	})
}
