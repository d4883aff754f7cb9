// Package pgsql holds what PostgreSQL's planner, its shadow-table rebuild
// and its session all write into SQL or errors: a qualified name, a string
// literal, a loop phase's statements and an error's DETAIL and HINT.
package pgsql

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
)

// Qualified is schema.name, quoted, for to_regclass and messages.
func Qualified(schemaName, name string) string {
	return dialect.QuoteIdent(schemaName) + "." + dialect.QuoteIdent(name)
}

// Literal quotes s as an SQL string literal (catalog names in a plan's
// checks, which are printed and must read standalone).
func Literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// LoopPhase sets the phase's Loop and its SQL, the loop's statements in
// the order they run.
func LoopPhase(ph ops.Phase, l ops.Loop) ops.Phase {
	ph.Loop = &l
	ph.SQL = nil
	for _, s := range append([]string{l.Batch, l.Progress, l.Bound, l.Delete, l.Copy, l.Forget}, l.Builds...) {
		if s != "" {
			ph.SQL = append(ph.SQL, s)
		}
	}
	if l.Analyze != "" {
		ph.SQL = append(ph.SQL, l.Analyze)
	}
	return ph
}

// WithDetail appends PostgreSQL's DETAIL and HINT to err: they name the
// object that blocked a statement (the view that reads a column, say), which
// the error message alone does not.
func WithDetail(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Detail == "" && pe.Hint == "") {
		return err
	}
	extra := pe.Detail
	if pe.Hint != "" {
		extra = strings.TrimSpace(extra + " " + pe.Hint)
	}
	return fmt.Errorf("%w: %s", err, extra)
}
