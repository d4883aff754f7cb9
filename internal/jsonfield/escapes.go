package jsonfield

import (
	"fmt"
	"strings"
)

// Unstorable text: a JSON string whose escapes decode to a character neither
// dialect can store as text — a NUL (\u0000) or a lone UTF-16 surrogate
// (\ud800 not followed by a low surrogate, \udc00 not preceded by a high
// one). PostgreSQL refuses the whole document for one (jsonb raises on
// \u0000, json and jsonb on a lone surrogate), while SQLite parses it and
// decodes the string to text holding a NUL or the surrogate's invalid UTF-8
// encoding (ED A0-BF xx), which PostgreSQL could never hold. Both dialects
// read such a document the same way, member by member: a member whose string
// holds one is read as JSON null (not a string, so absent) and every other
// member as written. Nothing is altered or escaped: the value is read whole
// or not at all, as the live writer stores such a field NULL.

// PostgresMayHoldUnstorable renders a cheap test on expr (JSON text) that is
// false whenever the text holds no unstorable escape, so that only such
// documents pay for PostgresReadable. It may be true for a document that
// holds none (an escaped backslash before "u0000", a surrogate pair).
func PostgresMayHoldUnstorable(expr string) string {
	return fmt.Sprintf(`(strpos(%[1]s, '\u0000') > 0 OR (strpos(%[1]s, '\u') > 0 AND %[1]s ~ '\\u[dD][89a-fA-F]'))`, expr)
}

// pgString is one JSON string literal, escapes read in pairs, lazily up to
// the first unstorable escape (pgUnstorable) and then to its closing quote.
// A match can only begin at a literal's opening quote: between a closing
// quote and the next opening one there is only JSON structure, which holds
// no backslash, so no unstorable escape; and an escaped quote inside a
// literal is only reached once the literal's own opening quote failed to
// match, which it does only when the literal holds no unstorable escape.
const (
	pgHex     = `[0-9a-fA-F]`
	pgHigh    = `\\u[dD][89abAB]` + pgHex + `{2}`
	pgLow     = `\\u[dD][c-fC-F]` + pgHex + `{2}`
	pgUnit    = `(?:[^"\\]|\\.)`
	pgEscaped = `(?:\\u0000|` + pgHigh + `(?!` + pgLow + `)|(?<!(?:^|[^\\])(?:\\\\)*` + pgHigh + `)` + pgLow + `)`
	pgString  = `"` + pgUnit + `*?` + pgEscaped + pgUnit + `*"`
)

// PostgresReadable renders expr (JSON text) with every string literal that
// holds an unstorable escape replaced: a member name by "" (no member this
// module reads has that name, and a name is never a value) and a value by
// null. What is left parses wherever the rest of the document does, and
// every other member reads as written. A low surrogate is lone unless a
// high one that is itself an escape (its backslash preceded by an even run of
// backslashes) comes right before it. A document that still does not parse
// reads as no document, as before.
func PostgresReadable(expr string) string {
	names := fmt.Sprintf(`regexp_replace(%s, '%s(?=[ \t\n\r]*:)', '""', 'g')`, expr, sqlQuote(pgString))
	return fmt.Sprintf(`regexp_replace(%s, '%s', 'null', 'g')`, names, sqlQuote(pgString))
}

// SQLiteStorable renders a test that v, a text value SQLite decoded from a
// JSON string, holds neither a NUL nor a lone surrogate's encoding: bytes
// ED A0 through ED BF, which UTF-8 reserves for surrogates and which only a
// \ud800–\udfff escape left unpaired produces. The search over the 32 byte
// pairs runs only when v holds an ED byte at all (rare outside Hangul).
func SQLiteStorable(v string) string {
	b := "CAST(" + v + " AS BLOB)"
	pairs := make([]string, 0, 32)
	for x := 0xA0; x <= 0xBF; x++ {
		pairs = append(pairs, fmt.Sprintf(`instr(%s, x'ED%02X') = 0`, b, x))
	}
	return fmt.Sprintf(`(instr(%[1]s, x'00') = 0 AND (instr(%[1]s, x'ED') = 0 OR (%[2]s)))`, b, strings.Join(pairs, " AND "))
}

func sqlQuote(s string) string { return strings.ReplaceAll(s, "'", "''") }
