package health

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/jsonfield"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

var since = time.Date(2026, 7, 30, 12, 0, 0, 500000000, time.UTC)

func setup(t *testing.T, db *dbtest.DB) context.Context {
	t.Helper()
	ctx := context.Background()
	db.Host(t)
	_, err := reconcile.Reconcile(ctx, db.DB, reconcile.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	for _, q := range []string{
		`DELETE FROM kandev_meta`,
		`INSERT INTO kandev_meta (key, value) VALUES ('` + keys.CaptureSince + `', '` + instant.Format(since) + `')`,
		`INSERT INTO task_sessions (id, task_id) VALUES ('s1', 'task-1')`,
	} {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	return ctx
}

func insertMessage(t *testing.T, ctx context.Context, db *dbtest.DB, id, taskID, metadata string, at time.Time) {
	t.Helper()
	ts := instant.RowTime(db.Dialect, at)
	_, err := db.ExecContext(ctx, db.Q(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
		VALUES (?, 's1', ?, 't', '…', ?, ?, ?)`), id, taskID, metadata, ts, ts)
	require.NoError(t, err)
}

func insertRow(t *testing.T, ctx context.Context, db *dbtest.DB, id, execution, toolCallID string, at time.Time) {
	t.Helper()
	ts := instant.RowTime(db.Dialect, at)
	_, err := db.ExecContext(ctx, db.Q(`INSERT INTO task_session_subagents (id, task_session_id, task_id, agent_execution_id, tool_call_id, observed_at, updated_at)
		VALUES (?, 's1', 'task-1', ?, ?, ?, ?)`), id, execution, toolCallID, ts, ts)
	require.NoError(t, err)
}

func meta(toolCallID string) string {
	return `{"tool_call_id":"` + toolCallID + `","status":"completed","normalized":{"kind":"subagent_task","subagent_task":{"status":"completed"}}}`
}

// AC-28b: every number of one evaluation comes from one snapshot, the one
// capture_since was read in. Writes committed by another connection after the
// key was read — a missed message captured late, a new missed message, an
// orphan row, a cross-execution reuse — are invisible to that evaluation and
// visible to the next one. Under PostgreSQL's default READ COMMITTED, or on
// SQLite outside a read transaction, the counting statement would see them.
//
// With a malformed candidate document in the window, PostgreSQL's evaluation
// takes its second path (the cast raises, the refused documents are isolated
// in savepoints, the statement runs again): still one snapshot.
func TestEvaluate_AC28b_OneSnapshotPerEvaluation(t *testing.T) {
	for _, malformed := range []bool{false, true} {
		t.Run(fmt.Sprintf("malformed=%v", malformed), func(t *testing.T) { oneSnapshot(t, malformed) })
	}
}

func oneSnapshot(t *testing.T, malformed bool) {
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := setup(t, db)
		if malformed {
			insertMessage(t, ctx, db, "m0", "task-1", `{"tool_call_id":"tc-bad","normalized":{"kind":"subagent_task"`, since.Add(time.Second))
		}
		insertMessage(t, ctx, db, "m1", "task-1", meta("tc-a"), since.Add(time.Second))
		insertRow(t, ctx, db, "r1", "exec-1", "tc-a", since.Add(time.Second))
		insertMessage(t, ctx, db, "m2", "task-1", meta("tc-b"), since.Add(2*time.Second))

		var hooked []string
		concurrent := func(statement string) {
			hooked = append(hooked, statement)
			if statement != "capture_since" {
				return
			}
			insertRow(t, ctx, db, "r2", "exec-1", "tc-b", since.Add(3*time.Second))
			insertRow(t, ctx, db, "r3", "exec-1", "tc-orphan", since.Add(4*time.Second))
			insertRow(t, ctx, db, "r4", "exec-2", "tc-a", since.Add(5*time.Second))
			insertMessage(t, ctx, db, "m3", "task-1", meta("tc-c"), since.Add(6*time.Second))
		}
		r, err := Evaluate(ctx, db.DB, func(o *options) { o.between = concurrent })
		require.NoError(t, err)
		require.Equal(t, []string{"capture_since", "counts"}, hooked)
		require.Equal(t, Shortfall, r.Verdict)
		require.Equal(t, int64(1), *r.Shortfall)
		require.Equal(t, int64(0), *r.Excess, "the orphan row committed mid-evaluation")
		require.Equal(t, int64(0), *r.Collisions, "the second tc-a row committed mid-evaluation")
		require.Equal(t, instant.Format(since.Add(time.Second)), *r.LastObservedAt)

		r, err = Evaluate(ctx, db.DB)
		require.NoError(t, err)
		require.Equal(t, []int64{1, 1, 1}, []int64{*r.Shortfall, *r.Excess, *r.Collisions})
		require.Equal(t, instant.Format(since.Add(5*time.Second)), *r.LastObservedAt)
	})
}

// corpusDoc is one document of the normalization corpus.
type corpusDoc struct {
	doc string
	// conservative marks a document PostgreSQL accepts that the plain-SQL
	// check of Queries deliberately rejects (too long to bound numeric_in's
	// digit limits).
	conservative bool
}

// normalizationCorpus is a fixed corpus of edge cases plus mutations of a
// real metadata document.
func normalizationCorpus() []corpusDoc {
	base := `{"tool_call_id":"toolu_01","status":"completed","normalized":{"kind":"subagent_task",` +
		`"subagent_task":{"status":"completed","model":"m\u00e9 \"q\"","total_tokens":275717,"x":[1,-2.5e3,0.25,true,false,null,{}],"d":"\ud83d\ude00\n"}}}`
	deep := `{"tool_call_id":"deep","normalized":{"kind":"subagent_task"},"n":` + strings.Repeat("[", 150) + strings.Repeat("]", 150) + `}`
	big := `{"tool_call_id":"big","normalized":{"kind":"subagent_task"},"n":0.` + strings.Repeat("1", 5900) + `e-9999,"m":1` + strings.Repeat("0", 40) + `e9999}`
	huge := `{"tool_call_id":"huge","normalized":{"kind":"subagent_task"},"n":1` + strings.Repeat("0", 7000) + `}`
	corpus := []corpusDoc{
		{doc: base}, {doc: deep}, {doc: big}, {doc: huge, conservative: true},
		{doc: ""}, {doc: "null"}, {doc: "{bad"}, {doc: "[1]"}, {doc: `"subagent_task"`}, {doc: "  {}  "},
		{doc: `{"normalized":{"kind":"subagent_task"}`},
		{doc: `{"a":"\u0000","k":"subagent_task"}`}, {doc: `{"a":"\ude00","k":"subagent_task"}`},
		{doc: `{"a":"\ud83d","k":"subagent_task"}`}, {doc: `{"a":"\ud83d\ude00","k":"subagent_task"}`},
		{doc: `{"a":01,"k":"subagent_task"}`}, {doc: `{"a":fal"y"e,"k":"subagent_task"}`},
		{doc: "{\"a\":\"x\ny\",\"k\":\"subagent_task\"}"}, {doc: "{\"a\":\"x\x7fy\",\"k\":\"subagent_task\"}"},
		{doc: `{"a":1e-9999,"k":"subagent_task"}`}, {doc: `{"a":1e99999,"k":"subagent_task"}`, conservative: true},
		{doc: `{"a":1,,"k":"subagent_task"}`}, {doc: `{"k":"subagent_task"} {}`}, {doc: `{"k":"subagent_task",}`},
		{doc: `{"k":"subagent\u005ftask"}`}, {doc: `{"k":"\x"}`}, {doc: "{\"k\":\"subagent_task\"}\f"},
		{doc: `{"\u005f":{"k":[[[[{"z":"}"}]]]]},"kind":"subagent_task"}`},
		// A raw tab, newline or CR inside a string, and bad escapes, must not
		// let string matching lose its place and reread them as whitespace.
		{doc: "{\"k\":\"subagent_task\",\"\":\"\n\"}"}, {doc: "{\"k\":\"subagent_task\",\"a\":[\"\t\"]}"},
		{doc: "{\"k\":\"subagent_task\",\"a\":[\"\r\",\"\r\"]}"}, {doc: `{"k":"subagent_task","a":"\q"}`},
		{doc: `{"k":"subagent_task","a":["\\ud83d\ude00"]}`}, {doc: `{"k":"subagent_task","a":"\\\ude00"}`},
		{doc: `{"k":"subagent_task","a":"\\"}`}, {doc: `{"k":"subagent_task","a":"\\\""}`},
		{doc: `{"k":"subagent_task","a":"\\""}`}, {doc: `{"k":"subagent_task","a":"<\"">"}`},
		{doc: `{"k":"subagent_task","a":"\u0041\u00e9\u2028\uFFFF\u0001"}`}, {doc: `{"k":"subagent_task","a":"\uD7FF\uE000"}`},
		{doc: `{"k":"\u0073ubagent_task"}`}, {doc: `{"k":"subagent\u005Ftask"}`}, {doc: `{"k":"\u003c"}`},
	}
	rng := rand.New(rand.NewSource(28))
	alphabet := []rune(`{}[]":,\u0123456789abcdefE.-+tnl ` + "\t\n\x01é")
	for i := 0; i < 400; i++ {
		r := []rune(base)
		for m := 0; m < 1+rng.Intn(3); m++ {
			p := rng.Intn(len(r))
			switch rng.Intn(3) {
			case 0:
				r = append(r[:p], r[p+1:]...)
			case 1:
				r = append(r[:p], append([]rune{alphabet[rng.Intn(len(alphabet))]}, r[p:]...)...)
			default:
				r[p] = alphabet[rng.Intn(len(alphabet))]
			}
		}
		corpus = append(corpus, corpusDoc{doc: string(r)})
	}

	return corpus
}

// The msg CTE's normalization against each dialect's own JSON parser: for
// every document — a fixed corpus of edge cases plus mutations of a real
// metadata document — the statements never raise, and meta is the document
// exactly when it is a JSON object that parser accepts and that could name
// subagent_task; otherwise '{}', or the row is left out of msg (it could never
// match the kind predicate, so the anti-joins read it as '{}').
func TestMsgCTE_MetadataNormalizationMatchesParser(t *testing.T) {
	corpus := normalizationCorpus()
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := setup(t, db)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		ts := instant.RowTime(db.Dialect, since)
		for i, c := range corpus {
			_, err := tx.ExecContext(ctx, db.Q(`INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
				VALUES (?, 's1', ?, 't', '…', ?, ?, ?)`), fmt.Sprintf("m%03d", i), fmt.Sprintf("d%03d", i), c.doc, ts, ts)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit())

		q := sqlFor(db.Dialect)
		metaText := "msg.meta"
		if db.Dialect == dialect.Postgres {
			metaText = "msg.meta::text"
		}
		b, err := instant.NewBoundary(instant.Format(since))
		require.NoError(t, err)
		got := metaByTask(t, db.DB, q.msgCTE+"\nSELECT msg.task_id, "+metaText+" FROM msg WHERE "+instant.AtOrAfter(db.Dialect, "msg.created_at", q.param), b.Arg())
		require.Less(t, len(got), len(corpus), "the text test must leave rows out")

		accepted := requireReadAsParsed(t, ctx, db, corpus, got, "msg CTE gave", db.Dialect == dialect.Postgres)
		require.Greater(t, accepted, 20, "the corpus must exercise the accepting branch")
		require.Less(t, accepted, len(corpus)-100, "the corpus must exercise the rejecting branch")

		for name, st := range map[string]string{"shortfall": Queries(db.Dialect).Shortfall, "excess": Queries(db.Dialect).Excess} {
			var n int64
			require.NoError(t, db.QueryRowContext(ctx, st, b.Arg()).Scan(&n), name)
		}
	})
}

// mayNameKind is the escape a document must contain to spell subagent_task
// without the literal: one of its characters (a-z, _) as \u00XX.
var mayNameKind = regexp.MustCompile(`\\u00(?:[67][0-9a-fA-F]|5[fF])`)

// parseObject asks the dialect's own parser whether doc is a JSON object,
// returning it in the form the msg CTE yields.
func parseObject(t *testing.T, ctx context.Context, db *dbtest.DB, doc string) (string, bool) {
	t.Helper()
	var typ, text string
	var err error
	if db.Dialect == dialect.Postgres {
		err = db.QueryRowContext(ctx, `SELECT jsonb_typeof(CAST(CAST($1 AS text) AS jsonb)), CAST(CAST($1 AS text) AS jsonb)::text`, doc).Scan(&typ, &text)
		if err != nil {
			// Refused only for a \u0000 or lone-surrogate escape: read with
			// each string holding one as null, as the backfill reads it.
			readable := jsonfield.PostgresReadable("CAST($1 AS text)")
			err = db.QueryRowContext(ctx, `SELECT jsonb_typeof(CAST(`+readable+` AS jsonb)), CAST(`+readable+` AS jsonb)::text FROM (SELECT 1) AS one WHERE `+
				jsonfield.PostgresMayHoldUnstorable("CAST($1 AS text)"), doc).Scan(&typ, &text)
		}
	} else {
		var valid bool
		require.NoError(t, db.QueryRowContext(ctx, `SELECT json_valid(?)`, doc).Scan(&valid))
		if !valid {
			return "", false
		}
		err = db.QueryRowContext(ctx, `SELECT json_type(?), ?`, doc, doc).Scan(&typ, &text)
	}
	if err != nil {
		return "", false
	}
	return text, typ == "object"
}

// AC-28 on PostgreSQL: Evaluate's msg rows are exactly what the jsonb parser
// makes of each candidate — the document when it is an object, else '{}' —
// for every document of the corpus, with no conservative exception: the
// documents postgresUnparseable isolates are exactly those the parser
// refuses.
func TestEvalCTE_PostgresDecidesExactlyAsTheParser(t *testing.T) {
	corpus := normalizationCorpus()
	corpus = append(corpus, corpusDoc{doc: `{"tool_call_id":"wide","normalized":{"kind":"subagent_task"},"n":[` +
		strings.Repeat("123456,", 40000) + `0]}`})
	db := dbtest.Open(t, dialect.Postgres)
	ctx := setup(t, db)
	ts := instant.RowTime(db.Dialect, since)
	for i, c := range corpus {
		_, err := db.ExecContext(ctx, `INSERT INTO task_session_messages (id, task_session_id, task_id, turn_id, content, metadata, created_at, updated_at)
			VALUES ($1, 's1', $2, 't', '…', $3, $4, $4)`, fmt.Sprintf("m%03d", i), fmt.Sprintf("d%03d", i), c.doc, ts)
		require.NoError(t, err)
	}
	b, err := instant.NewBoundary(instant.Format(since))
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // read-only

	ids := dbtest.StringsFrom(t, tx, pgCandidates("m.id"), b.Arg())
	bad, err := postgresUnparseable(ctx, tx, ids)
	require.NoError(t, err)
	require.NotEmpty(t, bad)

	excluded, readable, err := postgresReadable(ctx, tx, bad)
	require.NoError(t, err)
	require.NotEmpty(t, readable, "the corpus holds documents refused only for an escape")
	got := metaByTask(t, tx, postgresEvalCTE()+`
SELECT c.task_id, m.meta::text FROM msg m JOIN candidate c ON c.task_session_id = m.task_session_id AND c.task_id = m.task_id`, b.Arg(), excluded, readable)
	require.NoError(t, tx.Commit())

	accepted := requireReadAsParsed(t, ctx, db, corpus, got, "evaluation read", false)
	require.Greater(t, accepted, 20)
	require.Less(t, accepted, len(corpus)-100)
}

// metaByTask runs q on qr and reads its (task id, meta) rows into a map by
// task id; neither column may be NULL.
func metaByTask(t *testing.T, qr dbtest.Queryer, q string, args ...any) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, r := range dbtest.TextRows(t, qr, q, args...) {
		require.True(t, r[0].Valid && r[1].Valid, "a NULL task id or meta: %v", r)
		got[r[0].String] = r[1].String
	}
	return got
}

// requireReadAsParsed checks what a statement read as each corpus document's
// meta (got, by task id d000, d001, …; a document left out reads as '{}'):
// the document exactly when the dialect's own parser accepts it as a JSON
// object that could name subagent_task, '{}' otherwise — and '{}' too for a
// document marked conservative where conservative holds. It returns how many
// documents were accepted.
func requireReadAsParsed(t *testing.T, ctx context.Context, db *dbtest.DB, corpus []corpusDoc, got map[string]string, what string, conservative bool) (accepted int) {
	t.Helper()
	for i, c := range corpus {
		want := "{}"
		if parsed, ok := parseObject(t, ctx, db, c.doc); ok && !(c.conservative && conservative) &&
			(strings.Contains(c.doc, "subagent_task") || mayNameKind.MatchString(c.doc)) {
			want = parsed
			accepted++
		}
		g, in := got[fmt.Sprintf("d%03d", i)]
		if !in {
			g = "{}"
		}
		if g != want {
			t.Fatalf("document %d %.200q: %s %.200q, want %.200q", i, c.doc, what, g, want)
		}
	}
	return accepted
}

// AC-19, AC-28 (issue 22 §3): health reads a document jsonb refuses only for
// a \u0000 or a lone-surrogate escape as the backfill does, member by member,
// on both dialects and by both forms (Evaluate and the verbatim Queries): an
// escape in a member health does not read costs nothing, so the message is
// expected and its missing row is a shortfall; one inside tool_call_id leaves
// the message without the identity the backfill and the live writer require,
// so it is never expected; one inside a member name or in a description
// changes nothing. A row for one of them is accounted for, not excess.
func TestHealth_AC28_UnstorableEscapeCostsOnlyItsMember(t *testing.T) {
	docs := []string{
		`{"tool_call_id":"tc-clean","normalized":{"kind":"subagent_task"}}`,
		`{"tool_call_id":"tc-unread","raw_output":"a\u0000b","normalized":{"kind":"subagent_task"}}`,
		`{"tool_call_id":"tc-desc","normalized":{"kind":"subagent_task","subagent_task":{"description":"\ud800"}}}`,
		`{"k\udfff":1,"tool_call_id":"tc-key","normalized":{"kind":"subagent_task"}}`,
		`{"tool_call_id":"tc-row","raw_output":"\u0000","normalized":{"kind":"subagent_task"}}`,
		`{"tool_call_id":"tc-id\u0000","normalized":{"kind":"subagent_task"}}`,
		`{"tool_call_id":"tc-id-low\\\udc00","normalized":{"kind":"subagent_task"}}`,
	}
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := setup(t, db)
		for i, d := range docs {
			insertMessage(t, ctx, db, fmt.Sprintf("m%d", i), "task-1", d, since.Add(time.Duration(i+1)*time.Second))
		}
		insertRow(t, ctx, db, "r-row", "unknown", "tc-row", since.Add(time.Minute))
		rep, err := Evaluate(ctx, db.DB)
		require.NoError(t, err)
		require.EqualValues(t, 4, *rep.Shortfall, "tc-clean, tc-unread, tc-desc, tc-key")
		require.EqualValues(t, 0, *rep.Excess, "tc-row's message is read")

		b, err := instant.NewBoundary(instant.Format(since))
		require.NoError(t, err)
		for name, want := range map[string]int64{"shortfall": 4, "excess": 0} {
			st := map[string]string{"shortfall": Queries(db.Dialect).Shortfall, "excess": Queries(db.Dialect).Excess}[name]
			var n int64
			require.NoError(t, db.QueryRowContext(ctx, st, b.Arg()).Scan(&n), name)
			require.Equal(t, want, n, "verbatim %s", name)
		}
	})
}
