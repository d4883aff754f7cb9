// Package dialect names the two SQL dialects schemastate supports and holds the
// few facts every other package needs about them: how to recognise a
// *sql.DB's dialect and how to write a bind parameter. It imports nothing of
// this module.
package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Dialect is "sqlite" or "postgres".
type Dialect string

const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// ErrUnknown is returned when a *sql.DB's driver is neither SQLite nor PostgreSQL.
var ErrUnknown = errors.New("dialect: unsupported database driver")

// Detect names the dialect of db from its driver type.
func Detect(db *sql.DB) (Dialect, error) {
	switch t := fmt.Sprintf("%T", db.Driver()); {
	case strings.Contains(t, "sqlite"):
		return SQLite, nil
	case strings.Contains(t, "stdlib"), strings.Contains(t, "pq."), strings.Contains(t, "pgx"):
		return Postgres, nil
	default:
		return "", fmt.Errorf("%w: %s", ErrUnknown, t)
	}
}

// Param returns the n-th (1-based) bind parameter placeholder.
func (d Dialect) Param(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// Rebind rewrites a query written with '?' placeholders into the dialect's
// form. It does not look inside string literals, so queries passed to it must
// not contain a literal '?'.
func (d Dialect) Rebind(q string) string {
	if d != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// QuoteIdent quotes an identifier for either dialect (both accept "…").
func QuoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// Querier is what every statement-running function here takes: a *sql.DB,
// *sql.Conn or *sql.Tx, so callers decide the transaction.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
