package jsonfield_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/jsonfield"
	"github.com/schemastate/schemastate/internal/testkit/dbtest"
)

// The unstorable-escape rule on each dialect's own parser: on PostgreSQL,
// PostgresReadable turns a document jsonb refuses only for \u0000 or a lone
// surrogate into one it accepts, each string holding such an escape a null
// value (or, as a member name, ""), every other member as written — an
// escaped backslash before "u0000" is text, a surrogate pair is a character,
// an escaped quote does not end a string; on SQLite, SQLiteStorable is false
// for exactly the strings whose decoded text holds a NUL or a lone surrogate.
func TestUnstorableEscapes_EachDialectReadsTheSameMembers(t *testing.T) {
	cases := []struct {
		doc string
		// readable is the document PostgreSQL parses (as jsonb text); bad
		// lists the string members (of a flat object) SQLite finds
		// unstorable, in document order.
		readable string
		bad      []string
	}{
		{`{"a":"x\u0000y","b":"ok"}`, `{"a": null, "b": "ok"}`, []string{"a"}},
		{`{"a":"x\ud800y","b":"ok"}`, `{"a": null, "b": "ok"}`, []string{"a"}},
		{`{"a":"x\udc00y","b":"ok"}`, `{"a": null, "b": "ok"}`, []string{"a"}},
		{`{"a":"\ud83d\ude00","b":"\ud800\ud800\udc00"}`, `{"a": "😀", "b": null}`, []string{"b"}},
		{`{"a":"x\\u0000y","b":"\\\u0000"}`, `{"a": "x\\u0000y", "b": null}`, []string{"b"}},
		{`{"a":"\\ud800\udc00","b":"\\\ud800\udc00"}`, `{"a": null, "b": "\\` + "\U00010000" + `"}`, []string{"a"}},
		{`{"a":"q\"\u0000\"","b":"ok\\","c":"\u00e9"}`, `{"a": null, "b": "ok\\", "c": "é"}`, []string{"a"}},
		{`{"k\u0000" : {"z":1}, "m" : [ "\u0000", 1 ], "n":"fine"}`, `{"": {"z": 1}, "m": [null, 1], "n": "fine"}`, []string{}},
	}
	dbtest.Each(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		for _, c := range cases {
			if db.Dialect == dialect.Postgres {
				var may bool
				var got string
				require.NoError(t, db.QueryRowContext(ctx, `SELECT `+jsonfield.PostgresMayHoldUnstorable("CAST($1 AS text)")+`, CAST(`+
					jsonfield.PostgresReadable("CAST($1 AS text)")+` AS jsonb)::text`, c.doc).Scan(&may, &got), c.doc)
				require.True(t, may, c.doc)
				require.Equal(t, c.readable, got, c.doc)
				continue
			}
			rows, err := db.QueryContext(ctx, `SELECT j.key FROM json_each(?) AS j WHERE j.type = 'text' AND NOT `+jsonfield.SQLiteStorable("j.value")+` ORDER BY j.id`, c.doc)
			require.NoError(t, err)
			bad := []string{}
			for rows.Next() {
				var k string
				require.NoError(t, rows.Scan(&k))
				bad = append(bad, k)
			}
			require.NoError(t, rows.Err())
			rows.Close()
			require.Equal(t, c.bad, bad, c.doc)
		}
		if db.Dialect == dialect.Postgres {
			var may bool
			require.NoError(t, db.QueryRowContext(ctx, `SELECT `+jsonfield.PostgresMayHoldUnstorable(`'{"a":"\u00e9 \ud83d\ude00"}'`)).Scan(&may))
			require.True(t, may, "a surrogate pair may be a lone one: the test is cheap, not exact")
			require.NoError(t, db.QueryRowContext(ctx, `SELECT `+jsonfield.PostgresMayHoldUnstorable(`'{"a":"\u00e9 x"}'`)).Scan(&may))
			require.False(t, may)
		}
	})
}
