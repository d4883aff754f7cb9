package instant

import "time"

// postgresInstant: the column is a native timestamp (UTC wall clock), the key
// is cast from the UTC string.
type postgresInstant struct{}

func (postgresInstant) column(col string) string { return col }
func (postgresInstant) param(p string) string    { return "CAST(" + p + " AS timestamp)" }
func (postgresInstant) max(col string) string {
	return "to_char(MAX(" + col + "), 'YYYY-MM-DD HH24:MI:SS.US')"
}
func (postgresInstant) row(t time.Time) any { return t }
