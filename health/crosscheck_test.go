package health_test

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/backfill"
	"github.com/schemastate/schemastate/capture"
	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/dbtest"
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
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		s := newStore(t, db)
		s.session("")
		// Dated after the capture_since the backfill is about to sample, so
		// every message falls inside the health window.
		future := time.Now().UTC().Add(time.Hour)
		for i, m := range edgeMessages {
			s.rawMessage(m.session, m.task, m.meta, s.ts(future.Add(time.Duration(i)*time.Millisecond)))
		}
		tx, err := db.BeginTx(s.ctx, nil)
		require.NoError(t, err)
		res, err := backfill.Run(s.ctx, tx, db.Dialect)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		require.True(t, res.Ran)

		want := map[string]bool{}
		if db.Dialect == dialect.SQLite {
			// Valid JSON to SQLite; past numeric's scale to PostgreSQL, whose
			// backfill and health check then both read it as no document.
			want["tc-digits"] = true
		}
		for _, m := range edgeMessages {
			if m.recorded {
				want[m.liveToolCallID] = true
			}
		}
		require.Equal(t, sortedKeys(want), s.toolCallIDs(), "rows the backfill wrote")

		r := s.eval()
		require.Equal(t, counts{health.Healthy, 0, 0, 0}, countsOf(r),
			"a message the backfill skips must not be expected; a row it writes must be accounted for")
	})
}

// AC-2 / AC-21a: the live writer skips exactly the frames whose backfill
// counterparts are skipped, for every identity a frame can express.
func TestCrosscheck_AC2_AC21a_LiveSkipsWhatTheBackfillSkips(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		s := newStore(t, db)
		s.session("")
		w := capture.NewWriter(db.DB, db.Dialect)
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
	rs, err := s.db.QueryContext(s.ctx, `SELECT tool_call_id FROM task_session_subagents`)
	require.NoError(s.t, err)
	defer rs.Close()
	out := map[string]bool{}
	for rs.Next() {
		var v string
		require.NoError(s.t, rs.Scan(&v))
		out[v] = true
	}
	require.NoError(s.t, rs.Err())
	return sortedKeys(out)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
