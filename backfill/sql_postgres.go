package backfill

import (
	"fmt"
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/instant"
	"github.com/schemastate/schemastate/internal/jsonfield"
)

// PostgreSQL 15 has no IS JSON predicate and no pg_input_is_valid, and a cast
// of malformed text to jsonb raises — no CASE can guard it, because the test
// for validity IS the cast. So the cast runs inside a PL/pgSQL function that
// traps data_exception (malformed JSON, an unsupported \u0000 escape, a
// numeric overflow) and statement_too_complex (nesting deep enough to exhaust
// the parser's stack) and returns {}. A document refused only for a \u0000
// or lone-surrogate escape is cast again with each string holding one read
// as null (jsonfield.PostgresReadable), so its other members are read as
// SQLite reads them. The function lives in pg_temp: it is
// private to this session, created inside the step's transaction (so it rolls
// back with it) and dropped after the key writes. Nothing persistent is added
// to the host's schema. Needs the TEMP privilege, which PUBLIC has by default.
const pgMetaFunc = `pg_temp.schemastate_metadata_object`

var pgPrepare = `CREATE OR REPLACE FUNCTION ` + pgMetaFunc + `(doc text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
	j jsonb;
BEGIN
	IF doc IS NULL OR doc = '' OR doc = 'null' THEN
		RETURN '{}'::jsonb;
	END IF;
	BEGIN
		j := doc::jsonb;
	EXCEPTION WHEN data_exception OR statement_too_complex THEN
		IF NOT ` + jsonfield.PostgresMayHoldUnstorable("doc") + ` THEN
			RETURN '{}'::jsonb;
		END IF;
		BEGIN
			j := (` + jsonfield.PostgresReadable("doc") + `)::jsonb;
		EXCEPTION WHEN data_exception OR statement_too_complex THEN
			RETURN '{}'::jsonb;
		END;
	END;
	IF jsonb_typeof(j) = 'object' THEN
		RETURN j;
	END IF;
	RETURN '{}'::jsonb;
END
$fn$`

const pgCleanup = `DROP FUNCTION IF EXISTS ` + pgMetaFunc + `(text)`

// postgresStatements are PostgreSQL's statements: the scan through the
// metadata guard, and the same scan with the plain cast as statements.fast.
func postgresStatements(maxMeta int64) statements {
	f := postgresFragments(maxMeta)
	st := build(f, []string{pgPrepare}, []string{pgCleanup})
	st.fast = build(plainCast(f), nil, nil).winners
	return st
}

// postgresFragments are PostgreSQL's fragments with every candidate's
// metadata read through the guard (pgMetaFunc), which never raises.
func postgresFragments(maxMeta int64) fragments {
	path := func(p jsonPath) string { return "'{" + strings.Join(p, ",") + "}'" }
	return fragments{
		// ::text so a host whose metadata column is json/jsonb works too.
		// The regular expression runs only on a document holding \u00.
		//
		// Written as an equality so that the planner can scan in parallel:
		// it has no statistics for a strpos test and estimates a bare one
		// to keep a third of the rows, which prices the parallel scan's
		// tuple transfer above a serial scan of the table, while an
		// equality on an expression it estimates at 0.5% (DEFAULT_EQ_SEL).
		// Candidates are a far smaller share in any real history, so the
		// msg CTE's scan runs in parallel workers under a Gather (the same
		// plan the floor's kind test gets) and everything after it, on the
		// few candidates, stays serial. The rows are the same.
		candidate: `(CASE WHEN strpos(m.metadata::text, 'subagent_task') > 0 OR ` +
			`(strpos(m.metadata::text, '\u00') > 0 AND m.metadata::text ~ '\\u00[5-7]') THEN 1 END) = 1`,
		// The guarded cast costs a subtransaction per row; the candidate
		// test keeps it to the rows that can qualify, and Run tries the
		// plain cast first (statements.fast).
		meta:    pgMetaFunc + `(m.metadata::text)`,
		doc:     `m.metadata`,
		empty:   `'{}'::jsonb`,
		size:    `octet_length(m.metadata::text)`,
		maxMeta: maxMeta,
		text: func(p jsonPath) string {
			return fmt.Sprintf(`CASE WHEN jsonb_typeof(meta #> %[1]s) = 'string' THEN NULLIF(meta #>> %[1]s, '') END`, path(p))
		},
		// Nested CASE: PostgreSQL does not promise the order of AND operands,
		// but it does evaluate a CASE's branches only when reached, so the
		// casts run only on an integer literal that fits int64, rejecting
		// fractions and exponents the way SQLite's json_type does.
		// jsonb does NOT keep an exponent's written form (1e3 reads back as
		// 1000), so the literal test reads the number as written, through
		// json — reached only for a number in a document the guarded cast
		// accepted, read as the guard read it (an unstorable escape's string
		// as null: json's operators raise on \u0000 anywhere in the
		// document), so the cast to json cannot raise.
		integer: integer(`(CASE WHEN ` + jsonfield.PostgresMayHoldUnstorable("doc::text") + ` THEN ` +
			jsonfield.PostgresReadable("doc::text") + ` ELSE doc::text END)::json`),
		isTrue: func(p jsonPath) string {
			return fmt.Sprintf(`CASE WHEN jsonb_typeof(meta #> %[1]s) = 'boolean' AND (meta #>> %[1]s) = 'true' THEN 1 ELSE 0 END`, path(p))
		},
		// timestamp (without time zone) holding UTC wall clock: native
		// comparison, and copied as is — no TimeZone setting is involved.
		timeKey: func(col string) string { return instant.ColumnExpr(dialect.Postgres, col) },
		stored:  func(expr string) string { return expr },
		max:     func(col string) string { return instant.MaxExpr(dialect.Postgres, col) },
		temp:    "pg_temp." + winnersTable,
	}
}

// plainCast is f with the metadata cast plainly instead of through the
// guard. The guard costs each candidate a PL/pgSQL call and a
// subtransaction. A history whose candidates are all well-formed JSON (the
// usual case) needs neither: the plain cast gives the same document, and
// raises on the first malformed one — an unstorable escape included —
// which sends Run to the guard. Every document it reads cast as written, so
// its numbers are read through json as written too.
func plainCast(f fragments) fragments {
	f.meta = `CASE WHEN m.metadata IS NULL OR m.metadata::text IN ('', 'null') THEN '{}'::jsonb ` +
		`WHEN jsonb_typeof(m.metadata::text::jsonb) = 'object' THEN m.metadata::text::jsonb ELSE '{}'::jsonb END`
	f.integer = integer(`doc::text::json`)
	return f
}

// integer is PostgreSQL's integer fragment, reading each number's written
// form from written, the document as json.
func integer(written string) func(jsonPath) string {
	return func(p jsonPath) string {
		path := "'{" + strings.Join(p, ",") + "}'"
		return fmt.Sprintf(`CASE WHEN jsonb_typeof(meta #> %[1]s) = 'number' THEN `+
			`CASE WHEN (%[2]s #>> %[1]s) ~ '^-?[0-9]{1,19}$' THEN `+
			`CASE WHEN (meta #>> %[1]s)::numeric BETWEEN -9223372036854775808 AND 9223372036854775807 THEN (meta #>> %[1]s)::bigint END END END`, path, written)
	}
}
