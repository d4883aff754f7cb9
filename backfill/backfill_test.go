package backfill_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/toolstatus"
)

// AC-21: every column from its named source; in particular tool_status from
// the TOP-LEVEL metadata.status and agent_status from
// normalized.subagent_task.status, which differ here so conflating them fails,
// and turn_id from the message's own column.
func TestBackfill_AC21_EveryColumnFromItsNamedSource(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		created, updated := base, base.Add(90*time.Second+123456*time.Microsecond)
		seed(t, db, message{
			ID: "m1", Session: "s1", Task: "task-1", Turn: "turn-7", Created: created, Updated: updated,
			Meta: subagent("toolu_1", map[string]any{"status": "completed", "parent_tool_call_id": "toolu_parent"}, map[string]any{
				"status": "async_launched", "subagent_type": "security-reviewer", "description": "review the diff",
				"agent_id": "agent-9", "child_session_id": "ses-child", "model": "claude-opus-5[1m]",
				"is_async": true, "total_tokens": 275717, "tool_use_count": 4, "duration_ms": 81234,
			}),
		})

		res := mustRun(t, db)
		require.True(t, res.Ran)
		require.EqualValues(t, 1, res.Inserted)

		got := rows(t, db)
		require.Len(t, got, 1)
		want := row{
			"id": ptr("backfill:2:s1:toolu_1"), "task_session_id": ptr("s1"), "task_id": ptr("task-1"),
			"turn_id": ptr("turn-7"), "agent_execution_id": ptr("unknown"), "tool_call_id": ptr("toolu_1"),
			"parent_tool_call_id": ptr("toolu_parent"), "subagent_type": ptr("security-reviewer"),
			"description": ptr("review the diff"), "agent_id": ptr("agent-9"), "child_session_id": ptr("ses-child"),
			"model": ptr("claude-opus-5[1m]"), "agent_status": ptr("async_launched"), "tool_status": ptr("completed"),
			"is_async": ptr("1"), "total_tokens": ptr("275717"), "tool_use_count": ptr("4"), "duration_ms": ptr("81234"),
			"source": ptr("backfill"), "observed_at": ptr(stored(db.Dialect, created)),
			"settled_at": ptr(stored(db.Dialect, updated)), "updated_at": ptr(stored(db.Dialect, updated)),
		}
		for _, c := range columns(t) {
			require.Equal(t, want.get(c), got["toolu_1/unknown"].get(c), "column %s", c)
		}
	})
}

// AC-21 / AC-23a: settled_at follows the TOP-LEVEL tool status against AC-11's
// six terminal values; agent_status never settles a row; ” turn_id → NULL.
func TestBackfill_AC23a_SettledOnlyOnTerminalToolStatus(t *testing.T) {
	type tc struct {
		top         map[string]any
		agentStatus string
		settled     bool
	}
	cases := map[string]tc{}
	for _, s := range toolstatus.Terminal {
		cases["terminal "+s] = tc{top: map[string]any{"status": s}, agentStatus: "started", settled: true}
	}
	cases["in_progress with agent completed"] = tc{top: map[string]any{"status": "in_progress"}, agentStatus: "completed"}
	cases["pending"] = tc{top: map[string]any{"status": "pending"}, agentStatus: "completed"}
	cases["absent tool status"] = tc{agentStatus: "completed"}
	cases["capitalised is not terminal"] = tc{top: map[string]any{"status": "Completed"}}
	cases["status of wrong type"] = tc{top: map[string]any{"status": 1}}

	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		i := 0
		want := map[string]bool{}
		for name, c := range cases {
			i++
			id := fmt.Sprintf("toolu_%02d", i)
			want[id] = c.settled
			seed(t, db, message{ID: "m-" + id, Session: "s1", Task: "task-1", Turn: "", Created: base, Updated: base.Add(time.Minute),
				Meta: subagent(id, c.top, map[string]any{"status": c.agentStatus})})
			_ = name
		}
		mustRun(t, db)
		got := rows(t, db)
		require.Len(t, got, len(cases))
		for id, settled := range want {
			r := got[id+"/unknown"]
			if settled {
				require.Equal(t, stored(db.Dialect, base.Add(time.Minute)), r.get("settled_at"), id)
			} else {
				require.Nil(t, r.get("settled_at"), id)
			}
			require.Nil(t, r.get("turn_id"), "AC-21: '' turn_id is stored NULL (%s)", id)
		}
	})
}

// AC-21a: a qualifying message missing the session id, the task id or
// metadata.tool_call_id is skipped, and the statement does not fail.
func TestBackfill_AC21a_SkipsMessagesMissingAnIdentity(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		seed(t, db,
			message{ID: "ok", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_ok", nil, nil)},
			message{ID: "no-session", Session: "", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)},
			message{ID: "no-task", Session: "s1", Task: "", Turn: "t", Created: base, Meta: subagent("toolu_b", nil, nil)},
			message{ID: "no-tool-call", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("", nil, nil)},
			message{ID: "empty-tool-call", Session: "s1", Task: "task-1", Turn: "t", Created: base,
				Meta: `{"tool_call_id":"","normalized":{"kind":"subagent_task","subagent_task":{}}}`},
			message{ID: "numeric-tool-call", Session: "s1", Task: "task-1", Turn: "t", Created: base,
				Meta: `{"tool_call_id":5,"normalized":{"kind":"subagent_task","subagent_task":{}}}`},
			message{ID: "not-subagent", Session: "s1", Task: "task-1", Turn: "t", Created: base,
				Meta: `{"tool_call_id":"toolu_c","normalized":{"kind":"tool_call"}}`},
		)
		// task_id NULL as well as ''.
		_, err := db.DB.Exec(db.Q(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
			VALUES ('null-task', 's1', NULL, 't', '', ?, ?, ?)`), subagent("toolu_d", nil, nil), instant.RowTime(db.Dialect, base), instant.RowTime(db.Dialect, base))
		require.NoError(t, err)

		res := mustRun(t, db)
		require.EqualValues(t, 1, res.Inserted)
		require.Contains(t, rows(t, db), "toolu_ok/unknown")
	})
}

// AC-21b: one row per (task_session_id, tool_call_id), from the newest
// created_at compared as a timestamp, then the greatest id.
func TestBackfill_AC21b_NewestMessageWins(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		model := func(m string) string { return subagent("toolu_1", nil, map[string]any{"model": m}) }
		tie := func(m string) string { return subagent("toolu_tie", nil, map[string]any{"model": m}) }
		seed(t, db,
			// Newest created_at wins even though its id sorts lowest.
			message{ID: "z-old", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: model("old")},
			message{ID: "a-new", Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Microsecond), Meta: model("new")},
			// Same created_at: greatest id wins.
			message{ID: "b", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: tie("b")},
			message{ID: "c", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: tie("c")},
			// Same tool_call_id in another session is another subagent.
			message{ID: "other", Session: "s2", Task: "task-2", Turn: "t", Created: base, Meta: model("other-session")},
		)
		if db.Dialect == dialect.SQLite {
			// Stored with a +02:00 offset: later as text, EARLIER as a timestamp
			// (01:00:00Z), so it must lose to the 01:30 message.
			seed(t, db,
				message{ID: "y-offset", Session: "s3", Task: "task-3", Turn: "t", CreatedRaw: "2026-07-30 03:00:00.5+02:00", Created: base, Meta: subagent("toolu_off", nil, map[string]any{"model": "offset"})},
				message{ID: "x-utc", Session: "s3", Task: "task-3", Turn: "t", CreatedRaw: "2026-07-30 01:30:00+00:00", Created: base, Meta: subagent("toolu_off", nil, map[string]any{"model": "utc"})},
			)
		}

		mustRun(t, db)
		count := func(session, toolCall string) (n int) {
			require.NoError(t, db.DB.QueryRow(db.Q(`SELECT COUNT(*) FROM task_session_subagents WHERE task_session_id = ? AND tool_call_id = ?`), session, toolCall).Scan(&n))
			return n
		}
		require.Equal(t, 1, count("s1", "toolu_1"), "exactly one row per key")
		require.Equal(t, 1, count("s1", "toolu_tie"), "exactly one row per key")
		require.Equal(t, 1, count("s2", "toolu_1"), "another session's subagent")
		_, err := db.DB.Exec(`DELETE FROM task_session_subagents WHERE task_session_id = 's2'`)
		require.NoError(t, err)
		got := rows(t, db)
		require.Equal(t, "new", got["toolu_1/unknown"].get("model"))
		require.Equal(t, stored(db.Dialect, base.Add(time.Microsecond)), got["toolu_1/unknown"].get("observed_at"))
		require.Equal(t, "c", got["toolu_tie/unknown"].get("model"))
		if db.Dialect == dialect.SQLite {
			require.Equal(t, "utc", got["toolu_off/unknown"].get("model"))
			require.Equal(t, "2026-07-30 01:30:00+00:00", got["toolu_off/unknown"].get("observed_at"))
		}
	})
}

// AC-22: a row already present on the key is left untouched (the shared
// 'unknown' sentinel makes a legacy live row and a replay collide), a row
// captured live WITH an execution id coexists, and a replay inserts nothing.
func TestBackfill_AC22_ExistingRowsUntouchedAndReplayIsNoOp(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		seed(t, db,
			message{ID: "m1", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_live", map[string]any{"status": "completed"}, map[string]any{"model": "from-message", "total_tokens": 10})},
			message{ID: "m2", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_exec", nil, map[string]any{"model": "from-message"})},
		)
		live := instant.RowTime(db.Dialect, base.Add(-time.Hour))
		for _, r := range [][]any{{"live-1", "unknown", "toolu_live"}, {"live-2", "2b1f8c3e-0000-4000-8000-000000000001", "toolu_exec"}} {
			_, err := db.DB.Exec(db.Q(`INSERT INTO task_session_subagents
				(id, task_session_id, task_id, agent_execution_id, tool_call_id, model, total_tokens, source, observed_at, updated_at)
				VALUES (?, 's1', 'task-1', ?, ?, 'live-model', NULL, 'live', ?, ?)`), r[0], r[1], r[2], live, live)
			require.NoError(t, err)
		}
		before := rows(t, db)

		res := mustRun(t, db)
		require.EqualValues(t, 1, res.Inserted, "only the backfill row beside the real-execution live row")
		after := rows(t, db)
		require.Len(t, after, 3)
		require.Equal(t, before["toolu_live/unknown"], after["toolu_live/unknown"], "live 'unknown' row never changed")
		require.Equal(t, before["toolu_exec/2b1f8c3e-0000-4000-8000-000000000001"], after["toolu_exec/2b1f8c3e-0000-4000-8000-000000000001"])
		require.Equal(t, "backfill", after["toolu_exec/unknown"].get("source"))

		clearKeys(t, db, keys.CaptureSince, keys.BackfillThrough)
		res = mustRun(t, db)
		require.True(t, res.Ran)
		require.EqualValues(t, 0, res.Inserted)
		require.Equal(t, after, rows(t, db))
	})
}

// AC-23 with AC-7, AC-7a, AC-8, AC-9 and the empty-string rule, including
// "the one shape a builder must not get wrong": async_launched stores NULL
// for all three metrics, never 0. Wrong JSON types are absent, never fatal.
func TestBackfill_AC23_NullsZeroesAndAbsence(t *testing.T) {
	cases := []struct {
		name string
		task map[string]any
		want map[string]any // column → expected text (nil = NULL)
	}{
		{"async_launched shape", map[string]any{"status": "async_launched", "agent_id": "a", "model": "m", "is_async": true},
			map[string]any{"total_tokens": nil, "tool_use_count": nil, "duration_ms": nil, "is_async": "1"}},
		{"reported zeros", map[string]any{"total_tokens": 0, "tool_use_count": 0, "duration_ms": 0},
			map[string]any{"total_tokens": nil, "tool_use_count": "0", "duration_ms": nil, "is_async": "0"}},
		{"negatives", map[string]any{"total_tokens": -1, "tool_use_count": -3, "duration_ms": -5},
			map[string]any{"total_tokens": nil, "tool_use_count": nil, "duration_ms": nil}},
		{"empty strings", map[string]any{"status": "", "subagent_type": "", "description": "", "agent_id": "", "child_session_id": "", "model": ""},
			map[string]any{"agent_status": nil, "subagent_type": nil, "description": nil, "agent_id": nil, "child_session_id": nil, "model": nil}},
		{"wrong types", map[string]any{"total_tokens": "12", "tool_use_count": 2.5, "duration_ms": true, "model": 7, "subagent_type": map[string]any{"x": 1}, "is_async": "true"},
			map[string]any{"total_tokens": nil, "tool_use_count": nil, "duration_ms": nil, "model": nil, "subagent_type": nil, "is_async": "0"}},
		{"out of int64 range", map[string]any{"total_tokens": 1e30, "duration_ms": json9223372036854775808{}},
			map[string]any{"total_tokens": nil, "duration_ms": nil}},
		{"int64 max", map[string]any{"total_tokens": int64(9223372036854775807)},
			map[string]any{"total_tokens": "9223372036854775807"}},
		{"is_async false", map[string]any{"is_async": false}, map[string]any{"is_async": "0"}},
	}
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		for i, c := range cases {
			seed(t, db, message{ID: fmt.Sprint("m", i), Session: "s1", Task: "task-1", Turn: "t", Created: base,
				Meta: subagent(fmt.Sprint("toolu_", i), map[string]any{"status": ""}, c.task)})
		}
		res := mustRun(t, db)
		require.EqualValues(t, len(cases), res.Inserted)
		got := rows(t, db)
		for i, c := range cases {
			r := got[fmt.Sprint("toolu_", i, "/unknown")]
			require.NotNil(t, r, c.name)
			require.Nil(t, r.get("tool_status"), "%s: '' tool status is NULL", c.name)
			for col, want := range c.want {
				require.Equal(t, want, r.get(col), "%s: %s", c.name, col)
			}
		}
	})
}

// json9223372036854775808 marshals as an integer literal one past int64.
type json9223372036854775808 struct{}

func (json9223372036854775808) MarshalJSON() ([]byte, error) {
	return []byte("9223372036854775808"), nil
}

// AC-23b: metadata that is NULL, ”, 'null', malformed, or JSON but not an
// object never aborts the statement on either dialect; such rows simply do not
// qualify — for the INSERT and for the backfill_through MAX alike.
func TestBackfill_AC23b_MalformedMetadataNeverAborts(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		later := base.Add(time.Hour) // every malformed row is newer than the good one
		bad := []string{"", "null", "{bad", `{"tool_call_id":"x",`, "[1]", `"x"`, "5", "true",
			`{"normalized":5,"tool_call_id":"x"}`, `{"normalized":{"kind":["subagent_task"]},"tool_call_id":"x"}`,
			"   ", "{}",
			// Malformed, but holding the text the PostgreSQL prefilter lets through to the guarded cast.
			`{"tool_call_id":"x","normalized":{"kind":"subagent_task"`, `{"tool_call_id":"x","normalized":{"kind":"subagent_task",}}`,
			// Valid JSON text that jsonb refuses (22P05): trapped on PostgreSQL,
			// a non-qualifying document on SQLite.
			`{"normalized":{"kind":"text"},"x":"\u0000"}`}
		seed(t, db, message{ID: "good", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_good", nil, nil)})
		seed(t, db, message{ID: "nil", Session: "s1", Task: "task-1", Turn: "t", Created: later, NoMeta: true})
		for i, m := range bad {
			seed(t, db, message{ID: fmt.Sprint("bad", i), Session: "s1", Task: "task-1", Turn: "t", Created: later, Meta: m})
		}
		// A subagent_task whose payload is not an object still qualifies, with every payload column NULL.
		seed(t, db, message{ID: "scalar-payload", Session: "s1", Task: "task-1", Turn: "t", Created: base,
			Meta: `{"tool_call_id":"toolu_scalar","status":"failed","normalized":{"kind":"subagent_task","subagent_task":"oops"}}`})

		// The kind spelled with a \u escape is still 'subagent_task'.
		seed(t, db, message{ID: "escaped-kind", Session: "s1", Task: "task-1", Turn: "t", Created: base,
			Meta: `{"tool_call_id":"toolu_esc","normalized":{"kind":"subagent\u005ftask","subagent_task":{"model":"m"}}}`})

		res := mustRun(t, db)
		require.EqualValues(t, 3, res.Inserted)
		got := rows(t, db)
		require.Len(t, got, 3)
		require.Equal(t, "m", got["toolu_esc/unknown"].get("model"))
		require.Equal(t, "failed", got["toolu_scalar/unknown"].get("tool_status"))
		require.Nil(t, got["toolu_scalar/unknown"].get("model"))
		require.Equal(t, instant.Format(base), res.BackfillThrough, "no malformed row reaches the MAX")
	})
}

// AC-21 / AC-23b: the plain text test that spares non-candidate rows the
// JSON work never skips a qualifying document. The kind is spelled with each
// of its letters as a \u00XX escape in turn (lower- and upper-case hex); every
// one qualifies. Documents that hold other escapes, or name subagent_task
// only outside normalized.kind, do not.
func TestBackfill_AC21_EveryEscapedSpellingOfTheKindQualifies(t *testing.T) {
	const kind = "subagent_task"
	var docs []string
	for i, c := range kind {
		for _, hex := range []string{"%04x", "%04X"} {
			spelled := kind[:i] + `\u` + fmt.Sprintf(hex, c) + kind[i+1:]
			docs = append(docs, spelled)
		}
	}
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		for i, spelled := range docs {
			seed(t, db, message{ID: fmt.Sprint("esc", i), Session: "s1", Task: "task-1", Turn: "t", Created: base,
				// No subagent_task payload key: the escaped kind is the only spelling in the document.
				Meta: fmt.Sprintf(`{"tool_call_id":"toolu_esc%02d","status":"\u003cdone\u003e","normalized":{"kind":"%s"}}`, i, spelled)})
		}
		for i, m := range []string{
			`{"tool_call_id":"toolu_no1","normalized":{"kind":"tool_call","note":"subagent_task"}}`,
			`{"tool_call_id":"toolu_no2","normalized":{"kind":"subagent\u003ctask"}}`,
			`{"tool_call_id":"toolu_no3","normalized":{"kind":"\u00e9subagent_task"}}`,
		} {
			seed(t, db, message{ID: fmt.Sprint("no", i), Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Hour), Meta: m})
		}
		res := mustRun(t, db)
		require.EqualValues(t, len(docs), res.Inserted)
		got := rows(t, db)
		for i := range docs {
			r := got[fmt.Sprintf("toolu_esc%02d/unknown", i)]
			require.NotNil(t, r, "spelling %s", docs[i])
			require.Equal(t, "<done>", r.get("tool_status"), "spelling %s", docs[i])
		}
		require.Equal(t, instant.Format(base), res.BackfillThrough, "no non-qualifying document reaches the MAX")
	})
}
