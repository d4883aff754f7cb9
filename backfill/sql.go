package backfill

import (
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/internal/perdialect"
	"github.com/schemastate/schemastate/toolstatus"
)

// The dialect differences of the backfill live in sql_<dialect>.go, and only
// there: how the message metadata is made safe to read (AC-23b), how a JSON
// field of a given type is extracted, and how a stored timestamp is compared
// and re-written.
// Everything else — the predicate, the column sources, the value rules — is
// one text shared by both dialects (see source).

// statements are the SQL texts one Run executes, in order.
type statements struct {
	prepare []string // before the scan: drop a leftover winners table (always first); PostgreSQL's metadata guard
	// winners is the one full scan of task_session_messages: CREATE TABLE
	// <temp table> AS the per-key winners, every target column derived.
	winners string
	// fast, when set, is winners with each candidate's metadata cast
	// plainly instead of through the guard: the same rows whenever no
	// candidate's metadata is malformed, and an error otherwise, after
	// which Run rolls it back and runs prepare and winners (PostgreSQL).
	fast string
	// max is one row: the newest winner's created_at, normalized; the number
	// of qualifying messages whose created_at is not a time; the least id
	// among them; the number of candidates whose metadata was too long to
	// parse; the least id among those.
	max     string
	insert  string   // INSERT … SELECT every winner … ON CONFLICT DO NOTHING
	cleanup []string // after the key writes
}

// winnersTable is the private table the scan materializes: in SQLite's temp
// database, or PostgreSQL's pg_temp schema. Either is visible only to this
// connection, created inside the caller's transaction (so it rolls back with
// it) and dropped after the key writes; nothing is added to the host's schema.
const winnersTable = "schemastate_backfill_winners"

// jsonPath is a path into the metadata document, e.g. {"normalized", "kind"}.
type jsonPath []string

// fragments are the dialect-specific pieces the shared text is built from.
type fragments struct {
	// candidate is a plain text test on message row m's raw metadata, run on
	// every message before any JSON function: false only for a document that
	// cannot qualify. A document whose normalized.kind parses to
	// 'subagent_task' holds that text verbatim or spells one of its
	// characters (a-z, _) as a \u00XX escape — no other JSON escape yields a
	// letter — so every other row is skipped without being parsed. Both
	// dialects' parsers accept only RFC 8259 escapes here, so this holds
	// whatever else the document contains.
	candidate string
	// meta renders the normalized metadata document of message row m: the
	// document when it is a JSON object, else an empty object. NULL, '',
	// 'null', malformed text and non-object JSON ([1], "x", 5) all become {}
	// and so simply do not qualify (AC-23b).
	meta string
	// doc renders what the msg CTE keeps of message row m's metadata as
	// written, for the fragments that read it (PostgreSQL's integer), or
	// NULL where none does: kept, it is carried through every stage.
	doc string
	// empty is the empty object meta renders, as the dialect's JSON value.
	empty string
	// size renders the length in bytes of message row m's raw metadata.
	size string
	// maxMeta is the longest metadata document, in bytes, that is parsed
	// (Run's WithMaxMetadata).
	maxMeta int64
	// stages, when set, add columns that text, integer and isTrue may read:
	// each is a select list suffix (", expr AS name, …") over the msg CTE's
	// columns and the earlier stages', materialized in turn (so each
	// expression runs once per candidate).
	stages []string
	// text: the field when it is a non-empty JSON string, else NULL (AC-23,
	// the empty-string-to-NULL rule). A value of another JSON type is absent.
	text func(jsonPath) string
	// integer: the field when it is a JSON integer within int64, else NULL.
	// A string, a fraction, a boolean or an out-of-range number is absent and
	// never aborts the statement.
	integer func(jsonPath) string
	// isTrue: 1 when the field is JSON true, else 0 (is_async: "1 only on a
	// positive report").
	isTrue func(jsonPath) string
	// timeKey renders a message timestamp column in a form that orders as a
	// timestamp (AC-21b: newest created_at compared as a timestamp, not as text).
	timeKey func(col string) string
	// stored renders a timeKey value in the host's storage form for this
	// module's own timestamp columns (keys.RowTime's form).
	stored func(expr string) string
	// max renders MAX over a timeKey column as keys.FromColumn reads it.
	max func(col string) string
	// temp is the schema-qualified name of winnersTable.
	temp string
}

// dialects build each dialect's statements (sql_<dialect>.go).
var dialects = perdialect.Of[func(maxMeta int64) statements]{Postgres: postgresStatements, SQLite: sqliteStatements}

// ctes are the common table expressions of the winners' scan (build).
//
// AC-23a, AC-24d: task_session_messages is scanned ONCE. That one statement
// materializes the per-key winners into a private temp table; backfill_through
// is the MAX over them and the INSERT copies all of them, so both derive from
// the same rows of the same snapshot. The MAX over the winners is the MAX over
// every qualifying message, because each key's winner is its newest message
// (AC-21b orders by created_at first). The CTEs of that scan:
//   - msg: the candidate messages (a plain text test first, see
//     fragments.candidate), metadata normalized (AC-23b), materialized so
//     the normalization runs once per row; then the dialect's stages, if any
//     (SQLite: the normalized and subagent_task objects), each materialized;
//   - src: those whose metadata.normalized.kind is 'subagent_task', with every
//     AC-21 column source extracted;
//   - qualifying: src minus messages missing session id, task id or
//     metadata.tool_call_id (AC-21a);
//   - ranked: one winner per (task_session_id, tool_call_id), newest
//     created_at as a timestamp, then greatest id (AC-21b), among the
//     messages whose created_at is a time. A created_at that is not a time
//     at all (possible only in SQLite's untyped text) cannot become
//     observed_at nor be ordered, so such a message is never a winner; it is
//     kept in the winners table with a NULL created_key, every one of them,
//     so that it is counted and named (Result.UnreadableCreatedAt), never
//     dropped unseen.
func (f fragments) ctes() string {
	st := func(p ...string) jsonPath { return append(jsonPath{"normalized", "subagent_task"}, p...) }
	// A candidate whose metadata is longer than maxMeta is not parsed: its
	// document reads as {} and it is kept in the winners table as oversized,
	// to be counted and named (Result.OversizedMetadata).
	oversized := fmt.Sprintf(`%s > %d`, f.size, f.maxMeta)
	ctes := `WITH msg AS MATERIALIZED (
	SELECT m.id, m.task_session_id, m.task_id, m.turn_id,
		` + f.timeKey("m.created_at") + ` AS created_key,
		` + f.timeKey("m.updated_at") + ` AS updated_key,
		CASE WHEN ` + oversized + ` THEN ` + f.empty + ` ELSE ` + f.meta + ` END AS meta,
		CASE WHEN ` + oversized + ` THEN NULL ELSE ` + f.doc + ` END AS doc,
		CASE WHEN ` + oversized + ` THEN 1 ELSE 0 END AS oversized
	FROM task_session_messages m
	WHERE ` + f.candidate + `
)`
	from := "msg"
	for i, s := range f.stages {
		stage := fmt.Sprintf("msg_%d", i+1)
		ctes += `, ` + stage + ` AS MATERIALIZED (
	SELECT *` + s + `
	FROM ` + from + `
)`
		from = stage
	}
	ctes += `, src AS (
	SELECT id AS message_id, task_session_id, task_id, turn_id, created_key,
		COALESCE(updated_key, created_key) AS updated_key,
		` + f.text(jsonPath{"tool_call_id"}) + ` AS tool_call_id,
		` + f.text(jsonPath{"parent_tool_call_id"}) + ` AS parent_tool_call_id,
		` + f.text(jsonPath{"status"}) + ` AS tool_status,
		` + f.text(st("status")) + ` AS agent_status,
		` + f.text(st("subagent_type")) + ` AS subagent_type,
		` + f.text(st("description")) + ` AS description,
		` + f.text(st("agent_id")) + ` AS agent_id,
		` + f.text(st("child_session_id")) + ` AS child_session_id,
		` + f.text(st("model")) + ` AS model,
		` + f.isTrue(st("is_async")) + ` AS is_async,
		` + f.integer(st("total_tokens")) + ` AS total_tokens,
		` + f.integer(st("tool_use_count")) + ` AS tool_use_count,
		` + f.integer(st("duration_ms")) + ` AS duration_ms
	FROM ` + from + `
	WHERE ` + f.text(jsonPath{"normalized", "kind"}) + ` = 'subagent_task'
), qualifying AS (
	SELECT * FROM src
	WHERE COALESCE(task_session_id, '') <> ''
		AND COALESCE(task_id, '') <> ''
		AND tool_call_id IS NOT NULL
), ranked AS (
	SELECT qualifying.*,
		ROW_NUMBER() OVER (PARTITION BY task_session_id, tool_call_id, created_key IS NULL ORDER BY created_key DESC, message_id DESC) AS rn
	FROM qualifying
)`
	return ctes
}

// build assembles the shared statement text from a dialect's fragments: the
// winners' scan (ctes) into a private temp table, the MAX over it, the
// INSERT of every winner.
func build(f fragments, prepare, cleanup []string) statements {
	drop := `DROP TABLE IF EXISTS ` + f.temp
	return statements{
		prepare: append([]string{drop}, prepare...),
		winners: f.winners(),
		max:     f.maxOfWinners(),
		insert:  f.insert(),
		cleanup: append([]string{drop}, cleanup...),
	}
}

// winners is the one scan of the messages (ctes) into the temp table: each
// key's winner with every target column derived, then every oversized
// candidate by id alone, so that it is counted and named.
func (f fragments) winners() string {
	ctes := f.ctes()
	// AC-11/AC-23a: the live writer's one terminal set; a row is settled only
	// when its TOP-LEVEL tool status is in it, never on agent_status.
	terminal := toolstatus.SQLList()
	return `CREATE TABLE ` + f.temp + ` AS
` + ctes + `
SELECT
	-- Deterministic, so a replay lands on the same row; derived from the key
	-- (length-prefixed, hence injective), so an id can only collide where the
	-- conflict target already does.
	'backfill:' || length(task_session_id) || ':' || task_session_id || ':' || tool_call_id AS id,
	task_session_id, task_id,
	NULLIF(turn_id, '') AS turn_id,
	'` + Unknown + `' AS agent_execution_id,
	tool_call_id, parent_tool_call_id, subagent_type, description, agent_id,
	child_session_id, model, agent_status, tool_status, is_async,
	-- AC-7a: a reported 0 is "not reported" for these two; AC-9: a negative is not a measurement.
	CASE WHEN total_tokens > 0 THEN total_tokens END AS total_tokens,
	-- AC-8: a reported 0 tool_use_count is a real 0.
	CASE WHEN tool_use_count >= 0 THEN tool_use_count END AS tool_use_count,
	CASE WHEN duration_ms > 0 THEN duration_ms END AS duration_ms,
	'` + Source + `' AS source,
	` + f.stored("created_key") + ` AS observed_at,
	-- AC-23a: settled only when the TOP-LEVEL metadata.status is terminal (AC-11).
	CASE WHEN tool_status IN (` + terminal + `) THEN ` + f.stored("updated_key") + ` END AS settled_at,
	` + f.stored("updated_key") + ` AS updated_at,
	created_key, message_id, 0 AS oversized
FROM ranked
WHERE rn = 1 OR created_key IS NULL
UNION ALL
SELECT ` + strings.Repeat("NULL, ", 23) + `id, 1
FROM msg
WHERE oversized = 1`
}

// maxOfWinners reads, from the temp table, the one row statements.max
// describes.
func (f fragments) maxOfWinners() string {
	return "SELECT " + f.max("created_key") + ", " +
		"COUNT(CASE WHEN created_key IS NULL AND oversized = 0 THEN 1 END), " +
		"MIN(CASE WHEN created_key IS NULL AND oversized = 0 THEN message_id END), " +
		"COUNT(CASE WHEN oversized = 1 THEN 1 END), " +
		"MIN(CASE WHEN oversized = 1 THEN message_id END) FROM " + f.temp
}

// insert copies every winner whose created_at is a time from the temp table
// into task_session_subagents; a key already there is left as it is.
func (f fragments) insert() string {
	const columns = `id, task_session_id, task_id, turn_id, agent_execution_id, tool_call_id,
	parent_tool_call_id, subagent_type, description, agent_id, child_session_id,
	model, agent_status, tool_status, is_async, total_tokens, tool_use_count,
	duration_ms, source, observed_at, settled_at, updated_at`
	// The WHERE also keeps SQLite from reading ON CONFLICT as a join constraint.
	return `INSERT INTO task_session_subagents (
	` + columns + `
)
SELECT ` + columns + `
FROM ` + f.temp + `
WHERE created_key IS NOT NULL
ON CONFLICT (task_session_id, agent_execution_id, tool_call_id) DO NOTHING`
}
