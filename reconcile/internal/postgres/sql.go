package postgres

import (
	"strings"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
)

// qualified is schema.name, quoted, for to_regclass and messages.
func qualified(schemaName, name string) string {
	return dialect.QuoteIdent(schemaName) + "." + dialect.QuoteIdent(name)
}

// literal quotes s as an SQL string literal (catalog names in a plan's
// checks, which are printed and must read standalone).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// loopPhase sets the phase's Loop and its SQL, the loop's statements in
// the order they run.
func loopPhase(ph ops.Phase, l ops.Loop) ops.Phase {
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
