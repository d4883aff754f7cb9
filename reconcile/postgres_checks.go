package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"

	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/describe"
)

// checkFacts are a table's checks as the server normalizes them: the live
// ones (pg_get_expr of the stored expression) and the declared ones,
// created NOT VALID on a scratch temporary table inside a transaction that
// is rolled back (scratchChecks). Declared holds the table's declared
// checks and the NOT NULL checks of the SET NOT NULL recipe, by name; a
// declared expression the scratch could not normalize is absent.
type checkFacts struct {
	live     map[string]string
	declared map[string]string
	// deparsed is set when the scratch could not run (a read-only server):
	// the diff then compares the live and declared expressions as EXPLAIN
	// prints each of them back.
	deparsed map[string]bool
}

// same reports a declared check whose live definition is the declared one.
func (c *checkFacts) same(name, wantExpr string) bool {
	if c == nil {
		return true
	}
	l, ok := c.live[name]
	if !ok {
		return false
	}
	if w, ok := c.declared[name]; ok {
		return l == w
	}
	return c.deparsed[name]
}

// readCheckFacts reads the table's live checks and normalizes the declared
// ones; nothing is created when the declaration has no check to compare or
// add.
func readCheckFacts(ctx context.Context, q querier, schemaName string, live, want *schema.Table) (*checkFacts, error) {
	cf := &checkFacts{live: map[string]string{}, declared: map[string]string{}, deparsed: map[string]bool{}}
	rows, err := q.QueryContext(ctx, `SELECT conname, pg_get_expr(conbin, conrelid) FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'c'`, qualified(schemaName, live.Name))
	if err != nil {
		return nil, fmt.Errorf("read the checks of %s: %w", live.Name, err)
	}
	for rows.Next() {
		var n, x string
		if err := rows.Scan(&n, &x); err != nil {
			rows.Close()
			return nil, err
		}
		cf.live[n] = x
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	exprs := declaredChecks(live, want)
	if len(exprs) == 0 {
		return cf, nil
	}
	if cf.declared, err = scratchChecks(ctx, q, schemaName, live.Name, exprs); err == nil {
		return cf, nil
	}
	// No scratch table here (a standby, a read-only transaction): the
	// diff compares deparsed expressions, and the done-checks of a check to
	// add find nothing done.
	cf.declared = map[string]string{}
	for name, w := range exprs {
		l, ok := cf.live[name]
		if !ok {
			continue
		}
		dw, err1 := deparse(ctx, q, w+" FROM "+qualified(schemaName, live.Name))
		dl, err2 := deparse(ctx, q, l+" FROM "+qualified(schemaName, live.Name))
		cf.deparsed[name] = err1 == nil && err2 == nil && dw == dl
		if cf.deparsed[name] {
			cf.declared[name] = l
		}
	}
	return cf, nil
}

// declaredChecks are the expressions to normalize, by check name: every
// declared check, and the NOT NULL check of every column the declaration
// makes NOT NULL that is nullable or absent live.
func declaredChecks(live, want *schema.Table) map[string]string {
	out := map[string]string{}
	for _, a := range want.Attrs {
		if c, ok := a.(*schema.Check); ok && c.Name != "" {
			out[c.Name] = c.Expr
		}
	}
	for _, wc := range want.Columns {
		if lc, ok := live.Column(wc.Name); !wc.Type.Null && (!ok || lc.Type.Null) {
			out[notNullCheck(wc.Name)] = dialect.QuoteIdent(wc.Name) + " IS NOT NULL"
		}
	}
	return out
}

// scratchTable is the temporary table declared checks are normalized on.
const scratchTable = "schemastate_scratch"

// scratchChecks creates each expression as a NOT VALID check of a
// temporary table LIKE the live one and reads it back as the server stores
// it, inside a transaction that is rolled back: nothing outlives it, on the
// server or on a pooled connection. An expression that does not parse is
// left out (the phase that adds it reports the error).
func scratchChecks(ctx context.Context, q querier, schemaName, table string, exprs map[string]string) (map[string]string, error) {
	names := make([]string, 0, len(exprs))
	for n := range exprs {
		names = append(names, n)
	}
	sort.Strings(names)
	out := map[string]string{}
	err := rolledBack(ctx, q, func(tx querier) error {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("CREATE TEMPORARY TABLE %s (LIKE %s)", scratchTable, qualified(schemaName, table))); err != nil {
			return err
		}
		for i, n := range names {
			add := fmt.Sprintf("ALTER TABLE pg_temp.%s ADD CONSTRAINT c%d CHECK (%s) NOT VALID", scratchTable, i, exprs[n])
			if _, err := tx.ExecContext(ctx, "SAVEPOINT schemastate_check"); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, add); err != nil {
				if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT schemastate_check"); err != nil {
					return err
				}
				continue
			}
			var x string
			if err := tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT pg_get_expr(conbin, conrelid) FROM pg_constraint WHERE conrelid = 'pg_temp.%s'::regclass AND conname = 'c%d'`, scratchTable, i)).Scan(&x); err != nil {
				return err
			}
			out[n] = x
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("normalize the declared checks of %s: %w", table, err)
	}
	return out, nil
}

// rolledBack runs fn in a transaction it rolls back: one of its own on a
// connection or pool, a savepoint inside a transaction.
func rolledBack(ctx context.Context, q querier, fn func(querier) error) error {
	if b, ok := q.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	}); ok {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // nothing is kept either way
		return fn(tx)
	}
	if _, err := q.ExecContext(ctx, "SAVEPOINT schemastate_scratch"); err != nil {
		return err
	}
	err := fn(q)
	if _, rerr := q.ExecContext(ctx, "ROLLBACK TO SAVEPOINT schemastate_scratch"); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// checkTwins are the diff's changes Atlas misses: a declared check whose
// name the live table holds with another expression (Atlas pairs checks by
// name and compares nothing else of them).
func checkTwins(live, want *schema.Table, same func(l, w *schema.Check) bool, changes []schema.Change) []schema.Change {
	for _, a := range want.Attrs {
		w, ok := a.(*schema.Check)
		if !ok || w.Name == "" {
			continue
		}
		for _, la := range live.Attrs {
			if l, ok := la.(*schema.Check); ok && l.Name == w.Name && !same(l, w) && !hasCheckChange(changes, w.Name) {
				changes = append(changes, &schema.ModifyCheck{From: l, To: w})
			}
		}
	}
	return changes
}

func hasCheckChange(changes []schema.Change, name string) bool {
	for _, c := range changes {
		switch c := c.(type) {
		case *schema.ModifyCheck:
			if c.To.Name == name {
				return true
			}
		case *schema.AddCheck:
			if c.C.Name == name {
				return true
			}
		}
	}
	return false
}

// sameCheckText compares two checks as SQLite stores them, in the table's
// SQL: the expression without its outer parentheses, its white space
// collapsed.
func sameCheckText(l, w *schema.Check) bool {
	norm := func(x string) string { return strings.Join(strings.Fields(describe.BareExpr(x)), " ") }
	return norm(l.Expr) == norm(w.Expr)
}
