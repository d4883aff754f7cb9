package health

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/perdialect"
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

// Queries returns the health statements for dialect d. It panics on a
// dialect other than the two (dialect.Detect never returns one).
func Queries(d dialect.Dialect) Statements {
	q := sqlFor(d)
	since := func(col string) string { return instant.AtOrAfter(d, col, q.param) }
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
WHERE %s`, instant.MaxExpr(d, "s.observed_at"), since("s.observed_at")),
	}
}

// sides renders the three sets the anti-joins compare, as SELECTs of
// (task_session_id, tool_call_id) over the msg CTE and the subagent rows.
func (q dialectSQL) sides(d dialect.Dialect) (expected, accounting, observed string) {
	since := func(col string) string { return instant.AtOrAfter(d, col, q.param) }

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
	since := func(col string) string { return instant.AtOrAfter(d, col, q.param) }
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
		q.toolCallID, q.kind, since("msg.created_at"), since("s.observed_at"), instant.MaxExpr(d, "observed_at"),
		instant.ColumnExpr(d, "msg.created_at"))
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
func evaluate(ctx context.Context, tx *sql.Tx, q dialectSQL, d dialect.Dialect, since string, c *counts) error {
	return q.evaluate(ctx, tx, evaluation(d), since, c)
}

// floorQuery is one full scan of the qualifying-message predicate with the
// metadata normalization Evaluate applies: the least work any correct health
// check must do. The benchmark compares Evaluate against it. On PostgreSQL it
// casts every candidate, so it raises when one is malformed — a measuring
// stick for a store without such a document, not a check. It panics on a
// dialect other than the two.
func floorQuery(d dialect.Dialect) string {
	q := sqlFor(d)
	return q.floorCTE + fmt.Sprintf(`
SELECT COUNT(*)
FROM msg
WHERE %s = 'subagent_task'
  AND %s`, q.kind, instant.AtOrAfter(d, "msg.created_at", q.param))
}

// dialectSQL holds the only parts of the statements that differ by dialect
// (sql_<dialect>.go).
type dialectSQL struct {
	param  string // the single bind parameter, repeated wherever :since appears
	msgCTE string // WITH … msg AS (task_session_id, task_id, created_at, meta), for Queries
	// evalCTE is msg as evaluation reads it: the same columns, holding the
	// subagent candidates in the window and those whose created_at is not a
	// time. On SQLite it is msgCTE; see postgresEvalCTE for PostgreSQL.
	evalCTE string
	// floorCTE is msg as floorQuery reads it: evalCTE with nothing left out.
	floorCTE   string
	kind       string // metadata.normalized.kind as text
	toolCallID string // metadata.tool_call_id when it is a JSON string, else NULL

	// evaluate runs the evaluation statement stmt on tx and scans its row
	// into c.
	evaluate func(ctx context.Context, tx *sql.Tx, stmt, since string, c *counts) error
}

// dialects are the parts of the statements of each dialect.
var dialects = perdialect.Of[dialectSQL]{Postgres: postgresSQL(), SQLite: sqliteSQL()}

// sqlFor is d's dialectSQL; it panics on a dialect other than the two (the
// exported Queries and floorQuery have no error to return; Evaluate checks
// the dialect first).
func sqlFor(d dialect.Dialect) dialectSQL { return dialects.Must(d) }
