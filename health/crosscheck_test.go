package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/backfill"
	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// The three packages must agree on which subagent messages are recordable
// (AC-2, AC-21a, AC-28): the backfill is a writer that never misses, so run
// over messages dated after the capture_since it samples, it must leave the
// health check with no shortfall (every message it skips is excluded from the
// expected set) and no excess (every row it writes is accounted for).

// edgeMessage is one subagent message at an identity or document edge.
type edgeMessage struct {
	name           string
	session        string
	task           any // nil → NULL
	meta           string
	recorded       bool   // the backfill writes a row for it
	liveToolCallID string // when the identity is expressible as a frame: the frame's tool_call_id
}

func kindDoc(toolCallID string) string {
	return `{"tool_call_id":` + toolCallID + `,"status":"completed","normalized":{"kind":"subagent_task","subagent_task":{"status":"completed"}}}`
}

var edgeMessages = []edgeMessage{
	{name: "ordinary", session: "s1", task: "task-s1", meta: kindDoc(`"tc-ok"`), recorded: true, liveToolCallID: "tc-ok"},
	{name: "whitespace tool_call_id", session: "s1", task: "task-s1", meta: kindDoc(`" "`), recorded: true, liveToolCallID: " "},
	{name: "whitespace task_id", session: "s1", task: " ", meta: kindDoc(`"tc-ws-task"`), recorded: true, liveToolCallID: "tc-ws-task"},
	{name: "empty tool_call_id", session: "s1", task: "task-s1", meta: kindDoc(`""`), liveToolCallID: ""},
	{name: "null tool_call_id", session: "s1", task: "task-s1", meta: kindDoc(`null`)},
	{name: "absent tool_call_id", session: "s1", task: "task-s1", meta: `{"normalized":{"kind":"subagent_task","subagent_task":{}}}`},
	{name: "number tool_call_id", session: "s1", task: "task-s1", meta: kindDoc(`123`)},
	{name: "float tool_call_id", session: "s1", task: "task-s1", meta: kindDoc(`1.5`)},
	{name: "boolean tool_call_id", session: "s1", task: "task-s1", meta: kindDoc(`true`)},
	{name: "object tool_call_id", session: "s1", task: "task-s1", meta: kindDoc(`{"id":"tc-obj"}`)},
	{name: "array tool_call_id", session: "s1", task: "task-s1", meta: kindDoc(`["tc-arr"]`)},
	{name: "NULL task_id", session: "s1", task: nil, meta: kindDoc(`"tc-null-task"`), liveToolCallID: "tc-null-task"},
	{name: "empty task_id", session: "s1", task: "", meta: kindDoc(`"tc-empty-task"`), liveToolCallID: "tc-empty-task"},
	{name: "empty session id", session: "", task: "task-x", meta: kindDoc(`"tc-empty-session"`), liveToolCallID: "tc-empty-session"},
	{name: "kind not a string", session: "s1", task: "task-s1", meta: `{"tool_call_id":"tc-kind-arr","normalized":{"kind":["subagent_task"]}}`},
	{name: "kind escaped", session: "s1", task: "task-s1", meta: `{"tool_call_id":"tc-kind-esc","normalized":{"kind":"subagent\u005ftask"}}`, recorded: true, liveToolCallID: "tc-kind-esc"},
	{name: "tool_call_id escaped", session: "s1", task: "task-s1", meta: kindDoc(`"tc-\u0065sc"`), recorded: true, liveToolCallID: "tc-esc"},
	{name: "malformed", session: "s1", task: "task-s1", meta: `{"tool_call_id":"tc-bad","normalized":{"kind":"subagent_task"`},
	{name: "array document", session: "s1", task: "task-s1", meta: `[` + kindDoc(`"tc-in-array"`) + `]`},
	{name: "duplicate older", session: "s1", task: "task-s1", meta: kindDoc(`"tc-dup"`), recorded: true, liveToolCallID: "tc-dup"},
	{name: "duplicate newer", session: "s1", task: "task-s1", meta: kindDoc(`"tc-dup"`), recorded: true, liveToolCallID: "tc-dup"},
	{name: "numbers and escapes", session: "s1", task: "task-s1", recorded: true, liveToolCallID: "tc-nums",
		meta: "{\"tool_call_id\":\"tc-nums\",\t\"normalized\" : {\"kind\":\"subagent_task\",\"subagent_task\":{\"total_tokens\":1E+2,\"x\":-0.5e-3," +
			"\"y\":[[],{},[0,-0,1.0e10]],\"s\":\"a\\\"b\\\\c\\/d<e>f{g}[h]\\ud83d\\ude00\u00e9\u007f\"}}}\n"},
	{name: "digit run too long to cast safely", session: "s1", task: "task-s1", meta: `{"tool_call_id":"tc-digits","n":0.` + strings.Repeat("1", 20000) + `e-9999,"normalized":{"kind":"subagent_task"}}`},
	{name: "nested beyond any parser", session: "s1", task: "task-s1", meta: `{"tool_call_id":"tc-deep","d":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `,"normalized":{"kind":"subagent_task"}}`},
	{name: "large valid document", session: "s1", task: "task-s1", recorded: true, liveToolCallID: "tc-large", meta: largeDoc("tc-large", 2500)},
}

// largeDoc is a valid subagent document carrying n short strings in an
// array (a tool call's file list, say): valid JSON of ordinary shape.
func largeDoc(toolCallID string, n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`"f%d"`, i)
	}
	return `{"tool_call_id":"` + toolCallID + `","raw_input":{"files":[` + strings.Join(items, ",") +
		`]},"normalized":{"kind":"subagent_task","subagent_task":{"status":"completed"}}}`
}

// AC-21a / AC-2 / AC-28: the backfill's skip set and the SHORTFALL
// predicate's exclusions are the same set, and every backfilled row is
// accounted for by its message, on both dialects.
func TestCrosscheck_AC21a_AC28_BackfillSkipsAreNotShortfall(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.session("")
		// Dated after the capture_since the backfill is about to sample, so
		// every message falls inside the health window.
		future := time.Now().UTC().Add(time.Hour)
		for i, m := range edgeMessages {
			s.rawMessage(m.session, m.task, m.meta, s.ts(future.Add(time.Duration(i)*time.Millisecond)))
		}
		tx, err := s.db.BeginTx(s.ctx, nil)
		require.NoError(t, err)
		res, err := backfill.Run(s.ctx, tx, s.db.Dialect)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		require.True(t, res.Ran)

		want := map[string]bool{}
		if s.db.Dialect == dialect.SQLite {
			// Valid JSON to SQLite; past numeric's scale to PostgreSQL, whose
			// backfill and health check then both read it as no document.
			want["tc-digits"] = true
		}
		for _, m := range edgeMessages {
			if m.recorded {
				want[m.liveToolCallID] = true
			}
		}
		require.Equal(t, slices.Sorted(maps.Keys(want)), s.toolCallIDs(), "rows the backfill wrote")

		r := s.eval()
		require.Equal(t, counts{health.Healthy, 0, 0, 0}, countsOf(r),
			"a message the backfill skips must not be expected; a row it writes must be accounted for")
	})
}

// AC-2 / AC-21a: the live writer skips exactly the frames whose backfill
// counterparts are skipped, for every identity a frame can express.
func TestCrosscheck_AC2_AC21a_LiveSkipsWhatTheBackfillSkips(t *testing.T) {
	eachStore(t, func(t *testing.T, s *store) {
		s.session("")
		w, err := capture.NewWriter(context.Background(), s.db.DB, s.db.Dialect)
		require.NoError(t, err)
		seen := map[string]bool{}
		for _, m := range edgeMessages {
			if m.liveToolCallID == "" && m.meta != kindDoc(`""`) {
				continue // not expressible as a frame (no string tool_call_id)
			}
			if seen[m.name] {
				continue
			}
			seen[m.name] = true
			task, _ := m.task.(string)
			err := w.Record(s.ctx, capture.Frame{SessionID: m.session, TaskID: task, ToolCallID: m.liveToolCallID,
				ExecutionID: "0f8fad5b-d9cb-469f-a165-70867728950e", ToolStatus: "completed"})
			if m.recorded {
				require.NoError(t, err, m.name)
			} else {
				require.True(t, errors.Is(err, capture.ErrNoIdentity), "%s: %v", m.name, err)
			}
		}
	})
}

func (s *store) toolCallIDs() []string {
	s.t.Helper()
	ids := dbtest.StringsFrom(s.t, s.db, `SELECT DISTINCT tool_call_id FROM task_session_subagents`)
	slices.Sort(ids)
	return ids
}

// histMeta is a historical subagent message's metadata as the host writes it.
func histMeta(toolCallID, toolStatus string, task map[string]any) string {
	b, err := json.Marshal(map[string]any{"tool_call_id": toolCallID, "status": toolStatus,
		"normalized": map[string]any{"kind": "subagent_task", "subagent_task": task}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// End to end, on both dialects: a store with history is reconciled (which
// backfills), the live writer records new subagents whose messages the host
// also writes, and the health check reads healthy; messages without frames
// then grow the shortfall by exactly one each (AC-29), and a cross-execution
// collision is counted as a collision and nothing else (AC-32, AC-28).
func TestCrosscheck_EndToEnd_ReconcileCaptureHealth(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		db.Host(t)
		s := &store{t: t, db: db, ctx: ctx}
		for _, id := range []string{"s1", "s2", "s3"} {
			s.session(id)
		}
		hist := time.Now().UTC().Add(-6 * time.Hour)
		old := func(i int) any { return s.ts(hist.Add(time.Duration(i) * time.Minute)) }
		// The reference mix: async_launched (no metrics), completed (metrics),
		// OpenCode started (child session, no agent id), no status, a nested
		// one, a duplicate message, an AC-2 skip and malformed metadata.
		s.rawMessage("s1", "task-s1", histMeta("h-async-1", "completed", map[string]any{"status": "async_launched", "agent_id": "a1", "model": "claude-opus-5[1m]", "is_async": true}), old(1))
		s.rawMessage("s1", "task-s1", histMeta("h-async-2", "completed", map[string]any{"status": "async_launched", "agent_id": "a2", "model": "claude-opus-5[1m]", "is_async": true}), old(2))
		s.rawMessage("s1", "task-s1", histMeta("h-done", "completed", map[string]any{"status": "completed", "agent_id": "a3", "total_tokens": 275717, "tool_use_count": 0, "duration_ms": 5400}), old(3))
		s.rawMessage("s2", "task-s2", histMeta("h-started", "in_progress", map[string]any{"status": "started", "child_session_id": "oc-1"}), old(4))
		s.rawMessage("s2", "task-s2", histMeta("h-nostatus", "", map[string]any{}), old(5))
		s.rawMessage("s2", "task-s2", `{"tool_call_id":"h-nested","parent_tool_call_id":"h-started","status":"completed","normalized":{"kind":"subagent_task","subagent_task":{"status":"completed"}}}`, old(6))
		s.rawMessage("s3", "task-s3", histMeta("h-dup", "in_progress", map[string]any{"status": "started"}), old(7))
		s.rawMessage("s3", "task-s3", histMeta("h-dup", "completed", map[string]any{"status": "completed"}), old(8))
		s.rawMessage("s3", "", histMeta("h-skip", "completed", map[string]any{}), old(9))
		s.rawMessage("s3", "task-s3", "{bad", old(10))
		s.rawMessage("s3", "task-s3", `{"text":"an ordinary message"}`, old(11))

		rep, err := reconcile.Reconcile(ctx, db.DB, quiet)
		require.NoError(t, err)
		require.NotNil(t, rep)
		require.Equal(t, 7, s.rowCount(`source = 'backfill'`), "one row per distinct qualifying (session, tool_call_id)")
		ks, err := keys.Read(ctx, db.DB, db.Dialect)
		require.NoError(t, err)
		require.Equal(t, keys.Activated, ks.State())
		since, err := instant.Parse(*ks.CaptureSince)
		require.NoError(t, err)
		require.Equal(t, counts{health.NothingSinceActivation, 0, 0, 0}, countsOf(s.eval()))

		// Live: the host writes each message and the writer records the frames
		// (recognised on an update, settled on a terminal frame).
		w, err := capture.NewWriter(context.Background(), db.DB, db.Dialect)
		require.NoError(t, err)
		live := func(session, toolCallID, execution string, observed time.Time, writeMessage bool) {
			if writeMessage {
				s.rawMessage(session, "task-"+session, histMeta(toolCallID, "completed", map[string]any{"status": "completed"}), s.ts(observed))
			}
			for _, st := range []string{"in_progress", "completed"} {
				require.NoError(t, w.Record(ctx, capture.Frame{SessionID: session, TaskID: "task-" + session, TurnID: "turn-1",
					ExecutionID: execution, ToolCallID: toolCallID, ToolStatus: st, ObservedAt: observed,
					Subagent: capture.SubagentTask{Status: "completed", Model: "m", TotalTokens: 10}}))
			}
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		// The earliest storable instant at or after capture_since: the key
		// has nanosecond digits, the column microseconds (AC-24e).
		atSince := since.Truncate(time.Microsecond)
		if !atSince.Equal(since) {
			atSince = atSince.Add(time.Microsecond)
		}
		// Its message is written later, inside the window: were the row
		// classified before capture_since, this would be a shortfall.
		live("s1", "l-at-boundary", "exec-1", atSince, false)
		s.rawMessage("s1", "task-s1", histMeta("l-at-boundary", "completed", nil), s.ts(now))
		live("s1", "l-1", "exec-1", now, true)
		live("s2", "l-2", "", now.Add(time.Millisecond), true) // no execution id: 'unknown'
		live("s3", "l-3", "exec-3", now.Add(2*time.Millisecond), true)
		r := s.eval()
		require.Equal(t, counts{health.Healthy, 0, 0, 0}, countsOf(r))
		require.Equal(t, instant.Format(now.Add(2*time.Millisecond)), *r.LastObservedAt)
		require.Equal(t, capture.Counters{Attempted: 8, Persisted: 8, UnknownExecution: 2}, w.Counters())

		// The writer stops; the host keeps writing messages.
		s.rawMessage("s1", "task-s1", histMeta("l-missed-1", "completed", nil), s.ts(now.Add(time.Second)))
		require.Equal(t, counts{health.Shortfall, 1, 0, 0}, countsOf(s.eval()))
		s.rawMessage("s2", "task-s2", histMeta("l-missed-2", "completed", nil), s.ts(now.Add(2*time.Second)))
		require.Equal(t, counts{health.Shortfall, 2, 0, 0}, countsOf(s.eval()))

		// A late frame from an earlier execution reusing l-1's tool_call_id:
		// a second row (AC-32), one more collision, shortfall and excess as they were.
		live("s1", "l-1", "exec-0", now.Add(3*time.Second), false)
		require.Equal(t, counts{health.Shortfall, 2, 0, 1}, countsOf(s.eval()))
	})
}

func (s *store) rowCount(where string) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.db.QueryRowContext(s.ctx, `SELECT COUNT(*) FROM task_session_subagents WHERE `+where).Scan(&n))
	return n
}
