package backfill_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/backfill"
	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// One history, one result: the backfill reads a history the same way on both
// dialects, and stores what the live writer (capture) stores for it.

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
