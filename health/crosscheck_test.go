package health_test

import (
	"context"
	"database/sql"
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
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/gen"
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
		require.Equal(t, slices.Sorted(maps.Keys(want)), s.toolCallIDs(), "rows the backfill wrote")

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
		w, err := capture.NewWriter(context.Background(), db.DB, db.Dialect)
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

// The differential test (AC-19: one contract, two dialects): the same
// generated history — the reference population, plus irregular documents
// at every edge where the two dialects' JSON functions differ — is fed to
// SQLite and to PostgreSQL; the backfill must write the same rows, byte for
// byte once timestamps are read as instants, and the health check must read
// the same numbers after the same missed writes, orphans and collisions.

// diffActivation is the capture_since the health half evaluates against: in
// the middle of the generated history, so both sides of the window are full.
var diffActivation = time.Date(2026, 8, 8, 0, 0, 0, 123456789, time.UTC)

// irregular is one subagent message at an edge, written identically to both
// dialects (created at diffActivation + at).
type irregular struct {
	id, task, meta string
	at             time.Duration
}

func irregularHistory() []irregular {
	sub := func(tc, extra string) string {
		return `{"tool_call_id":"` + tc + `","status":"completed",` + extra + `"normalized":{"kind":"subagent_task","subagent_task":{"status":"completed","model":"m"}}}`
	}
	files, offsets := make([]string, 6000), make([]string, 15000)
	for i := range files {
		files[i] = fmt.Sprintf(`"src/f%05d.go"`, i)
	}
	for i := range offsets {
		offsets[i] = fmt.Sprint(100000 + i*7)
	}
	big := func(tc string) string {
		return sub(tc, `"raw_input":{"files":[`+strings.Join(files, ",")+`],"offsets":[`+strings.Join(offsets, ",")+`]},`)
	}
	var out []irregular
	for _, side := range []struct {
		p  string
		at time.Duration
	}{{"before", -time.Hour}, {"after", time.Hour}} {
		add := func(name, meta string) {
			out = append(out, irregular{id: "irr-" + side.p + "-" + name, task: "task-irr", meta: meta, at: side.at + time.Duration(len(out))*time.Second})
		}
		p := side.p
		add("dup-id", `{"tool_call_id":"irr-`+p+`-a","normalized":{"kind":"subagent_task","subagent_task":{"model":"x"}},"tool_call_id":"irr-`+p+`-b"}`)
		add("dup-kind-out", `{"tool_call_id":"irr-`+p+`-kind-out","normalized":{"kind":"subagent_task","kind":"read"}}`)
		add("dup-kind-in", `{"tool_call_id":"irr-`+p+`-kind-in","normalized":{"kind":"read"},"normalized":{"kind":"subagent_task"}}`)
		add("dup-fields", `{"tool_call_id":"irr-`+p+`-fields","status":"in_progress","status":"completed","normalized":{"kind":"subagent_task",`+
			`"subagent_task":{"model":"m1","model":"m2","total_tokens":5,"total_tokens":"5","is_async":true,"is_async":false,"tool_use_count":"x","tool_use_count":7}}}`)
		add("dup-null-id", `{"tool_call_id":"irr-`+p+`-null","tool_call_id":null,"normalized":{"kind":"subagent_task"}}`)
		add("big", big("irr-"+p+"-big"))
		add("big-truncated", big("irr-" + p + "-big-truncated")[:150000])
		add("trailing", sub("irr-"+p+"-trailing", "")+" x")
		add("escaped-kind", `{"tool_call_id":"irr-`+p+`-escaped-kind","normalized":{"kind":"subagent\u005ftask"}}`)
		add("escaped-key", `{"tool\u005fcall_id":"irr-`+p+`-escaped-key","normalized":{"kind":"subagent_task"}}`)
		add("metrics", `{"tool_call_id":"irr-`+p+`-metrics","normalized":{"kind":"subagent_task","subagent_task":`+
			`{"total_tokens":1e3,"tool_use_count":9223372036854775807,"duration_ms":9223372036854775808}}}`)
		add("number-id", `{"tool_call_id":42,"normalized":{"kind":"subagent_task"}}`)
		add("array-doc", `[`+sub("irr-"+p+"-array", "")+`]`)
		// Escapes jsonb refuses (issue 22 §3): in a member nothing reads, in
		// a member name, inside a read member (the column NULL, the row
		// kept), inside tool_call_id (no identity: skipped, never expected).
		add("nul-unread", sub("irr-"+p+"-nul-unread", `"raw_output":"a\u0000b",`))
		add("surrogate-unread", sub("irr-"+p+"-surrogate-unread", `"raw_input":{"q":["\udc00","\ud800x"]},`))
		add("nul-name", sub("irr-"+p+"-nul-name", `"x\u0000":{"y":1},`))
		add("nul-read", `{"tool_call_id":"irr-`+p+`-nul-read","status":"completed","normalized":{"kind":"subagent_task","subagent_task":{"model":"m\u0000","description":"\ud83d","status":"completed"}}}`)
		add("nul-id", sub("irr-"+p+`-nul-id\u0000`, ""))
		add("newer-twin", sub("irr-"+p+"-twin", `"parent_tool_call_id":"newer",`))
		out = append(out, irregular{id: "irr-" + p + "-older-twin", task: "task-irr", meta: sub("irr-"+p+"-twin", `"parent_tool_call_id":"older",`), at: side.at - time.Minute})
		out = append(out, irregular{id: "irr-" + p + "-no-task", task: "", meta: sub("irr-"+p+"-no-task", ""), at: side.at})
	}
	return out
}

// diffStore is one dialect's side of the differential test.
type diffStore struct {
	db       *dbtest.DB
	backfill *reconcile.Step
	rows     []string
	report   *health.Report
	// escaped counts the generated messages given a \u0000 escape, and
	// escapedMissing those of them the backfill wrote no row for.
	escaped, escapedMissing int
}

func runDifferential(t *testing.T, d dialect.Dialect, unreadable []string) diffStore {
	t.Helper()
	ctx := context.Background()
	db := dbtest.Open(t, d)
	_, err := gen.Generate(ctx, db.DB, gen.Config{ScaleMB: 2, Population: 1, State: gen.Predating, Seed: 19})
	require.NoError(t, err)
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.ExecContext(ctx, db.Q(q), args...)
		require.NoError(t, err, q)
	}
	exec(`INSERT INTO task_sessions (id, task_id) VALUES ('s-irr', 'task-irr')`)
	insert := func(id, task string, meta, created any) {
		exec(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, type, metadata, created_at, updated_at)
			VALUES (?, 's-irr', ?, 'turn-irr', '', 'tool_call', ?, ?, ?)`, id, task, meta, created, created)
	}
	for _, m := range irregularHistory() {
		at := instant.RowTime(d, diffActivation.Add(m.at))
		insert(m.id, m.task, m.meta, at)
	}
	// created_at that is not a time: only SQLite's text can hold one.
	for i, raw := range unreadable {
		insert(fmt.Sprintf("irr-unreadable-%d", i), "task-irr", fmt.Sprintf(`{"tool_call_id":"irr-unreadable-%d","normalized":{"kind":"subagent_task"}}`, i), raw)
	}
	// Issue 22 §3: a \u0000 escape in a member nothing reads, in every
	// seventh generated subagent message (before, PostgreSQL read each such
	// document as no document and backfilled none of them).
	exec(`UPDATE task_session_messages SET metadata = '{"raw_output":"\u0000",' || substr(metadata, 2)
		WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS n FROM task_session_messages
			WHERE metadata LIKE '{%' AND metadata LIKE '%"subagent_task"%' AND id NOT LIKE 'irr-%') AS sub WHERE n % 7 = 0)`)

	// The backfill, as the host's boot runs it.
	rep, err := reconcile.Reconcile(ctx, db.DB, quiet)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	s := diffStore{db: db, backfill: rep.Step(reconcile.StepBackfill)}
	require.NotNil(t, s.backfill)
	s.rows = subagentRows(t, db)
	s.escaped, s.escapedMissing = escapedBackfilled(t, db)

	// The same missed writes, orphans and cross-execution reuse on both,
	// chosen by the (identical) tool_call_ids, then one health evaluation
	// against a boundary in the middle of the history.
	exec(`DELETE FROM kandev_meta WHERE key = ?`, keys.CaptureSince)
	exec(`INSERT INTO kandev_meta (key, value) VALUES (?, ?)`, keys.CaptureSince, instant.Format(diffActivation))
	exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, source, observed_at, updated_at)
		SELECT 'reuse:' || id, task_session_id, task_id, 'exec-2', tool_call_id, 'live', observed_at, updated_at
		FROM task_session_subagents WHERE substr(tool_call_id, 9, 1) IN ('d', 'e', 'F')`)
	exec(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, source, observed_at, updated_at)
		SELECT 'orphan:' || id, task_session_id, task_id, 'exec-3', 'orphan-' || tool_call_id, 'live', observed_at, updated_at
		FROM task_session_subagents WHERE substr(tool_call_id, 9, 1) IN ('g', 'H') AND agent_execution_id = 'unknown'`)
	exec(`DELETE FROM task_session_subagents WHERE substr(tool_call_id, 9, 1) IN ('a', 'b', 'C', 'x')
		OR tool_call_id IN ('irr-after-big', 'irr-after-b', 'irr-after-fields', 'irr-after-escaped-key', 'irr-after-twin',
			'irr-after-nul-unread', 'irr-after-nul-read')`)
	s.report, err = health.Evaluate(ctx, db.DB)
	require.NoError(t, err)
	return s
}

// escapedBackfilled counts the generated messages whose metadata starts with
// the \u0000 member the test gave them, and those of them whose (session,
// tool_call_id) has no backfilled row. The tool_call_id is read in Go, which
// decodes the escape as any JSON reader does.
func escapedBackfilled(t *testing.T, db *dbtest.DB) (escaped, missing int) {
	t.Helper()
	rs, err := db.Query(`SELECT task_session_id, metadata FROM task_session_messages WHERE substr(metadata, 1, 23) = '{"raw_output":"\u0000",' AND id NOT LIKE 'irr-%'`)
	require.NoError(t, err)
	type key struct{ session, toolCallID string }
	var keys []key
	for rs.Next() {
		var k key
		var doc string
		require.NoError(t, rs.Scan(&k.session, &doc))
		var m struct {
			ToolCallID string `json:"tool_call_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(doc), &m), doc)
		k.toolCallID = m.ToolCallID
		keys = append(keys, k)
	}
	require.NoError(t, rs.Err())
	rs.Close()
	for _, k := range keys {
		var n int
		require.NoError(t, db.QueryRow(db.Q(`SELECT COUNT(*) FROM task_session_subagents WHERE task_session_id = ? AND tool_call_id = ? AND source = 'backfill'`), k.session, k.toolCallID).Scan(&n))
		if n == 0 {
			missing++
		}
	}
	return len(keys), missing
}

// subagentRows renders every task_session_subagents row as one line, every
// timestamp as the instant it names.
func subagentRows(t *testing.T, db *dbtest.DB) []string {
	t.Helper()
	cols, err := declare.Columns(declare.Subagents)
	require.NoError(t, err)
	timestamps := map[string]bool{"observed_at": true, "settled_at": true, "updated_at": true}
	sel := make([]string, 0, len(cols))
	for _, c := range cols {
		v := "CAST(" + c + " AS TEXT)"
		if timestamps[c] {
			v = instant.ColumnExpr(db.Dialect, c)
			if db.Dialect == dialect.Postgres {
				v = "to_char(" + c + ", 'YYYY-MM-DD HH24:MI:SS.US')"
			}
		}
		sel = append(sel, "COALESCE("+v+", 'NULL')")
	}
	rs, err := db.Query(`SELECT ` + strings.Join(sel, " || '|' || ") + ` FROM task_session_subagents ORDER BY id`)
	require.NoError(t, err)
	defer rs.Close()
	var out []string
	for rs.Next() {
		var line sql.NullString
		require.NoError(t, rs.Scan(&line))
		out = append(out, line.String)
	}
	require.NoError(t, rs.Err())
	return out
}

func TestDifferential_AC19_SameHistorySameRowsSameHealth(t *testing.T) {
	if !dbtest.PostgresRequired() {
		if err := func() error {
			db, err := sql.Open("pgx", dbtest.PostgresDSN())
			if err != nil {
				return err
			}
			defer db.Close()
			return db.Ping()
		}(); err != nil {
			t.Skipf("PostgreSQL unreachable: %v", err)
		}
	}
	unreadable := []string{"last tuesday", "", "2026-13-45 99:99:99"}
	lite := runDifferential(t, dialect.SQLite, unreadable)
	pg := runDifferential(t, dialect.Postgres, nil)

	// The backfill: the same rows, the same count, the same skips.
	require.Greater(t, len(lite.rows), 253, "the generated population and the irregular documents")
	require.Equal(t, lite.rows, pg.rows, "backfilled rows")
	require.Equal(t, *lite.backfill.Rows, *pg.backfill.Rows)
	require.Contains(t, lite.backfill.Detail, fmt.Sprintf("%d qualifying messages skipped: created_at is not a time (first: irr-unreadable-0)", len(unreadable)))
	require.NotContains(t, pg.backfill.Detail, "skipped")
	for _, want := range []string{"irr-before-b|", "irr-before-kind-in|", "irr-before-big|", "irr-before-escaped-key|", "irr-before-escaped-kind|",
		"irr-before-nul-unread|", "irr-before-surrogate-unread|", "irr-before-nul-name|", "irr-before-nul-read|NULL|NULL|NULL|NULL|NULL|NULL|completed|completed|"} {
		found := false
		for _, r := range pg.rows {
			found = found || strings.Contains(r, "|"+want)
		}
		require.True(t, found, "row %s", want)
	}
	for _, r := range pg.rows {
		for _, not := range []string{"irr-before-a|", "irr-before-kind-out|", "irr-before-big-truncated|", "irr-before-trailing|", "irr-before-array|", "irr-before-no-task|", "irr-before-null|", "irr-before-nul-id"} {
			require.NotContains(t, r, "|"+not)
		}
	}

	// Every generated message given an escape is backfilled on both.
	require.Equal(t, lite.escaped, pg.escaped)
	require.Greater(t, pg.escaped, 30, "every seventh of the generated subagent messages")
	for _, s := range []diffStore{lite, pg} {
		require.Zero(t, s.escapedMissing, "%s: a message with an escape in an unread member has no row", s.db.Dialect)
	}

	// Health: the same numbers, none of them trivially zero.
	num := func(p *int64) int64 { require.NotNil(t, p); return *p }
	got := func(r *health.Report) []any {
		return []any{r.Verdict, num(r.Shortfall), num(r.Excess), num(r.Collisions), *r.LastObservedAt}
	}
	require.Equal(t, got(lite.report), got(pg.report))
	require.Equal(t, health.Shortfall, pg.report.Verdict)
	require.Positive(t, *pg.report.Excess)
	require.Positive(t, *pg.report.Collisions)
	// The irregular missed writes are among the shortfall on both: five
	// deleted keys after activation, besides the generated ones.
	require.Greater(t, *pg.report.Shortfall, int64(5))
	require.EqualValues(t, len(unreadable), num(lite.report.UnreadableCreatedAt))
	require.EqualValues(t, 0, num(pg.report.UnreadableCreatedAt))
}
