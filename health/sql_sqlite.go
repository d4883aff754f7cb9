package health

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/schemastate/schemastate/internal/jsonfield"
)

func sqliteSQL() dialectSQL {
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
		floorCTE:   sqliteMsgCTE,
		kind:       jsonfield.SQLite("msg.meta", []string{"normalized", "kind"}, str),
		toolCallID: jsonfield.SQLite("msg.meta", []string{"tool_call_id"}, id),
		evaluate: func(ctx context.Context, tx *sql.Tx, stmt, since string, c *counts) error {
			return c.scan(tx.QueryRowContext(ctx, stmt, since))
		},
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
