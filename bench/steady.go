package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/keys"
	"github.com/schemastate/schemastate/reconcile"
)

// steady measures a boot on a store already in shape — Reconcile with
// nothing to change — against the bare catalog queries that establish the
// same facts: the owned tables' columns, indexes and foreign keys, the host
// tables' presence, and the three keys. It also checks that the boot ran no
// DDL: no step executed a statement, and the schema's catalog fingerprint
// (SQLite schema_version; PostgreSQL the pg_class rows of the schema) did
// not move.
func (b *bench) steady(ctx context.Context, rep *Report) error {
	if r, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet)); err != nil {
		return err
	} else if r.Keys.ExecutionSince == nil {
		return fmt.Errorf("%w: the store is not activated before the steady-state runs", errUnexpected)
	}
	name, err := currentSchema(ctx, b)
	if err != nil {
		return err
	}
	decl, err := reconcile.LoadDeclaration("", b.d, name)
	if err != nil {
		return err
	}
	var owned []string
	for _, t := range decl.Owned {
		owned = append(owned, t.Name)
	}
	before, err := b.fingerprint(ctx)
	if err != nil {
		return err
	}
	var ddl int
	var steps []map[string]time.Duration
	m, err := b.measure(SteadyState, "catalog queries for the owned tables (columns, indexes, foreign keys), host tables present, the three keys", 2,
		func(int) (time.Duration, error) {
			t0 := time.Now()
			r, err := reconcile.Reconcile(ctx, b.db, reconcile.WithLogger(b.quiet))
			el := time.Since(t0)
			if err != nil {
				return 0, err
			}
			per := map[string]time.Duration{}
			var inSteps time.Duration
			for _, s := range r.Steps {
				ddl += s.Statements
				per[s.Name] = s.Duration
				inSteps += s.Duration
			}
			per["outside steps"] = el - inSteps
			steps = append(steps, per)
			return el, nil
		},
		func(int) (time.Duration, error) { return b.catalogFloor(ctx, owned, decl.HostTables()) })
	if err != nil {
		return err
	}
	after, err := b.fingerprint(ctx)
	if err != nil {
		return err
	}
	zero := ddl == 0 && before == after
	met := m.Met != nil && *m.Met && zero
	m.Met = &met
	m.ZeroDDL = &zero
	var parts []string
	for _, n := range []string{reconcile.StepLock, reconcile.StepHostTables, reconcile.StepShape, reconcile.StepExecutionSince, reconcile.StepBackfill, "outside steps"} {
		var ds []time.Duration
		for _, s := range steps {
			ds = append(ds, s[n])
		}
		parts = append(parts, fmt.Sprintf("%s %s", n, median(ds).Round(time.Microsecond)))
	}
	m.Detail = fmt.Sprintf("zero DDL: %v (%d statements, catalog fingerprint unchanged: %v); step medians (outside steps: loading the declaration, the host-table check, the final commit and key read): %s",
		zero, ddl, before == after, strings.Join(parts, ", "))
	rep.Measurements = append(rep.Measurements, m)
	return nil
}

func currentSchema(ctx context.Context, b *bench) (string, error) {
	if b.d == dialect.SQLite {
		return "main", nil
	}
	var s string
	err := b.db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&s)
	return s, err
}

func (b *bench) fingerprint(ctx context.Context) (string, error) {
	q := "PRAGMA schema_version"
	if b.d == dialect.Postgres {
		q = `SELECT string_agg(c.oid::text || ':' || c.xmin::text, ',' ORDER BY c.oid)
FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace`
	}
	var s string
	err := b.db.QueryRowContext(ctx, q).Scan(&s)
	return s, err
}

// catalogFloor runs the catalog queries a boot needs to know there is
// nothing to do, reading every row, on one connection.
func (b *bench) catalogFloor(ctx context.Context, owned, host []string) (time.Duration, error) {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	drain := func(q string, args ...any) ([]string, error) {
		rows, err := conn.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var first []string
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(any)
		}
		for rows.Next() {
			if err := rows.Scan(vals...); err != nil {
				return nil, err
			}
			first = append(first, fmt.Sprint(*(vals[0].(*any))))
		}
		return first, rows.Err()
	}
	t0 := time.Now()
	if b.d == dialect.SQLite {
		if _, err := drain(`SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (`+placeholders(len(host))+`)`, anys(host)...); err != nil {
			return 0, err
		}
		for _, t := range owned {
			for _, q := range []string{`SELECT type, name, sql FROM sqlite_master WHERE tbl_name = ?`, `SELECT * FROM pragma_table_info(?)`, `SELECT * FROM pragma_foreign_key_list(?)`} {
				if _, err := drain(q, t); err != nil {
					return 0, err
				}
			}
			idx, err := drain(`SELECT name FROM pragma_index_list(?)`, t)
			if err != nil {
				return 0, err
			}
			for _, i := range idx {
				if _, err := drain(`SELECT * FROM pragma_index_info(?)`, i); err != nil {
					return 0, err
				}
			}
		}
	} else {
		for _, t := range host {
			if _, err := drain(`SELECT to_regclass($1) IS NOT NULL`, t); err != nil {
				return 0, err
			}
		}
		for _, t := range owned {
			for _, q := range []string{
				`SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid)
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
				`SELECT i.indexrelid::regclass::text, i.indisunique, pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid = to_regclass($1)`,
				`SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = to_regclass($1)`,
			} {
				if _, err := drain(q, t); err != nil {
					return 0, err
				}
			}
		}
	}
	if _, err := keys.Read(ctx, conn, b.d); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
