package health

import (
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/jsonfield"
)

func postgresSQL() dialectSQL {
	return dialectSQL{
		param:    "$1",
		msgCTE:   postgresMsgCTE(),
		evalCTE:  postgresEvalKindCTE(),
		floorCTE: postgresEvalCTEExcluding("'{}'", "'{}'", ""),
		kind:     "msg.meta #>> '{normalized,kind}'",
		// A tool_call_id that is not a JSON string is missing, as the
		// backfill reads it (AC-21a): such a message is never expected.
		toolCallID: "(CASE WHEN jsonb_typeof(msg.meta -> 'tool_call_id') = 'string' THEN msg.meta ->> 'tool_call_id' END)",
		evaluate:   evaluatePostgres,
	}
}

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
)`, pgAnyString, pgValidWrapped, pgScalar, pgInnermost, pgMayNameKind, instant.AtOrAfter(dialect.Postgres, "m.created_at", "$1"),
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
	return pgCandidatesEach(func(string) string { return cols })
}

// pgCandidatesEach is pgCandidates with each window's select list rendered
// by cols from that window's condition.
func pgCandidatesEach(cols func(window string) string) string {
	one := func(window string) string {
		return fmt.Sprintf(`SELECT %s
  FROM task_session_messages m
  WHERE %s
    AND %s`, cols(window), pgMayBeCandidate, window)
	}
	return one(instant.AtOrAfter(dialect.Postgres, "m.created_at", "$1")) + "\nUNION ALL\n" + one("m.created_at IS NULL")
}

// pgMayBeCandidate is the text test a subagent message's metadata passes.
const pgMayBeCandidate = `(strpos(m.metadata::text, 'subagent_task') > 0
      OR (strpos(m.metadata::text, '\u00') > 0 AND m.metadata::text ~ '` + pgMayNameKind + `'))`

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
// to anything but an object reads '{}', as on SQLite. It holds every
// candidate; Evaluate reads postgresEvalKindCTE, the same rows of the kind
// its statement counts.
func postgresEvalCTE() string { return postgresEvalCTEExcluding("$2", "$3", "") }

// postgresEvalKindCTE is postgresEvalCTE holding only the candidates whose
// normalized.kind is subagent_task: the only rows the evaluation reads.
// Filtered in the scan, next to the cast, the planner can hand both to
// parallel workers (the window's few subagent messages are all that the
// workers pass back), as a hand-written statement's scan is.
func postgresEvalKindCTE() string {
	return postgresEvalCTEExcluding("$2", "$3", "subagent_task")
}

// postgresEvalCTEExcluding is postgresEvalCTE with the excluded ids read
// from excluded and the ids read through jsonfield.PostgresReadable from
// readable, text[] expressions; with kind set, it holds only the candidates
// whose normalized.kind is kind.
//
// The cast runs in the scan, guarded: a CASE casts only a row that passed
// the text test and its window (the CASE repeats them), whatever order the
// planner evaluates the scan's conditions in, so no row outside the
// candidates is ever cast and no listed id is cast as it stands.
func postgresEvalCTEExcluding(excluded, readable, kind string) string {
	parse := func(window string) string {
		return `m.task_session_id, m.task_id, m.created_at,
    (CASE WHEN ` + pgMayBeCandidate + ` AND ` + window + ` THEN
      CASE WHEN m.id = ANY(CAST(` + excluded + ` AS text[])) THEN NULL
        WHEN m.id = ANY(CAST(` + readable + ` AS text[])) THEN CAST(` + jsonfield.PostgresReadable("m.metadata::text") + ` AS jsonb)
        ELSE CAST(m.metadata::text AS jsonb) END END) AS j`
	}
	filter := "TRUE"
	if kind != "" {
		filter = "p.j #>> '{normalized,kind}' = " + pgLiteral(kind)
	}
	return `WITH candidate AS MATERIALIZED (
  SELECT p.task_session_id, p.task_id, p.created_at, p.j FROM (
  ` + pgCandidatesEach(parse) + `
  ) p WHERE ` + filter + `
), msg AS (
  SELECT task_session_id, task_id, created_at,
    (CASE WHEN jsonb_typeof(j) = 'object' THEN j ELSE '{}'::jsonb END) AS meta
  FROM candidate
)`
}

// pgLiteral is s as an SQL string literal.
func pgLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
