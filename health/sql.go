package health

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/jsonfield"
	"github.com/schemastate/schemastate/keys"
)

// Statements is the SQL of one health evaluation on one dialect. Every
// statement takes exactly one bind parameter — ?1 on SQLite, $1 on PostgreSQL —
// whose value is keys.NewBoundary(capture_since).Arg(), and returns one row
// with one column. A monitor can run them verbatim; Evaluate computes the
// same numbers inside one read transaction (AC-28b). On PostgreSQL a
// statement run verbatim cannot trap a failed jsonb cast, so these decide
// metadata validity in plain SQL, conservatively (postgresMsgCTE): a
// candidate document beyond its bounds reads as no document here, while
// Evaluate, which asks the parser itself, is exact.
type Statements struct {
	// Shortfall is the AC-28 SHORTFALL anti-join: distinct (session,
	// tool_call_id) keys of qualifying subagent messages at or after :since
	// with no subagent row at or after :since. This is the alarm (AC-29).
	Shortfall string
	// Excess is the AC-28 EXCESS anti-join: subagent keys at or after :since
	// with no subagent message at or after :since. Attributed, never an alarm.
	Excess string
	// Collisions is rows minus distinct (session, tool_call_id) keys at or
	// after :since: cross-execution reuse of one tool_call_id (AC-32).
	Collisions string
	// LastObservedAt is MAX(observed_at) over rows at or after :since, in the
	// normalized "YYYY-MM-DD HH:MM:SS.ffffff" UTC form (keys.FromColumn reads
	// it), or NULL when no row was observed since activation (AC-29).
	LastObservedAt string
}

// Queries returns the health statements for dialect d.
func Queries(d dialect.Dialect) Statements {
	q := sqlFor(d)
	since := func(col string) string { return keys.AtOrAfter(d, col, q.param) }
	expected, accounting, observed := q.sides(d)
	return Statements{
		// EXCEPT is set-based on both dialects: a cross-execution collision
		// contributes one key however many rows hold it, and two messages
		// describing one subagent (AC-21b) contribute one key. The derived
		// tables are aliased because PostgreSQL rejects them otherwise.
		Shortfall: q.msgCTE + "\nSELECT COUNT(*)\nFROM (\n  " + expected +
			"\n  EXCEPT\n  " + observed + "\n) AS shortfall",
		Excess: q.msgCTE + "\nSELECT COUNT(*)\nFROM (\n  " + observed + "\n  GROUP BY 1, 2" +
			"\n  EXCEPT\n  " + accounting + "\n) AS excess",
		Collisions: fmt.Sprintf(`SELECT COUNT(*) - COUNT(DISTINCT s.task_session_id || ':' || s.tool_call_id)
FROM task_session_subagents s
WHERE %s`, since("s.observed_at")),
		// AC-29: scoped to :since. Unscoped, backfilled or pre-activation rows
		// would report an instant that never established live-writer health.
		LastObservedAt: fmt.Sprintf(`SELECT %s
FROM task_session_subagents s
WHERE %s`, keys.MaxExpr(d, "s.observed_at"), since("s.observed_at")),
	}
}

// sides renders the three sets the anti-joins compare, as SELECTs of
// (task_session_id, tool_call_id) over the msg CTE and the subagent rows.
func (q dialectSQL) sides(d dialect.Dialect) (expected, accounting, observed string) {
	since := func(col string) string { return keys.AtOrAfter(d, col, q.param) }

	// The message side. The shortfall half carries exactly the identity
	// predicates AC-2 and AC-21a skip on (empty session id, task id or
	// tool_call_id), so a correctly skipped frame never reads as a dead writer.
	expected = fmt.Sprintf(`SELECT msg.task_session_id, %[1]s AS tool_call_id
  FROM msg
  WHERE %[2]s = 'subagent_task'
    AND %[3]s
    AND COALESCE(msg.task_session_id, '') <> ''
    AND COALESCE(msg.task_id, '') <> ''
    AND COALESCE(%[1]s, '') <> ''
  GROUP BY 1, 2`, q.toolCallID, q.kind, since("msg.created_at"))
	// The excess half subtracts the WIDEST message set: no identity filter.
	// A row whose message exists is accounted for even if that message's own
	// task_id column is empty for an unrelated reason (AC-28, revision 4).
	accounting = fmt.Sprintf(`SELECT msg.task_session_id, %[1]s
  FROM msg
  WHERE %[2]s = 'subagent_task'
    AND %[3]s`, q.toolCallID, q.kind, since("msg.created_at"))
	observed = fmt.Sprintf(`SELECT s.task_session_id, s.tool_call_id
  FROM task_session_subagents s
  WHERE %s`, since("s.observed_at"))
	return expected, accounting, observed
}

// evaluation is the one statement Evaluate runs: the shortfall, the excess,
// the collision count, the scoped MAX(observed_at) and the unreadable count,
// in that column order, with the bind parameter of Queries (and, on
// PostgreSQL, $2 and $3: see postgresEvalCTE). It reads task_session_messages
// ONCE: the subagent messages in the window are materialized (sub), each
// flagged with whether it carries the identities the shortfall side
// requires, and both anti-joins read that one set. They stay two directed
// EXCEPTs, each counted on its own (AC-28: never netted); the window's rows
// (obs) are materialized once for the other three numbers. Each number
// equals what the corresponding Queries statement returns over the same
// snapshot: the sets compared are the same predicates over the same msg
// rows.
//
// sub also holds the subagent messages whose created_at is not a time (only
// SQLite's untyped text can hold one): they cannot be placed before or after
// capture_since, so they are in neither anti-join, and the last column
// counts those the shortfall side would expect — a message the backfill
// could not derive a row from either (backfill.Result.UnreadableCreatedAt),
// reported instead of dropped unseen.
func evaluation(d dialect.Dialect) string {
	q := sqlFor(d)
	since := func(col string) string { return keys.AtOrAfter(d, col, q.param) }
	return q.evalCTE + fmt.Sprintf(`, sub AS MATERIALIZED (
  SELECT msg.task_session_id, %[1]s AS tool_call_id,
    CASE WHEN COALESCE(msg.task_session_id, '') <> ''
      AND COALESCE(msg.task_id, '') <> ''
      AND COALESCE(%[1]s, '') <> '' THEN 1 ELSE 0 END AS expected,
    CASE WHEN %[3]s THEN 1 ELSE 0 END AS in_window
  FROM msg
  WHERE %[2]s = 'subagent_task'
    AND (%[3]s OR %[6]s IS NULL)
), obs AS MATERIALIZED (
  SELECT s.task_session_id, s.tool_call_id, s.observed_at
  FROM task_session_subagents s
  WHERE %[4]s
)
SELECT
  (SELECT COUNT(*) FROM (
    SELECT task_session_id, tool_call_id FROM sub WHERE expected = 1 AND in_window = 1 GROUP BY 1, 2
    EXCEPT
    SELECT task_session_id, tool_call_id FROM obs
  ) AS shortfall),
  (SELECT COUNT(*) FROM (
    SELECT task_session_id, tool_call_id FROM obs GROUP BY 1, 2
    EXCEPT
    SELECT task_session_id, tool_call_id FROM sub WHERE in_window = 1
  ) AS excess),
  (SELECT COUNT(*) - COUNT(DISTINCT task_session_id || ':' || tool_call_id) FROM obs),
  (SELECT %[5]s FROM obs),
  (SELECT COUNT(*) FROM sub WHERE expected = 1 AND in_window = 0)`,
		q.toolCallID, q.kind, since("msg.created_at"), since("s.observed_at"), keys.MaxExpr(d, "observed_at"),
		keys.ColumnExpr(d, "msg.created_at"))
}

// counts is the one row of evaluation.
type counts struct {
	shortfall, excess, collisions, unreadable int64
	last                                      sql.NullString
}

func (c *counts) scan(row *sql.Row) error {
	return row.Scan(&c.shortfall, &c.excess, &c.collisions, &c.last, &c.unreadable)
}

// evaluate runs evaluation on tx with the boundary since and scans its row
// into c: one statement on SQLite; on PostgreSQL, see evaluatePostgres.
func evaluate(ctx context.Context, tx *sql.Tx, d dialect.Dialect, since string, c *counts) error {
	if d == dialect.Postgres {
		return evaluatePostgres(ctx, tx, since, c)
	}
	return c.scan(tx.QueryRowContext(ctx, evaluation(d), since))
}

// FloorQuery is one full scan of the qualifying-message predicate with the
// metadata normalization Evaluate applies: the least work any correct health
// check must do. The benchmark compares Evaluate against it. On PostgreSQL it
// casts every candidate, so it raises when one is malformed — a measuring
// stick for a store without such a document, not a check.
func FloorQuery(d dialect.Dialect) string {
	q := sqlFor(d)
	cte := q.evalCTE
	if d == dialect.Postgres {
		cte = postgresEvalCTEExcluding("'{}'", "'{}'")
	}
	return cte + fmt.Sprintf(`
SELECT COUNT(*)
FROM msg
WHERE %s = 'subagent_task'
  AND %s`, q.kind, keys.AtOrAfter(d, "msg.created_at", q.param))
}

// dialectSQL holds the only parts of the statements that differ by dialect.
type dialectSQL struct {
	param  string // the single bind parameter, repeated wherever :since appears
	msgCTE string // WITH … msg AS (task_session_id, task_id, created_at, meta), for Queries
	// evalCTE is msg as evaluation reads it: the same columns, holding the
	// subagent candidates in the window and those whose created_at is not a
	// time. On SQLite it is msgCTE; see postgresEvalCTE for PostgreSQL.
	evalCTE    string
	kind       string // metadata.normalized.kind as text
	toolCallID string // metadata.tool_call_id when it is a JSON string, else NULL
}

func sqlFor(d dialect.Dialect) dialectSQL {
	if d == dialect.Postgres {
		return dialectSQL{
			param:   "$1",
			msgCTE:  postgresMsgCTE(),
			evalCTE: postgresEvalCTE(),
			kind:    "msg.meta #>> '{normalized,kind}'",
			// A tool_call_id that is not a JSON string is missing, as the
			// backfill reads it (AC-21a): such a message is never expected.
			toolCallID: "(CASE WHEN jsonb_typeof(msg.meta -> 'tool_call_id') = 'string' THEN msg.meta ->> 'tool_call_id' END)",
		}
	}
	// Through jsonfield, as the backfill reads them: a member named twice
	// reads its last value, as on PostgreSQL, and a tool_call_id holding a
	// NUL or a lone surrogate (a \u0000 or unpaired \ud800 escape) is
	// missing, as PostgreSQL reads it and the backfill skips it.
	str := func(typ, val string) string { return fmt.Sprintf("CASE WHEN %s = 'text' THEN %s END", typ, val) }
	id := func(typ, val string) string {
		return fmt.Sprintf("CASE WHEN %s = 'text' AND %s THEN %s END", typ, jsonfield.SQLiteStorable(val), val)
	}
	return dialectSQL{
		param:      "?1",
		msgCTE:     sqliteMsgCTE,
		evalCTE:    sqliteMsgCTE,
		kind:       jsonfield.SQLite("msg.meta", []string{"normalized", "kind"}, str),
		toolCallID: jsonfield.SQLite("msg.meta", []string{"tool_call_id"}, id),
	}
}

// sqliteMsgCTE is the msg CTE (AC-23b's normalization, applied to the rows the
// anti-joins read): any metadata that is not a JSON object — NULL, ”, 'null',
// malformed text, an array, a scalar — becomes '{}', so no row can make
// json_extract raise. The nested CASE is deliberate: SQLite does not promise
// to short-circuit AND, and json_type raises on malformed input.
//
// Only messages that can be subagent messages are in it: a JSON document
// whose normalized.kind is "subagent_task" holds that text verbatim or spells
// one of its characters (a-z, _) as a \u00XX escape, so a plain text test
// leaves out, unparsed, every row that would read '{}' here and could never
// match the anti-joins' kind predicate — the counts are those of the full set.
//
// The unary + on task_session_id keeps SQLite from walking the messages table
// in session-index order to feed the EXCEPT (random reads, ~2.5x slower than
// one sequential scan on a 20k-message store); it changes no value.
const sqliteMsgCTE = `WITH msg AS (
  SELECT +m.task_session_id AS task_session_id, m.task_id, m.created_at,
    (CASE WHEN json_valid(m.metadata)
      THEN (CASE WHEN json_type(m.metadata) = 'object' THEN m.metadata ELSE '{}' END)
      ELSE '{}' END) AS meta
  FROM task_session_messages m
  WHERE instr(m.metadata, 'subagent_task') > 0
    OR (instr(m.metadata, '\u00') > 0 AND (m.metadata GLOB '*\u00[67]*' OR m.metadata GLOB '*\u005[fF]*'))
)`

// postgresMsgCTE is the msg CTE of the verbatim statements (Queries) on
// PostgreSQL; Evaluate reads postgresEvalCTE, which is exact.
// PostgreSQL 15 has neither IS JSON nor pg_input_is_valid, and metadata::jsonb
// raises on any invalid text, aborting the whole statement. Creating a
// function with an exception handler would be a schema change in the host's
// database and would not run on a read-only replica or role, and a statement
// run verbatim cannot trap the cast. So the check is plain SQL that decides,
// without casting, whether the cast would succeed — conservatively, within
// the bounds below:
//
//  1. Only rows that can possibly be subagent messages are examined: a JSON
//     document whose normalized.kind is "subagent_task" contains that literal,
//     or spells one of its characters (a-z, _) as a \u00XX escape. Every other
//     row is left out of msg without further work (as on SQLite: it could
//     never match the kind predicate), and so are rows before :since.
//  2. Strings, aligned: every string is found by a permissive pattern that
//     cannot lose its place (a quote, then anything up to the first unescaped
//     quote) and wrapped in < >; only wrapped strings whose body is valid for
//     jsonb — no raw control character, only the escapes jsonb accepts (no
//     \u0000; surrogates only as a high+low pair) — collapse to "". An invalid
//     string keeps its < > and can never reduce.
//  3. Numbers and literals become 0 and JSON whitespace is removed. No run
//     of digits may reach 6000: then no number has more digits than
//     numeric_in accepts with a four-digit exponent (such a document is
//     judged invalid, never cast). What is left of the document must be
//     under 100000 characters — a valid subagent document with thousands of
//     strings still qualifies, as it does for the backfill.
//  4. Innermost {"":v,…} and [v,…] reduce to 0 until nothing changes, at
//     most 1000 levels deep (SQLite's JSON depth limit; far deeper nesting
//     exhausts the jsonb parser's stack). With the size limit this bounds
//     the work one pathological document can cost. The document is a valid
//     JSON object exactly when it started with { and reduced to the single
//     token 0.
//
// A document holding a \u0000 or a lone-surrogate escape, which jsonb
// refuses, is first read with each string holding one as null
// (jsonfield.PostgresReadable), as the backfill reads it: its other members
// count. Only rows that pass are cast and make up msg; a candidate that fails
// reads '{}'. candidate is MATERIALIZED so the planner cannot push the regular
// expressions below the cheap strpos prefilter and run them over every
// message, and it carries the columns msg needs, so the messages table is
// scanned once.
const (
	pgMayNameKind  = `\\u00(?:[67][0-9a-fA-F]|5[fF])`
	pgAnyString    = `"[^"\\]*(?:\\.[^"\\]*)*"`
	pgHex4         = `(?:[1-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}|0(?:[1-9a-fA-F][0-9a-fA-F]{2}|0(?:[1-9a-fA-F][0-9a-fA-F]|0[1-9a-fA-F]))|[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})`
	pgValidWrapped = `<"[^"\\\x01-\x1f]*(?:\\(?:["\\/bfnrt]|u` + pgHex4 + `)[^"\\\x01-\x1f]*)*">`
	pgScalar       = `-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,4})?|true|false|null`
	pgInnermost    = `\{(?:""\:(?:""|0)(?:,""\:(?:""|0))*)?\}|\[(?:(?:""|0)(?:,(?:""|0))*)?\]`
)

func postgresMsgCTE() string {
	return fmt.Sprintf(`WITH RECURSIVE readable AS MATERIALIZED (
  SELECT m.id, m.task_session_id, m.task_id, m.created_at,
    (CASE WHEN %[7]s THEN %[8]s ELSE m.metadata END) AS metadata
  FROM task_session_messages m
  WHERE (strpos(m.metadata, 'subagent_task') > 0
      OR (strpos(m.metadata, '\u') > 0 AND m.metadata ~ '%[5]s'))
    AND %[6]s
), candidate AS MATERIALIZED (
  SELECT r.id, r.task_session_id, r.task_id, r.created_at, r.metadata,
    regexp_replace(regexp_replace(r.metadata,
      '%[1]s', '<\&>', 'g'),
      '%[2]s', '""', 'g') AS strings
  FROM readable r
), reduced (id, tok, depth) AS (
  SELECT id, regexp_replace(regexp_replace(strings, '%[3]s', '0', 'g'), '[ \t\n\r]+', '', 'g'), 0
  FROM candidate
  WHERE length(strings) < 100000 AND left(ltrim(strings, E' \t\n\r'), 1) = '{'
    AND (strings !~ '[0-9]{250}' OR NOT EXISTS (
      SELECT 1 FROM regexp_matches(strings, '[0-9]{250,}', 'g') AS run (digits) WHERE length(run.digits[1]) >= 6000))
  UNION ALL
  SELECT id, regexp_replace(tok, '%[4]s', '0', 'g'), depth + 1
  FROM reduced
  WHERE tok ~ '%[4]s' AND depth < 1000
), object_metadata AS (
  SELECT id FROM reduced WHERE tok = '0'
), msg AS (
  SELECT c.task_session_id, c.task_id, c.created_at,
    (CASE WHEN c.id IN (SELECT id FROM object_metadata) THEN c.metadata::jsonb ELSE '{}'::jsonb END) AS meta
  FROM candidate c
)`, pgAnyString, pgValidWrapped, pgScalar, pgInnermost, pgMayNameKind, keys.AtOrAfter(dialect.Postgres, "m.created_at", "$1"),
		jsonfield.PostgresMayHoldUnstorable("m.metadata"), jsonfield.PostgresReadable("m.metadata"))
}

// pgCandidates selects the rows whose metadata can name subagent_task (the
// same text test as postgresMsgCTE's, its \u00 test first) and whose
// created_at is at or after $1 or not a time at all. The two windows are
// disjoint and each is a plain range or NULL test on created_at, so the
// planner can walk the created_at index over the window instead of reading
// every message: one OR of the two sent it to a sequential scan of the
// whole table.
func pgCandidates(cols string) string {
	one := func(window string) string {
		return fmt.Sprintf(`SELECT %s
  FROM task_session_messages m
  WHERE (strpos(m.metadata::text, 'subagent_task') > 0
      OR (strpos(m.metadata::text, '\u00') > 0 AND m.metadata::text ~ '%s'))
    AND %s`, cols, pgMayNameKind, window)
	}
	return one(keys.AtOrAfter(dialect.Postgres, "m.created_at", "$1")) + "\nUNION ALL\n" + one("m.created_at IS NULL")
}

// postgresEvalCTE is the msg CTE of Evaluate on PostgreSQL, exact for a
// document of any size, with no function and no write, so it runs on a
// read-only replica or role. PostgreSQL's own parser decides: every
// candidate's metadata is cast to jsonb, except the ids listed in $2 (a
// text[]), which read as '{}', and those listed in $3, read with each string
// holding a \u0000 or lone-surrogate escape as null
// (jsonfield.PostgresReadable) — the documents jsonb refuses only for such an
// escape, read as the backfill reads them. Evaluate runs it first with both
// empty: when no candidate is malformed — the common case — that one
// statement is the whole evaluation. When the cast raises, Evaluate rolls
// back to a savepoint, asks the parser about the candidates one subset at a
// time (postgresUnparseable, postgresReadable), and runs it again listing
// them, in the same REPEATABLE READ snapshot (AC-28b). A document that casts
// to anything but an object reads '{}', as on SQLite.
func postgresEvalCTE() string { return postgresEvalCTEExcluding("$2", "$3") }

// postgresEvalCTEExcluding is postgresEvalCTE with the excluded ids read
// from excluded and the ids read through jsonfield.PostgresReadable from
// readable, text[] expressions.
func postgresEvalCTEExcluding(excluded, readable string) string {
	return `WITH candidate AS MATERIALIZED (
  ` + pgCandidates("m.id, m.task_session_id, m.task_id, m.created_at, m.metadata::text AS doc") + `
), parsed AS MATERIALIZED (
  SELECT c.task_session_id, c.task_id, c.created_at,
    (CASE WHEN c.id IN (SELECT unnest(CAST(` + excluded + ` AS text[]))) THEN NULL
      WHEN c.id IN (SELECT unnest(CAST(` + readable + ` AS text[]))) THEN CAST(` + jsonfield.PostgresReadable("c.doc") + ` AS jsonb)
      ELSE CAST(c.doc AS jsonb) END) AS j
  FROM candidate c
), msg AS (
  SELECT task_session_id, task_id, created_at,
    (CASE WHEN jsonb_typeof(j) = 'object' THEN j ELSE '{}'::jsonb END) AS meta
  FROM parsed
)`
}
