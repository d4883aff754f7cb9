package redact_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/tool/redact"
)

// Every spelling of a password a message can carry is masked, by pattern
// (no secret known) and by the secrets taken out of the DSN.
func TestString_MasksEverySpelling(t *testing.T) {
	for _, tc := range []struct{ dsn, msg, secret string }{
		{"postgres://u:pw1234@h/db", `cannot reach "postgres://u:pw1234@h/db"`, "pw1234"},
		{"postgres://u:p@ss/w0rd@h/db", `parse "postgres://u:p@ss/w0rd@h/db": invalid`, "p@ss/w0rd"},
		{"postgres://u@h/db?sslmode=disable&password=qs-secret", `dsn postgres://u@h/db?password=qs-secret&x=1`, "qs-secret"},
		{"host=h password='with space' dbname=x", `password='with space' dbname=x`, "with space"},
		{"host=h password=kw-secret dbname=x", `error in host=h password=kw-secret dbname=x`, "kw-secret"},
		{"", `PGPASSWORD=env-secret psql`, "env-secret"},
		{"postgres://u:pc%40t@h/db", `user u, password pc@t refused`, "pc@t"},
		{"postgres://u:a&b<c@h/db", `{"dsn":"postgres://u:a\u0026b\u003cc@h/db"}`, `a\u0026b\u003cc`},
	} {
		got := redact.String(tc.msg, redact.Secrets(tc.dsn)...)
		require.NotContains(t, got, tc.secret, "%s → %s", tc.msg, got)
		require.Contains(t, got, redact.Mask, tc.msg)
	}
}

// The Writer masks what passes through it and keeps JSON valid.
func TestWriter_MasksAndKeepsJSONValid(t *testing.T) {
	var buf bytes.Buffer
	w := redact.NewWriter(&buf, redact.Secrets(`postgres://u:s3"cr\et@h/db`))
	b, err := json.Marshal(map[string]string{"error": `cannot reach postgres://u:s3"cr\et@h/db`})
	require.NoError(t, err)
	n, err := w.Write(b)
	require.NoError(t, err)
	require.Equal(t, len(b), n)
	require.NotContains(t, buf.String(), `s3\"cr\\et`)
	var v map[string]string
	require.NoError(t, json.Unmarshal(buf.Bytes(), &v), buf.String())
}
