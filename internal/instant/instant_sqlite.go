package instant

import (
	"fmt"
	"time"
)

// sqliteInstant: the column is text in the host's form, normalized in SQL.
type sqliteInstant struct{}

func (sqliteInstant) column(col string) string {
	frac := fmt.Sprintf("substr(%[1]s, 21)", col)
	digits := fmt.Sprintf("substr(%[1]s, 1, length(%[1]s) - length(ltrim(%[1]s, '0123456789')))", frac)
	return fmt.Sprintf("(CASE WHEN %[1]s GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' THEN "+
		"datetime(%[1]s) || '.' || substr((CASE WHEN substr(%[1]s, 20, 1) = '.' THEN %[2]s ELSE '' END) || '000000', 1, 6) END)", col, digits)
}
func (sqliteInstant) param(p string) string   { return p }
func (s sqliteInstant) max(col string) string { return "MAX(" + s.column(col) + ")" }
func (sqliteInstant) row(t time.Time) any     { return t.Format(rowLayout) }
