package jsonfield_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/jsonfield"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// SQLiteBinary over jsonb(doc) reads every path as SQLite over the text
// does: the last member of a name at every level, the same type, SQL value
// and SQL type (a number past int64 a REAL), escapes decoded to the same
// bytes (a NUL, a lone surrogate's encoding), absent where a step is not an
// object.
func TestSQLiteBinary_ReadsAsTheTextDoes(t *testing.T) {
	docs := []string{
		`{"a":"x","a":"y","n":{"b":1,"b":{"c":"deep"}},"n":{"b":{"c":"last"}}}`,
		`{"a":1e3,"b":12,"c":-0,"d":9223372036854775808,"e":1.5,"f":true,"g":false,"h":null,"i":[1,2],"j":{}}`,
		`{"a":"x\u0000y","b":"\ud800","c":"\ud83d\ude00","d":"q\"\\\/\n","e":"","tool\u005fcall_id":"esc"}`,
		`{"n":"not an object","a":{"n":{"b":"x"}}}`,
		"{\"a\":\"\xed\xa0\x80\",\"b\":\"é\"}",
	}
	paths := [][]string{{"a"}, {"b"}, {"c"}, {"d"}, {"e"}, {"f"}, {"g"}, {"h"}, {"i"}, {"j"}, {"n", "b"}, {"n", "b", "c"}, {"a", "n", "b"}, {"tool_call_id"}}
	// type, SQL type and the value as bytes (an object or array as JSON
	// text: the binary reading yields it as JSONB); NULL only for an absent
	// member.
	pick := func(typ, val string) string {
		return "CASE WHEN " + typ + " IN ('object', 'array') THEN " + typ + " || ':' || hex(json(" + val + ")) " +
			"WHEN " + typ + " IS NOT NULL THEN " + typ + " || ':' || typeof(" + val + ") || ':' || hex(" + val + ") END"
	}
	db := dbtest.Open(t, dialect.SQLite)
	ctx := context.Background()
	for _, doc := range docs {
		for _, p := range paths {
			var text, binary sql.NullString
			require.NoError(t, db.QueryRowContext(ctx, `SELECT `+jsonfield.SQLite("d", p, pick)+`, `+jsonfield.SQLiteBinary("b", p, pick)+
				` FROM (SELECT ? AS d, jsonb(?) AS b)`, doc, doc).Scan(&text, &binary), doc)
			require.Equal(t, text, binary, "%s at %v", doc, p)
		}
	}
	var last string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT `+jsonfield.SQLiteBinary("jsonb(?)", []string{"n", "b", "c"}, func(_, val string) string { return val }),
		docs[0]).Scan(&last))
	require.Equal(t, "last", last)
}
