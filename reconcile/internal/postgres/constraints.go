package postgres

import (
	"fmt"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
)

// The online recipe for a check, a foreign key and SET NOT NULL: check_rows,
// add_not_valid, validate (and set_not_null), each done when the live
// constraint is the declared definition (definitions.go).

// exists is the catalog check that the table has a constraint of that
// name; valid adds that it is validated, match (a condition on its
// pg_constraint row c) that it is the declared definition.
func (p recipePlanner) exists(name string, valid bool, match ...string) string {
	cond := ""
	if valid {
		cond = " AND c.convalidated"
	}
	for _, m := range match {
		cond += " AND " + m
	}
	return fmt.Sprintf("EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = to_regclass(%s) AND c.conname = %s%s)", pgsql.Literal(p.qt), pgsql.Literal(name), cond)
}

// constraintSpec is one constraint a recipe adds: its name, what it is (for
// messages), the rows that break it, its definition as SQL, the condition
// (on its pg_constraint row c) that the live one is that definition, the
// lock adding it takes, and whether a twin is dropped first (replace).
// skipWhen, when set, is a further condition under which every phase is
// done.
type constraintSpec struct {
	name, what, broken, def, match string
	lock                           ops.LockClass
	lockNote                       string
	replace                        bool
	skipWhen                       string
}

// constraint is the recipe for a check or a foreign key: the read, the NOT
// VALID constraint, its validation. Each phase is done when the live
// constraint of the name is the declared definition (match), never on its
// name alone; a twin under the name is dropped in add_not_valid's
// transaction, so the name is never unenforced.
func (p recipePlanner) constraint(s constraintSpec) []ops.Phase {
	or := ""
	if s.skipWhen != "" {
		or = " OR " + s.skipWhen
	}
	detail := p.why + "; " + s.what + ": NOT VALID, then VALIDATE"
	qn := dialect.QuoteIdent(s.name)
	drop := fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s", p.qt, qn)
	add := []string{fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s %s NOT VALID", p.qt, qn, s.def)}
	lock, lockNote := s.lock, s.lockNote
	if s.replace {
		add = append([]string{drop}, add...)
		lock, lockNote, detail = ops.LockCatalog, lockNote+"; the definition found under the name dropped first", detail+" (replacing another definition under the name)"
	}
	return []ops.Phase{
		{Step: core.StepShape, Name: ops.PhaseCheckRows, Kind: ops.KindCheckRows, Table: p.table, Object: s.name, Lock: ops.LockNone, Scans: true,
			Breaking: p.breaking(s.broken), Constraint: s.what,
			DoneWhen: "SELECT " + p.exists(s.name, false, s.match) + or, Detail: detail},
		{Step: core.StepShape, Name: ops.PhaseAddNotValid, Kind: ops.KindStatements, Table: p.table, Object: s.name, Transactional: true, Lock: lock,
			SQL:      add,
			DoneWhen: "SELECT " + p.exists(s.name, false, s.match) + or, Detail: detail + lockNote},
		{Step: core.StepShape, Name: ops.PhaseValidate, Kind: ops.KindOwnTx, Table: p.table, Object: s.name, Transactional: true, Lock: ops.LockShareUpdateExclusive, Scans: true,
			SQL:      []string{fmt.Sprintf("ALTER TABLE %s VALIDATE CONSTRAINT %s", p.qt, qn)},
			Breaking: p.breaking(s.broken), Constraint: s.what,
			Cleanup:  []string{drop},
			DoneWhen: "SELECT " + p.exists(s.name, true, s.match) + or, Detail: detail},
	}
}

// setNotNull is SET NOT NULL's recipe for col: a validated CHECK (col IS
// NOT NULL) proves the column holds no NULL, so SET NOT NULL (PostgreSQL 12
// and later) skips its scan; the check is dropped in the same transaction.
func (p recipePlanner) setNotNull(col string, replace map[string]bool) []ops.Phase {
	chk := notNullCheck(col)
	qc := dialect.QuoteIdent(col)
	phases := p.constraint(constraintSpec{name: chk, what: "NOT NULL of " + col, broken: qc + " IS NULL", def: fmt.Sprintf("CHECK (%s IS NOT NULL)", qc),
		match: checkMatches(p.declaredCheckExpr(chk)), lock: ops.LockCatalog, replace: replace[chk], skipWhen: p.notNull(col)})
	return append(phases, ops.Phase{Step: core.StepShape, Name: ops.PhaseSetNotNull, Kind: ops.KindStatements, Table: p.table, Object: col, Transactional: true, Lock: ops.LockCatalog,
		SQL: []string{
			fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL", p.qt, qc),
			fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s", p.qt, dialect.QuoteIdent(chk)),
		},
		DoneWhen: fmt.Sprintf("SELECT %s AND NOT %s", p.notNull(col), p.exists(chk, false)),
		Detail:   p.why + "; NOT NULL of " + col + ": SET NOT NULL proved by the validated check " + chk})
}

// dropNotNullCheck drops a recipe's check left by a SET NOT NULL that no
// longer applies (the declaration changed back).
func (p recipePlanner) dropNotNullCheck(chk string) ops.Phase {
	return ops.Phase{Step: core.StepShape, Name: ops.PhaseAlter, Kind: ops.KindStatements, Table: p.table, Object: chk, Transactional: true, Lock: ops.LockCatalog,
		SQL:      []string{fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT IF EXISTS %s", p.qt, dialect.QuoteIdent(chk))},
		DoneWhen: "SELECT NOT " + p.exists(chk, false),
		Detail:   p.why + "; the check " + chk + " of a SET NOT NULL no longer declared"}
}
