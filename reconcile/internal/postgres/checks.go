package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"sort"

	atlaspg "ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/reconcile/internal/core"
	"github.com/schemastate/schemastate/reconcile/internal/postgres/pgsql"
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
	// indexes are the declared indexes with a predicate or an expression,
	// built on the scratch table and read back as Atlas inspects an index
	// (pg_get_expr of the predicate, pg_get_indexdef of each part).
	indexes map[string]indexForm
}

// indexForm is an index's predicate and expression parts (by position) as
// the server prints them.
type indexForm struct {
	predicate string
	exprs     map[int]string
}

// same reports a declared check whose live definition is the declared one
// (always, without facts: a plan made without a database compares as Atlas
// does).
func (c *checkFacts) same(name string) bool {
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
func readCheckFacts(ctx context.Context, q core.Querier, schemaName string, live, want *schema.Table) (*checkFacts, error) {
	cf := &checkFacts{live: map[string]string{}, declared: map[string]string{}, deparsed: map[string]bool{}}
	rows, err := q.QueryContext(ctx, `SELECT conname, pg_get_expr(conbin, conrelid) FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'c'`, pgsql.Qualified(schemaName, live.Name))
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
	exprs, indexes := declaredChecks(live, want), spelledIndexes(want)
	if len(exprs) == 0 && len(indexes) == 0 {
		return cf, nil
	}
	if cf.declared, cf.indexes, err = scratchForms(ctx, q, schemaName, live.Name, exprs, indexes); err == nil {
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
		dw, err1 := deparse(ctx, q, w+" FROM "+pgsql.Qualified(schemaName, live.Name))
		dl, err2 := deparse(ctx, q, l+" FROM "+pgsql.Qualified(schemaName, live.Name))
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

// spelledIndexes are the declared indexes whose definition has a text the
// server spells its own way: a predicate, an expression part.
func spelledIndexes(want *schema.Table) []*schema.Index {
	var out []*schema.Index
	for _, idx := range want.Indexes {
		if describe.IsPartial(idx) || describe.ColumnNames(idx) == nil {
			if buildable(idx) {
				out = append(out, idx)
			}
		}
	}
	return out
}

// scratchForms creates each expression as a NOT VALID check, and each
// index, on a temporary table LIKE the live one and reads them back as the
// server stores them, inside a transaction that is rolled back: nothing
// outlives it, on the server or on a pooled connection. What does not parse
// is left out (the phase that adds it reports the error).
func scratchForms(ctx context.Context, q core.Querier, schemaName, table string, exprs map[string]string, indexes []*schema.Index) (map[string]string, map[string]indexForm, error) {
	names := make([]string, 0, len(exprs))
	for n := range exprs {
		names = append(names, n)
	}
	sort.Strings(names)
	checks, forms := map[string]string{}, map[string]indexForm{}
	err := rolledBack(ctx, q, func(tx core.Querier) error {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("CREATE TEMPORARY TABLE %s (LIKE %s)", scratchTable, pgsql.Qualified(schemaName, table))); err != nil {
			return err
		}
		for i, n := range names {
			add := fmt.Sprintf("ALTER TABLE pg_temp.%s ADD CONSTRAINT c%d CHECK (%s) NOT VALID", scratchTable, i, exprs[n])
			read := fmt.Sprintf(`SELECT pg_get_expr(conbin, conrelid) FROM pg_constraint WHERE conrelid = 'pg_temp.%s'::regclass AND conname = 'c%d'`, scratchTable, i)
			if err := scratchRead(ctx, tx, add, read, func(r *sql.Rows) error {
				var x string
				err := r.Scan(&x)
				checks[n] = x
				return err
			}); err != nil {
				return err
			}
		}
		for i, idx := range indexes {
			add := fmt.Sprintf("CREATE INDEX i%d ON pg_temp.%s %s", i, scratchTable, indexBody(idx))
			read := fmt.Sprintf(`SELECT k.o::int, COALESCE(pg_get_expr(x.indpred, x.indrelid), ''), CASE WHEN k.n = 0 THEN pg_get_indexdef(x.indexrelid, k.o::int, false) ELSE '' END
 FROM pg_index x, unnest(x.indkey::int2[]) WITH ORDINALITY k(n, o) WHERE x.indexrelid = 'pg_temp.i%d'::regclass`, i)
			f := indexForm{exprs: map[int]string{}}
			if err := scratchRead(ctx, tx, add, read, func(r *sql.Rows) error {
				var k int
				var x string
				err := r.Scan(&k, &f.predicate, &x)
				if x != "" {
					f.exprs[k] = x
				}
				return err
			}); err != nil {
				return err
			}
			forms[idx.Name] = f
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("normalize the declared checks and indexes of %s: %w", table, err)
	}
	return checks, forms, nil
}

// scratchRead runs add in a savepoint of tx and, when it succeeds, scan on
// each row of read; an add that fails is rolled back to the savepoint and
// skipped.
func scratchRead(ctx context.Context, tx core.Querier, add, read string, scan func(*sql.Rows) error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT schemastate_form"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, add); err != nil {
		_, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT schemastate_form")
		return err
	}
	rows, err := tx.QueryContext(ctx, read)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// withServerForms is want with each spelled index's predicate and
// expressions as the server prints them (checkFacts.indexes), so the diff
// compares them as Atlas inspects the live ones and the done-checks compare
// them with the catalog's text. want is left as it was.
func withServerForms(want *schema.Table, forms map[string]indexForm) *schema.Table {
	if len(forms) == 0 {
		return want
	}
	t := *want
	t.Indexes = make([]*schema.Index, len(want.Indexes))
	for i, idx := range want.Indexes {
		f, ok := forms[idx.Name]
		if !ok {
			t.Indexes[i] = idx
			continue
		}
		c := *idx
		c.Table = &t
		c.Parts = make([]*schema.IndexPart, len(idx.Parts))
		for j, p := range idx.Parts {
			cp := *p
			if x, ok := f.exprs[j+1]; ok && p.X != nil {
				cp.X = &schema.RawExpr{X: x}
			}
			c.Parts[j] = &cp
		}
		c.Attrs = make([]schema.Attr, len(idx.Attrs))
		for j, a := range idx.Attrs {
			if _, ok := a.(*atlaspg.IndexPredicate); ok && f.predicate != "" {
				a = &atlaspg.IndexPredicate{P: f.predicate}
			}
			c.Attrs[j] = a
		}
		t.Indexes[i] = &c
	}
	return &t
}

// rolledBack runs fn in a transaction it rolls back: one of its own on a
// connection or pool, a savepoint inside a transaction.
func rolledBack(ctx context.Context, q core.Querier, fn func(core.Querier) error) error {
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
