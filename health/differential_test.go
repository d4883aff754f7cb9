package health_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/health"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/internal/tool/gen"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

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
