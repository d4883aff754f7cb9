package backfill_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/internal/dbtest"
)

// AC-23b: one message whose metadata is nested deeper than the JSON parser's
// stack allows is not a subagent document and must not abort the backfill —
// which would fail it on every boot and never publish capture_since
// (AC-24a). SQLite's json_valid rejects it; PostgreSQL's cast raises
// "stack depth limit exceeded" (54001), not a data_exception.
func TestCrosscheck_AC23b_DeeplyNestedMetadataIsSkipped(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		declared(t, db)
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
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		declared(t, db)
		w := capture.NewWriter(db.DB, db.Dialect)
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
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		declared(t, db)
		seed(t, db,
			message{ID: "m1", Session: "s1", Task: "task-s1", Turn: "turn-1", Created: base, Updated: base.Add(time.Second),
				Meta: subagent("tc-settled", map[string]any{"status": "completed"}, map[string]any{"status": "completed"})},
			message{ID: "m2", Session: "s1", Task: "task-s1", Turn: "turn-1", Created: base.Truncate(time.Second),
				Meta: subagent("tc-open", map[string]any{"status": "in_progress"}, map[string]any{"status": "started"})},
		)
		mustRun(t, db)
		w := capture.NewWriter(db.DB, db.Dialect)
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
