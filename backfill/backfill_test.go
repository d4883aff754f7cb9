package backfill_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/backfill"
	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/hooks"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
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

// AC-24f: nothing qualifying → backfill_through is the ” sentinel, which is
// never parsed as an instant; capture_since is still written.
func TestBackfill_AC24f_EmptySentinelWhenNothingMatched(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		seed(t, db, message{ID: "plain", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: `{"normalized":{"kind":"text"}}`})
		res := mustRun(t, db)
		require.True(t, res.Ran)
		require.EqualValues(t, 0, res.Inserted)
		ks := keySet(t, db)
		require.NotNil(t, ks.BackfillThrough)
		require.Equal(t, "", *ks.BackfillThrough)
		_, err := instant.NewBoundary(*ks.BackfillThrough)
		require.ErrorIs(t, err, instant.ErrEmptySentinel)
		require.NotNil(t, ks.CaptureSince)
		_, err = instant.NewBoundary(*ks.CaptureSince)
		require.NoError(t, err)
	})
}

// AC-24 points 1, 3, 4: backfill_through is the newest qualifying created_at
// at nanosecond-form precision; capture_since is sampled AFTER the INSERT
// completed and before the key writes (the clock is read between the
// failpoints after the INSERT and after the first key write, and its reading
// is the key), and both are the fixed nine-digit form.
func TestBackfill_AC24_KeyValuesAndSamplingOrder(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		newest := base.Add(3*time.Hour + 7*time.Microsecond)
		seed(t, db,
			message{ID: "a", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)},
			message{ID: "b", Session: "s2", Task: "task-2", Turn: "t", Created: newest, Meta: subagent("toolu_b", nil, nil)},
			// Newer, but missing its task id: outside the predicate, so not the high-water mark.
			message{ID: "c", Session: "s2", Task: "", Turn: "t", Created: newest.Add(time.Hour), Meta: subagent("toolu_c", nil, nil)},
		)
		sampled := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC) // a whole second: still nine digits
		var order []string
		res, err := runHooked(t, db,
			func(p string) error {
				order = append(order, p)
				return nil
			},
			backfill.WithClock(func() time.Time {
				order = append(order, "clock")
				return sampled
			}))
		require.NoError(t, err)
		require.Equal(t, []string{hooks.FailpointBackfillMaxTaken, hooks.FailpointBackfillInserted, "clock", hooks.FailpointBackfillFirstKeyWritten}, order)

		ks := keySet(t, db)
		require.Equal(t, instant.Format(newest), *ks.BackfillThrough)
		require.Equal(t, "2026-07-30T04:39:37.271242000Z", *ks.BackfillThrough)
		require.Equal(t, res.CaptureSince, *ks.CaptureSince)
		require.Equal(t, "2026-08-01T12:00:00.000000000Z", *ks.CaptureSince, "AC-24 point 4: the clock's reading after the INSERT")
	})
}

// AC-24d: the guard is BOTH keys. With both present nothing runs, even with
// unbackfilled qualifying messages.
func TestBackfill_AC24d_GuardIsBothKeys(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		seed(t, db, message{ID: "a", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)})
		ctx := context.Background()
		for _, k := range []string{keys.CaptureSince, keys.BackfillThrough} {
			_, err := keys.WriteOnce(ctx, db.DB, db.Dialect, k, "2026-07-30T01:39:37Z")
			require.NoError(t, err)
		}
		res := mustRun(t, db)
		require.False(t, res.Ran)
		require.Empty(t, rows(t, db))
	})
}

// AC-24d (snapshot order): backfill_through never names an instant later than
// the newest message the INSERT covered. A trigger on the target table commits
// a NEWER qualifying message during the INSERT; had the MAX been taken after
// the INSERT it would name that message.
func TestBackfill_AC24d_MaxIsTakenBeforeTheInsert(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		seed(t, db, message{ID: "a", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)})
		late := instant.RowTime(db.Dialect, base.Add(24*time.Hour))
		meta := subagent("toolu_late", nil, nil)
		if db.Dialect == dialect.SQLite {
			_, err := db.DB.Exec(fmt.Sprintf(`CREATE TRIGGER late_message AFTER INSERT ON task_session_subagents BEGIN
				INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
				VALUES ('late', 's1', 'task-1', 't', '', '%s', '%s', '%s'); END`, meta, late, late))
			require.NoError(t, err)
		} else {
			_, err := db.DB.Exec(fmt.Sprintf(`CREATE FUNCTION late_message() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
				INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
				VALUES ('late', 's1', 'task-1', 't', '', '%s', '%s', '%s'); RETURN NULL; END $$`, meta, late.(time.Time).Format("2006-01-02 15:04:05.999999"), late.(time.Time).Format("2006-01-02 15:04:05.999999")))
			require.NoError(t, err)
			_, err = db.DB.Exec(`CREATE TRIGGER late_message AFTER INSERT ON task_session_subagents FOR EACH STATEMENT EXECUTE FUNCTION late_message()`)
			require.NoError(t, err)
		}
		res := mustRun(t, db)
		require.EqualValues(t, 1, res.Inserted)
		var n int
		require.NoError(t, db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_messages WHERE id = 'late'`).Scan(&n))
		require.Equal(t, 1, n, "the trigger did commit a newer message")
		require.Equal(t, instant.Format(base), *keySet(t, db).BackfillThrough)
	})
}

// AC-24d on PostgreSQL READ COMMITTED: the MAX and the INSERT both read the
// one scan's snapshot. A qualifying message committed by ANOTHER connection
// after that scan — after the MAX, before the INSERT, when a statement of its
// own would see it — is neither inserted nor claimed: the key names exactly
// the newest message the INSERT covered, never a later one. (On SQLite the
// reconciler's BEGIN IMMEDIATE excludes any concurrent writer for the whole
// pass; the trigger test above covers both dialects.)
func TestBackfill_AC24d_ConcurrentCommitNeverAdvancesTheKey(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres)
	declared(t, db)
	seed(t, db, message{ID: "a", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)})
	var visible int
	res, err := runHooked(t, db, func(p string) error {
		if p != hooks.FailpointBackfillMaxTaken {
			return nil
		}
		// Autocommitted on another pooled connection while Run's transaction is open.
		_, err := db.DB.Exec(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
			VALUES ('b', 's1', 'task-1', 't', '', $1, $2, $2)`, subagent("toolu_b", nil, nil), instant.RowTime(db.Dialect, base.Add(time.Hour)))
		if err != nil {
			return err
		}
		// Control: committed, so any snapshot taken from here on sees it.
		return db.DB.QueryRow(`SELECT COUNT(*) FROM task_session_messages WHERE id = 'b'`).Scan(&visible)
	})
	require.NoError(t, err)
	require.Equal(t, 1, visible, "the concurrent message was committed before the INSERT ran")
	require.EqualValues(t, 1, res.Inserted, "the INSERT copies the scan's winners, not a later snapshot")
	require.Contains(t, rows(t, db), "toolu_a/unknown")
	require.NotContains(t, rows(t, db), "toolu_b/unknown")
	require.Equal(t, instant.Format(base), *keySet(t, db).BackfillThrough, "the key names the newest message the INSERT covered")
}

// AC-23a: the backfill performs ONE full scan of task_session_messages. On
// PostgreSQL the transaction's own statistics count every scan of the table
// (sequential or index) that Run's statements started; the seed and the
// guard are outside them. There is one, however many messages qualify.
func TestBackfill_AC23a_OneScanOfTheMessages(t *testing.T) {
	db := dbtest.Open(t, dialect.Postgres)
	declared(t, db)
	for i := 0; i < 5; i++ {
		seed(t, db, message{ID: fmt.Sprint("m", i), Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Duration(i) * time.Second), Meta: subagent(fmt.Sprint("toolu_", i%3), nil, nil)})
	}
	seed(t, db, message{ID: "plain", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: `{}`})
	ctx := context.Background()
	tx, err := db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // the test only reads its counters
	scans := func() (n int64) {
		require.NoError(t, tx.QueryRowContext(ctx, `SELECT pg_stat_get_xact_numscans('task_session_messages'::regclass)`).Scan(&n))
		return n
	}
	before := scans()
	res, err := backfill.Run(ctx, tx, db.Dialect)
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Inserted)
	require.Equal(t, instant.Format(base.Add(4*time.Second)), res.BackfillThrough)
	require.EqualValues(t, 1, scans()-before)
}

// AC-24a/AC-24d at the package boundary: any failure returns an error and the
// caller's rollback leaves neither rows nor keys.
func TestBackfill_AC24d_FailureAtEveryPointLeavesNothing(t *testing.T) {
	for _, point := range []string{hooks.FailpointBackfillMaxTaken, hooks.FailpointBackfillInserted, hooks.FailpointBackfillFirstKeyWritten} {
		t.Run(point, func(t *testing.T) {
			eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
				seed(t, db, message{ID: "a", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_a", nil, nil)})
				boom := errors.New("boom")
				_, err := runHooked(t, db, func(p string) error {
					if p == point {
						return boom
					}
					return nil
				})
				require.ErrorIs(t, err, boom)
				ks := keySet(t, db)
				require.Nil(t, ks.CaptureSince)
				require.Nil(t, ks.BackfillThrough)
				require.Empty(t, rows(t, db))
			})
		})
	}
}

// AC-11: the backfill settles on exactly the live writer's terminal set (its
// SQL is built from toolstatus.SQLList, the list the live writer classifies
// against); pinned here against the classifier itself so the list and the
// function cannot drift apart.
func TestBackfill_AC11_TerminalSetIsTheLiveWritersSet(t *testing.T) {
	require.ElementsMatch(t, []string{"complete", "completed", "success", "error", "failed", "cancelled"}, toolstatus.Terminal)
	for _, s := range toolstatus.Terminal {
		require.True(t, toolstatus.IsTerminal(s), s)
	}
	for _, s := range []string{"pending", "in_progress", "async_launched", "Completed", ""} {
		require.False(t, toolstatus.IsTerminal(s), s)
	}
}

// The scan's winners table (both dialects) and the PostgreSQL metadata guard
// are private temp objects created and dropped by each run; a second run on
// the same session (a pooled connection, with pgx's statement cache) must
// find the new ones, not a stale plan, and none may outlive its run.
func TestBackfill_RepeatedRunsOnOneSession(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		conn, err := db.DB.Conn(context.Background())
		require.NoError(t, err)
		defer conn.Close()
		for i := 0; i < 3; i++ {
			seed(t, db, message{ID: fmt.Sprint("m", i), Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Duration(i) * time.Second), Meta: subagent(fmt.Sprint("toolu_", i), nil, nil)})
			for _, q := range []string{"BEGIN", "DELETE FROM kandev_meta WHERE key <> '" + keys.ExecutionSince + "'"} {
				_, err := conn.ExecContext(context.Background(), q)
				require.NoError(t, err)
			}
			res, err := backfill.Run(context.Background(), conn, db.Dialect)
			require.NoError(t, err, "run %d", i+1)
			require.EqualValues(t, 1, res.Inserted, "run %d", i+1)
			_, err = conn.ExecContext(context.Background(), "COMMIT")
			require.NoError(t, err)
			// The scan's private table is gone with the run, on the session that made it.
			left := `SELECT COUNT(*) FROM sqlite_temp_master WHERE name = 'schemastate_backfill_winners'`
			if db.Dialect == dialect.Postgres {
				// pg_class lists every session's temp tables: a backfill of
				// another test running in the same database is not this run's.
				left = `SELECT COUNT(*) FROM pg_class WHERE relname = 'schemastate_backfill_winners' AND relnamespace = pg_my_temp_schema()`
			}
			var n int
			require.NoError(t, conn.QueryRowContext(context.Background(), left).Scan(&n))
			require.Zero(t, n, "run %d left its temp table", i+1)
		}
	})
}

// AC-19, AC-21: one rule on both dialects for a member a document names
// twice — the last one is the value, at every level (README, design notes).
// SQLite's json_extract reads the first and PostgreSQL the last, so without
// the rule the same history backfills different rows on the two dialects.
func TestBackfill_AC21_DuplicatedMemberLastWinsOnBothDialects(t *testing.T) {
	task := `"normalized":{"kind":"subagent_task","subagent_task":{"model":"m1"}}`
	docs := map[string]string{
		// The identity itself: the row is b's, never a's.
		"m-id": `{"tool_call_id":"a","status":"completed",` + task + `,"tool_call_id":"b"}`,
		// A whole duplicated object: the later one replaces the earlier, it is not merged.
		"m-obj": `{"tool_call_id":"tc-obj","normalized":{"kind":"subagent_task","subagent_task":{"model":"first","agent_id":"gone"}},` +
			`"normalized":{"kind":"subagent_task","subagent_task":{"model":"second"}}}`,
		// Inside subagent_task, and a later value of another JSON type.
		"m-task": `{"tool_call_id":"tc-task","status":"in_progress","status":"completed","normalized":{"kind":"subagent_task",` +
			`"subagent_task":{"model":"m1","model":"m2","total_tokens":5,"total_tokens":"5","is_async":true,"is_async":false,` +
			`"tool_use_count":"x","tool_use_count":7,"status":"started","status":"completed"}}}`,
		// The kind: a later non-subagent kind disqualifies, a later subagent kind qualifies.
		"m-kind-out": `{"tool_call_id":"tc-kind-out","normalized":{"kind":"subagent_task","kind":"read"}}`,
		"m-kind-in":  `{"tool_call_id":"tc-kind-in","normalized":{"kind":"read"},"normalized":{"kind":"subagent_task"}}`,
		// A later non-string identity: the message has no tool_call_id (AC-21a).
		"m-id-null": `{"tool_call_id":"tc-null","tool_call_id":null,` + task + `}`,
	}
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		for id, doc := range docs {
			seed(t, db, message{ID: id, Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: doc})
		}
		res := mustRun(t, db)
		require.EqualValues(t, 4, res.Inserted)
		got := rows(t, db)
		require.ElementsMatch(t, []string{"b/unknown", "tc-obj/unknown", "tc-task/unknown", "tc-kind-in/unknown"}, mapKeys(got))
		require.Equal(t, []any{"completed", "m1"}, []any{got["b/unknown"].get("tool_status"), got["b/unknown"].get("model")})
		require.Equal(t, []any{"second", nil}, []any{got["tc-obj/unknown"].get("model"), got["tc-obj/unknown"].get("agent_id")})
		r := got["tc-task/unknown"]
		require.Equal(t, []any{"completed", "completed", "m2", nil, "0", "7", stored(db.Dialect, base)},
			[]any{r.get("tool_status"), r.get("agent_status"), r.get("model"), r.get("total_tokens"), r.get("is_async"), r.get("tool_use_count"), r.get("settled_at")})
	})
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// AC-21, AC-21b: a qualifying message whose created_at is not a time cannot
// be ordered nor become observed_at, so no row is derived from it — and it
// is counted and named, in Run's result and in the reconcile's backfill
// step, never dropped unseen. Only SQLite's untyped text can hold such a
// value (PostgreSQL's timestamp column refuses it on insert), so this is a
// SQLite test; the differential test pins the count at 0 on PostgreSQL.
func TestBackfill_AC21_UnreadableCreatedAtIsCountedNotDropped(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite)
	declared(t, db)
	seed(t, db,
		message{ID: "m-ok", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("tc-ok", nil, map[string]any{"model": "ok"})},
		message{ID: "m-bad1", Session: "s1", Task: "task-1", Turn: "t", CreatedRaw: "last tuesday", Meta: subagent("tc-bad1", nil, nil)},
		message{ID: "m-bad2", Session: "s1", Task: "task-1", Turn: "t", CreatedRaw: "2026-13-45 99:99:99", Meta: subagent("tc-bad2", nil, nil)},
		// Same key as m-ok: the row is still m-ok's, and this one is counted.
		message{ID: "m-dup-bad", Session: "s1", Task: "task-1", Turn: "t", CreatedRaw: "x", Meta: subagent("tc-ok", nil, map[string]any{"model": "bad"})},
		// Read by SQLite's datetime() as the moment of reading, a Julian day
		// and a time on 2000-01-01: none of them a stored instant.
		message{ID: "m-now", Session: "s1", Task: "task-1", Turn: "t", CreatedRaw: "now", Meta: subagent("tc-now", nil, nil)},
		message{ID: "m-julian", Session: "s1", Task: "task-1", Turn: "t", CreatedRaw: "2461000.5", Meta: subagent("tc-julian", nil, nil)},
		message{ID: "m-clock", Session: "s1", Task: "task-1", Turn: "t", CreatedRaw: "12:30:00", Meta: subagent("tc-clock", nil, nil)},
		// Not qualifying (no tool_call_id): skipped by AC-21a, not counted here.
		message{ID: "m-bad-noid", Session: "s1", Task: "task-1", Turn: "t", CreatedRaw: "x", Meta: subagent("", nil, nil)},
	)
	_, err := db.DB.Exec(`UPDATE task_session_messages SET created_at = '' WHERE id = 'm-bad2'`)
	require.NoError(t, err)

	res, err := run(t, db)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Inserted)
	require.EqualValues(t, 6, res.UnreadableCreatedAt)
	require.Equal(t, "m-bad1", res.FirstUnreadable)
	require.Equal(t, instant.Format(base), res.BackfillThrough)
	got := rows(t, db)
	require.Equal(t, []string{"tc-ok/unknown"}, mapKeys(got))
	require.Equal(t, "ok", got["tc-ok/unknown"].get("model"))

	// The reconcile's backfill step says it too.
	_, err = db.DB.Exec(`DELETE FROM task_session_subagents`)
	require.NoError(t, err)
	clearKeys(t, db, keys.CaptureSince, keys.BackfillThrough)
	step := reconcileQuietly(t, db).Step(reconcile.StepBackfill)
	require.NotNil(t, step)
	require.Contains(t, step.Detail, "6 qualifying messages skipped: created_at is not a time (first: m-bad1)")
}

// PostgreSQL scans with a plain cast of each candidate's metadata first and
// takes the guarded cast (a PL/pgSQL call and a subtransaction per
// candidate) only when a candidate is malformed; both give the same rows
// and keys, and the failed first attempt leaves the transaction usable.
func TestBackfill_PostgresGuardedCastOnlyForMalformedCandidates(t *testing.T) {
	guarded := func(msgs []string) bool {
		for _, m := range msgs {
			if strings.Contains(m, "guarded cast") {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name      string
		malformed bool
	}{{"well-formed candidates", false}, {"one malformed candidate", true}} {
		t.Run(tc.name, func(t *testing.T) {
			db := dbtest.Open(t, dialect.Postgres)
			declared(t, db)
			seed(t, db, message{ID: "good", Session: "s1", Task: "task-1", Turn: "t", Created: base, Meta: subagent("toolu_good", nil, nil)})
			seed(t, db, message{ID: "empty", Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Hour), Meta: ""})
			seed(t, db, message{ID: "none", Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Hour), NoMeta: true})
			seed(t, db, message{ID: "array", Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Hour), Meta: `["subagent_task"]`})
			if tc.malformed {
				seed(t, db, message{ID: "bad", Session: "s1", Task: "task-1", Turn: "t", Created: base.Add(time.Hour),
					Meta: `{"tool_call_id":"x","normalized":{"kind":"subagent_task"`})
			}
			var msgs []string
			res := mustRun(t, db, backfill.WithProgress(func(m string) { msgs = append(msgs, m) }))
			require.Equal(t, tc.malformed, guarded(msgs), "%q", msgs)
			require.EqualValues(t, 1, res.Inserted)
			require.Equal(t, instant.Format(base), res.BackfillThrough)
			require.Len(t, rows(t, db), 1)
			require.True(t, keySet(t, db).BackfillDone())
		})
	}
}

// AC-31 on the backfill: the INSERT names agent_execution_id and writes the
// sentinel itself, so a table whose column default says otherwise (a host's
// edit, an older DDL) still gets 'unknown' on every backfilled row, on both
// dialects. The default is changed after the reconcile, as a host would, and
// the backfill is run directly: a reconcile would restore the default first.
func TestBackfill_AC31_SentinelWrittenWhateverTheColumnDefault(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		db.SetColumnDefault(t, "task_session_subagents", "agent_execution_id", "'not-the-sentinel'")
		seed(t, db,
			message{ID: "m1", Session: "s1", Task: "k1", Turn: "t1", Created: base, Meta: subagent("toolu_1", nil, map[string]any{"model": "m"})},
			message{ID: "m2", Session: "s1", Task: "k1", Turn: "t1", Created: base.Add(time.Second), Meta: subagent("toolu_2", nil, nil)})
		res := mustRun(t, db)
		require.EqualValues(t, 2, res.Inserted)
		got := rows(t, db)
		require.Len(t, got, 2)
		for key, r := range got {
			require.Equal(t, "unknown", r.get("agent_execution_id"), key)
		}
	})
}

// A dialect other than the two is refused before anything is read or
// written: it takes neither dialect's statements.
func TestBackfill_UnknownDialectIsAnError(t *testing.T) {
	db := dbtest.Open(t, dialect.SQLite).Host(t)
	res, err := backfill.Run(context.Background(), db.DB, "mysql")
	require.ErrorContains(t, err, `unsupported dialect "mysql"`)
	require.False(t, res.Ran)
}

// Cross-checks (TestCrosscheck_…): the backfill and the live writer (capture)
// given the same subagents must store the same rows.

// AC-23b: one message whose metadata is nested deeper than the JSON parser's
// stack allows is not a subagent document and must not abort the backfill —
// which would fail it on every boot and never publish capture_since
// (AC-24a). SQLite's json_valid rejects it; PostgreSQL's cast raises
// "stack depth limit exceeded" (54001), not a data_exception.
func TestCrosscheck_AC23b_DeeplyNestedMetadataIsSkipped(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		deep := `{"tool_call_id":"tc-deep","d":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) +
			`,"normalized":{"kind":"subagent_task","subagent_task":{}}}`
		seed(t, db,
			message{ID: "m1", Session: "s1", Task: "task-s1", Turn: "turn-1", Created: base, Meta: deep},
			message{ID: "m2", Session: "s1", Task: "task-s1", Turn: "turn-1", Created: base, Meta: subagent("tc-ok", nil, nil)},
		)
		res := mustRun(t, db)
		require.EqualValues(t, 1, res.Inserted)
		got := rows(t, db)
		require.Len(t, got, 1)
		require.Contains(t, got, "tc-ok/unknown")
		require.NotNil(t, keySet(t, db).CaptureSince)
	})
}

// AC-7 … AC-9, AC-23: a metric value reaches the same column value on the
// backfill and on the live path (a frame line through capture.ParseFrame and
// the writer): a JSON integer literal within int64 is a measurement, subject
// to the zero and negative rules; anything else — a fraction, an exponent, a
// number past int64, a string — is "not reported", and never costs the row.
func TestCrosscheck_AC7_AC9_AC23_MetricEdgesAgree(t *testing.T) {
	const max = "9223372036854775807"
	cases := []struct {
		lit                     string
		tokens, count, duration any // nil → NULL
	}{
		{max, max, max, max},
		{"12", "12", "12", "12"},
		{"0", nil, "0", nil},
		{"-0", nil, "0", nil},
		{"-1", nil, nil, nil},
		{"-9223372036854775808", nil, nil, nil},
		{"9223372036854775808", nil, nil, nil},
		{"1e3", nil, nil, nil},
		{"1.5E2", nil, nil, nil},
		{"12.0", nil, nil, nil},
		{"12.5", nil, nil, nil},
		{"-0.0", nil, nil, nil},
		{"1e30", nil, nil, nil},
		{"-1e30", nil, nil, nil},
		{`"12"`, nil, nil, nil},
		{"null", nil, nil, nil},
	}
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		w, err := capture.NewWriter(context.Background(), db.DB, db.Dialect)
		require.NoError(t, err)
		rejected := map[string]string{}
		for i, c := range cases {
			metrics := `"total_tokens":` + c.lit + `,"tool_use_count":` + c.lit + `,"duration_ms":` + c.lit
			tc := fmt.Sprintf("tc-%02d", i)
			seed(t, db, message{ID: "m-" + tc, Session: "s1", Task: "task-s1", Turn: "turn-1", Created: base,
				Meta: `{"tool_call_id":"` + tc + `","normalized":{"kind":"subagent_task","subagent_task":{` + metrics + `}}}`})
			seed(t, db, message{ID: "x-" + tc, Session: "s2", Task: "task-s2", Turn: "turn-1", Created: base, Meta: `{}`})
			f, err := capture.ParseFrame([]byte(`{"session_id":"s2","task_id":"task-of-s2","execution_id":"0f8fad5b-d9cb-469f-a165-70867728950e",` +
				`"tool_call_id":"` + tc + `","subagent_task":{` + metrics + `}}`))
			if err != nil {
				rejected[tc] = c.lit
				continue
			}
			require.NoError(t, w.Record(context.Background(), f), "live: %s", c.lit)
		}
		mustRun(t, db)
		got := rows(t, db)
		for i, c := range cases {
			tc := fmt.Sprintf("tc-%02d", i)
			want := []any{c.tokens, c.count, c.duration}
			for _, key := range []string{tc + "/unknown", tc + "/0f8fad5b-d9cb-469f-a165-70867728950e"} {
				if _, ok := rejected[tc]; ok && key != tc+"/unknown" {
					continue
				}
				r := got[key]
				require.NotNil(t, r, key)
				require.Equal(t, want, []any{r.get("total_tokens"), r.get("tool_use_count"), r.get("duration_ms")}, "%s (%s)", c.lit, key)
			}
		}
		// The two paths read different inputs, by design. The backfill reads
		// untyped JSON history it must never abort on, so a metric that is
		// not an int64 literal is "not reported" and the row is kept. A live
		// frame is typed (TotalTokens int64 in the host), so an NDJSON line
		// whose metric is not an integer is not a valid frame: ingest reports
		// it with its line number and skips it (README, design notes). Pin
		// that exactly those literals, and no measurement, are rejected.
		for tc, lit := range rejected {
			_, err := strconv.ParseInt(lit, 10, 64)
			require.True(t, err != nil && lit != "null", "%s: ingest rejected a valid metric %s", tc, lit)
		}
	})
}

// AC-1, AC-11, AC-12, AC-22: a backfilled row merged by live frames. A
// settled backfilled row stays settled under a non-terminal frame; an
// unsettled one settles at the live observation time. source and
// observed_at stay the backfill's, and both paths store the same instant in
// the same form (the host's storage form on SQLite).
func TestCrosscheck_AC1_AC11_AC12_BackfilledRowMergedLive(t *testing.T) {
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		seed(t, db,
			message{ID: "m1", Session: "s1", Task: "task-s1", Turn: "turn-1", Created: base, Updated: base.Add(time.Second),
				Meta: subagent("tc-settled", map[string]any{"status": "completed"}, map[string]any{"status": "completed"})},
			message{ID: "m2", Session: "s1", Task: "task-s1", Turn: "turn-1", Created: base.Truncate(time.Second),
				Meta: subagent("tc-open", map[string]any{"status": "in_progress"}, map[string]any{"status": "started"})},
		)
		mustRun(t, db)
		w, err := capture.NewWriter(context.Background(), db.DB, db.Dialect)
		require.NoError(t, err)
		live := base.Add(time.Minute)
		for _, f := range []capture.Frame{
			{SessionID: "s1", TaskID: "task-s1", ToolCallID: "tc-settled", ToolStatus: "in_progress", ObservedAt: live,
				Subagent: capture.SubagentTask{Model: "m-late"}},
			{SessionID: "s1", TaskID: "task-s1", ToolCallID: "tc-open", ToolStatus: "success", ObservedAt: live},
			// A live-created row observed at the same instant as m1, for the storage form.
			{SessionID: "s1", TaskID: "task-s1", ExecutionID: "0f8fad5b-d9cb-469f-a165-70867728950e", ToolCallID: "tc-settled", ObservedAt: base},
			{SessionID: "s1", TaskID: "task-s1", ExecutionID: "0f8fad5b-d9cb-469f-a165-70867728950e", ToolCallID: "tc-open", ObservedAt: base.Truncate(time.Second)},
		} {
			require.NoError(t, w.Record(context.Background(), f))
		}
		got := rows(t, db)
		settled := got["tc-settled/unknown"]
		require.Equal(t, []any{"backfill", stored(db.Dialect, base), "completed", stored(db.Dialect, base.Add(time.Second)), "m-late"},
			[]any{settled.get("source"), settled.get("observed_at"), settled.get("tool_status"), settled.get("settled_at"), settled.get("model")})
		open := got["tc-open/unknown"]
		require.Equal(t, []any{"backfill", stored(db.Dialect, base.Truncate(time.Second)), "success", stored(db.Dialect, live)},
			[]any{open.get("source"), open.get("observed_at"), open.get("tool_status"), open.get("settled_at")})
		// Same instant, same stored text, whichever path wrote it.
		require.Equal(t, settled.get("observed_at"), got["tc-settled/0f8fad5b-d9cb-469f-a165-70867728950e"].get("observed_at"))
		require.Equal(t, open.get("observed_at"), got["tc-open/0f8fad5b-d9cb-469f-a165-70867728950e"].get("observed_at"))
	})
}

// AC-19, AC-23b (issue 22 §3): a document PostgreSQL's jsonb refuses only for
// a \u0000 or a lone-surrogate escape is read member by member on both
// dialects, as SQLite's parser reads it: an escape in a member the backfill
// does not read costs nothing; one inside a member it reads makes that member
// absent — the column NULL, nothing altered or escaped, the row kept, as the
// live writer stores such a field — and one inside tool_call_id leaves the
// message without the identity AC-21a requires, so it is skipped, as the live
// writer refuses such a frame. Both dialects write the same rows. (Before,
// PostgreSQL read every such document as {} and wrote none of these rows.)
func TestCrosscheck_AC19_UnstorableEscapeCostsOnlyItsMember(t *testing.T) {
	doc := func(tc, extra, desc string) string {
		return `{"tool_call_id":"` + tc + `",` + extra + `"status":"completed","normalized":{"kind":"subagent_task","subagent_task":` +
			`{"description":"` + desc + `","model":"m","total_tokens":1e3,"tool_use_count":7,"duration_ms":12,"is_async":true}}}`
	}
	msgs := []struct{ id, meta string }{
		{"unread-nul", doc("tc-unread-nul", `"raw_output":"a\u0000b",`, "d")},
		{"unread-high", doc("tc-unread-high", `"raw_output":["x\ud800"],`, "d")},
		{"unread-low", doc("tc-unread-low", `"raw_output":{"y":"\udfff z"},`, "d")},
		{"unread-key", doc("tc-unread-key", `"k\u0000":{"z":1},`, "d")},
		{"desc-nul", doc("tc-desc-nul", "", `a\u0000b`)},
		{"desc-low", doc("tc-desc-low", "", `\\\udc00`)},                                          // an escaped backslash, then a lone low surrogate
		{"not-escapes", doc("tc-not-escapes", `"raw_output":"\\u0000 \ud83d\ude00",`, `\\ud800`)}, // plain text, a pair
		{"id-nul", doc(`tc-id\u0000`, "", "d")},
	}
	eachDeclared(t, func(t *testing.T, db *dbtest.DB) {
		for i, m := range msgs {
			seed(t, db, message{ID: m.id, Session: "s1", Task: "task-s1", Turn: "turn-1", Created: base.Add(time.Duration(i) * time.Second), Meta: m.meta})
		}
		res := mustRun(t, db)
		require.EqualValues(t, 7, res.Inserted)
		got := rows(t, db)
		require.Len(t, got, 7)
		for _, tc := range []string{"tc-unread-nul", "tc-unread-high", "tc-unread-low", "tc-unread-key", "tc-desc-nul", "tc-desc-low", "tc-not-escapes"} {
			r := got[tc+"/unknown"]
			require.NotNil(t, r, tc)
			require.Equal(t, []any{"m", nil, "7", "12", "1", "completed", "turn-1"},
				[]any{r.get("model"), r.get("total_tokens"), r.get("tool_use_count"), r.get("duration_ms"), r.get("is_async"), r.get("tool_status"), r.get("turn_id")}, tc)
		}
		for _, tc := range []string{"tc-unread-nul", "tc-unread-high", "tc-unread-low", "tc-unread-key"} {
			require.Equal(t, "d", got[tc+"/unknown"].get("description"), tc)
		}
		require.Nil(t, got["tc-desc-nul/unknown"].get("description"), "a NUL: the member is absent")
		require.Nil(t, got["tc-desc-low/unknown"].get("description"), "a lone surrogate: the member is absent")
		require.Equal(t, `\ud800`, got["tc-not-escapes/unknown"].get("description"), "an escaped backslash is text")
		require.Equal(t, instant.Format(base.Add(6*time.Second)), res.BackfillThrough, "the skipped message is not a winner")
	})
}
