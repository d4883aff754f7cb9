// Package jsonfield holds the one rule both dialects follow when a metadata
// document names a member twice ({"tool_call_id":"a", …, "tool_call_id":"b"}):
// the LAST member of that name is the value, at every level of the path.
//
// That is what PostgreSQL reads natively (jsonb keeps only the last member,
// and json's operators read the last), what the host's Go readers
// (encoding/json) and JavaScript's JSON.parse read, and the only rule that
// can be applied to a host whose metadata column is jsonb, where the earlier
// member was discarded on insert. SQLite's json_extract reads the first
// member, so on SQLite every field is read through json_each instead, whose
// rows come in document order. SQLiteBinary reads the same way from a
// document converted once to SQLite's JSONB, so that no field costs a parse.
package jsonfield

import (
	"fmt"
	"strings"
)

// SQLite renders a scalar subquery reading the field at path of the JSON
// object doc (an SQL expression holding valid JSON object text): the last
// member named path[0], then, when that is an object, its last member named
// path[1], and so on. pick renders the value from the json_each columns of
// the chosen member, given their qualified names (typ: 'text', 'integer',
// 'real', 'true', 'false', 'null', 'object', 'array'; val: its SQL value).
// The subquery is NULL when a member is absent or a step is not an object.
// Path elements are identifiers of this module, never input.
func SQLite(doc string, path []string, pick func(typ, val string) string) string {
	return member("json_each", SQLiteObject(doc, path[:len(path)-1]), path[len(path)-1], pick("j.type", "j.value"))
}

// SQLiteObject renders the object at path in doc under the same rule, as
// JSON text: NULL when a member is absent or is not an object. A caller that
// reads several fields of one nested object computes it once with this and
// reads the fields from it with SQLite.
func SQLiteObject(doc string, path []string) string {
	return object("json_each", doc, path)
}

// SQLiteBinary is SQLite for doc holding a JSON object as JSONB (jsonb(…)
// of valid JSON text): the same members in the same order, read by
// jsonb_each, which walks the blob instead of parsing text and yields each
// nested object as JSONB again. A scalar reads as json_each reads it from
// the text (the same type and SQL value, escapes decoded the same way).
func SQLiteBinary(doc string, path []string, pick func(typ, val string) string) string {
	return member("jsonb_each", SQLiteBinaryObject(doc, path[:len(path)-1]), path[len(path)-1], pick("j.type", "j.value"))
}

// SQLiteBinaryObject is SQLiteObject for a JSONB doc; the object is JSONB.
func SQLiteBinaryObject(doc string, path []string) string {
	return object("jsonb_each", doc, path)
}

func object(each, doc string, path []string) string {
	obj := doc
	for _, p := range path {
		obj = member(each, obj, p, "CASE WHEN j.type = 'object' THEN j.value END")
	}
	return obj
}

func member(each, obj, name, sel string) string {
	if strings.ContainsAny(name, `'"`) {
		panic(fmt.Sprintf("jsonfield: member name %q is not an identifier", name))
	}
	return fmt.Sprintf(`(SELECT %s FROM %s(%s) AS j WHERE j.key = '%s' ORDER BY j.id DESC LIMIT 1)`, sel, each, obj, name)
}
