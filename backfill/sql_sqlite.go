package backfill

import (
	"fmt"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/jsonfield"
)

// SQLite: json_valid guards every extraction (jsonb() and json_each on ”
// or on malformed text raise "malformed JSON"). Every field is read through
// jsonfield, so a member named twice reads its LAST value, as PostgreSQL
// reads it; typeof() of an 'integer' member tells an int64 from a number
// SQLite had to turn into a REAL.
//
// The document is parsed once per candidate: converted to JSONB in the msg
// CTE, every field is then read by a jsonb_each pass walking the blob
// (jsonfield.SQLiteBinary). A json_each pass over the text parses it again:
// about twenty parses per candidate, a quarter of the scan's CPU time on
// candidates (docs/backfill-speed.md).
func sqliteStatements(maxMeta int64) statements {
	meta := `CASE WHEN json_valid(m.metadata) THEN ` +
		`CASE WHEN json_type(m.metadata) = 'object' THEN jsonb(m.metadata) ELSE jsonb('{}') END ` +
		`ELSE jsonb('{}') END`
	// A field under normalized or normalized.subagent_task is read from
	// that object, extracted once per message (stages), not from the whole
	// document again for every field.
	field := func(p jsonPath, pick func(typ, val string) string) string {
		switch {
		case len(p) > 2 && p[0] == "normalized" && p[1] == "subagent_task":
			return jsonfield.SQLiteBinary("task", p[2:], pick)
		case len(p) > 1 && p[0] == "normalized":
			return jsonfield.SQLiteBinary("norm", p[1:], pick)
		}
		return jsonfield.SQLiteBinary("meta", p, pick)
	}
	f := fragments{
		// GLOB after instr: the pattern runs only on the rare document that
		// holds a \u00 escape at all.
		candidate: `(instr(m.metadata, 'subagent_task') > 0 OR ` +
			`(instr(m.metadata, '\u00') > 0 AND m.metadata GLOB '*\u00[5-7]*'))`,
		meta:    meta,
		doc:     `NULL`,
		empty:   `jsonb('{}')`,
		size:    `octet_length(m.metadata)`,
		maxMeta: maxMeta,
		stages: []string{
			`, ` + jsonfield.SQLiteBinaryObject("meta", jsonPath{"normalized"}) + ` AS norm`,
			`, ` + jsonfield.SQLiteBinaryObject("norm", jsonPath{"subagent_task"}) + ` AS task`,
		},
		// A string holding a NUL or a lone surrogate (from a \u0000 or an
		// unpaired \ud800 escape) is absent, as PostgreSQL reads it
		// (jsonfield: unstorable text).
		text: func(p jsonPath) string {
			return field(p, func(typ, val string) string {
				return fmt.Sprintf(`CASE WHEN %s = 'text' AND %s THEN NULLIF(%s, '') END`, typ, jsonfield.SQLiteStorable(val), val)
			})
		},
		integer: func(p jsonPath) string {
			return field(p, func(typ, val string) string {
				return fmt.Sprintf(`CASE WHEN %s = 'integer' AND typeof(%s) = 'integer' THEN %[2]s END`, typ, val)
			})
		},
		isTrue: func(p jsonPath) string {
			return `COALESCE(` + field(p, func(typ, _ string) string {
				return fmt.Sprintf(`CASE WHEN %s = 'true' THEN 1 ELSE 0 END`, typ)
			}) + `, 0)`
		},
		// keys.ColumnExpr: "YYYY-MM-DD HH:MM:SS.ffffff" in UTC, whatever offset
		// and fraction width the stored text has; NULL when it is not a time.
		timeKey: func(col string) string { return instant.ColumnExpr(dialect.SQLite, col) },
		// The host's form, 2006-01-02 15:04:05.999999999-07:00, in UTC:
		// trailing fractional zeros trimmed, no fraction on a whole second.
		stored: func(expr string) string { return fmt.Sprintf(`rtrim(rtrim(%s, '0'), '.') || '+00:00'`, expr) },
		max:    func(col string) string { return "MAX(" + col + ")" },
		temp:   "temp." + winnersTable,
	}
	return build(f, nil, nil)
}
