package lint

import (
	"context"
	"fmt"
	"strings"

	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/describe"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile"
)

// StoreState names the run of the real store --db names: its plan as the
// reconcile will make it there (the path its size chooses, and so each
// phase's lock), and how many of its rows would break each constraint the
// declaration adds.
const StoreState = "the --db store"

// CodeBreakingRows: refused — rows of the real store break a NOT NULL, a
// check, a foreign key or a unique key the declaration adds; the boot's shape
// step fails on them, adding nothing, until they are corrected.
const CodeBreakingRows = "rows-break-constraint"

// planStore plans the declaration on the real store (read-only) and counts
// the rows that would break what it adds.
func planStore(ctx context.Context, real *target, newFile string, extra []reconcile.Option) (Run, error) {
	d := real.t.Dialect
	p, err := reconcile.Plan(ctx, real.db, PlanOptions(d, newFile, extra)...)
	if err != nil {
		return Run{}, fmt.Errorf("%w: plan the --db store: %w", ErrEvaluate, err)
	}
	run := Run{Dialect: d, State: StoreState, Phases: []Phase{}, Refused: nonNil(p.Refused()), Drift: p.Drift(), Hazards: []Hazard{}}
	if run.Drift == nil {
		run.Drift = []reconcile.Drift{}
	}
	for _, ph := range p.Phases() {
		run.Phases = append(run.Phases, Phase{Phase: ph, Cost: cost(ph)})
	}
	run.Hazards = append(run.Hazards, planHazards(d, StoreState, p.Tables(), p.Phases())...)
	for i, h := range run.Hazards {
		if h.copiesRows {
			run.Hazards[i].Rows = real.rows(ctx, h.Table)
		}
	}
	for _, tc := range p.Tables() {
		if tc.Live == nil || len(tc.Refused) > 0 {
			continue
		}
		for _, b := range breakers(tc) {
			var n int64
			if err := real.db.QueryRowContext(ctx, b.count).Scan(&n); err != nil {
				return Run{}, fmt.Errorf("%w: count the rows of %s that break %s: %w", ErrEvaluate, tc.Table, b.what, err)
			}
			if n == 0 {
				continue
			}
			run.Hazards = append(run.Hazards, Hazard{Code: CodeBreakingRows, Level: LevelRefused, Dialect: d, State: StoreState,
				Table: tc.Table, Column: b.column, Index: b.index, Rows: &n,
				Detail: fmt.Sprintf("%d rows of %s break %s: the boot's shape step fails on them, adding nothing, every boot until they are corrected", n, tc.Table, b.what),
				Advice: "correct or delete those rows in the host first, or relax the declaration"})
		}
	}
	return run, nil
}

// breaker is one constraint a change adds and the query counting the rows
// that break it (standard SQL, read-only, on either dialect).
type breaker struct {
	what, column, index, count string
}

// breakers lists the constraints tc's changes add: a column made NOT NULL
// with no DEFAULT to fill it, a check, a foreign key, a unique key.
func breakers(tc ops.TableChanges) []breaker {
	t := dialect.QuoteIdent(tc.Table)
	where := func(cond string) string { return fmt.Sprintf("SELECT count(*) FROM %s t WHERE %s", t, cond) }
	var out []breaker
	for _, c := range tc.Changes {
		switch c := c.(type) {
		case *schema.ModifyColumn:
			if c.Change.Is(schema.ChangeNull) && !c.To.Type.Null && c.To.Default == nil {
				out = append(out, breaker{what: "NOT NULL of " + c.To.Name, column: c.To.Name, count: where(dialect.QuoteIdent(c.To.Name) + " IS NULL")})
			}
		case *schema.AddCheck:
			out = append(out, breaker{what: "check " + c.C.Name, count: where("NOT (" + c.C.Expr + ")")})
		case *schema.ModifyCheck:
			out = append(out, breaker{what: "check " + c.To.Name, count: where("NOT (" + c.To.Expr + ")")})
		case *schema.AddForeignKey:
			out = append(out, fkBreaker(t, c.F))
		case *schema.ModifyForeignKey:
			out = append(out, fkBreaker(t, c.To))
		case *schema.AddIndex:
			if b, ok := uniqueBreaker(t, c.I); ok {
				out = append(out, b)
			}
		}
	}
	return out
}

// fkBreaker counts the orphans of a foreign key (MATCH SIMPLE: a row with a
// NULL in any of its columns is not checked).
func fkBreaker(t string, fk *schema.ForeignKey) breaker {
	if fk.RefTable == nil || len(fk.Columns) != len(fk.RefColumns) {
		return breaker{what: "foreign key " + fk.Symbol, count: "SELECT 0"}
	}
	var present, match []string
	for i, c := range fk.Columns {
		present = append(present, "t."+dialect.QuoteIdent(c.Name)+" IS NOT NULL")
		match = append(match, "r."+dialect.QuoteIdent(fk.RefColumns[i].Name)+" = t."+dialect.QuoteIdent(c.Name))
	}
	return breaker{what: "foreign key " + fk.Symbol, count: fmt.Sprintf("SELECT count(*) FROM %s t WHERE %s AND NOT EXISTS (SELECT 1 FROM %s r WHERE %s)",
		t, strings.Join(present, " AND "), dialect.QuoteIdent(fk.RefTable.Name), strings.Join(match, " AND "))}
}

// uniqueBreaker counts the groups of rows a new unique index would reject,
// with the index's own NULL semantics: a unique index admits any number of
// rows with a NULL in one of its columns (both dialects' default), unless
// PostgreSQL's NULLS NOT DISTINCT says otherwise, and a partial index
// constrains only the rows its predicate holds for. An index over an
// expression is not counted (ok is false).
func uniqueBreaker(t string, idx *schema.Index) (breaker, bool) {
	if !idx.Unique {
		return breaker{}, false
	}
	var cols, present []string
	for _, p := range idx.Parts {
		if p.C == nil {
			return breaker{}, false
		}
		cols = append(cols, dialect.QuoteIdent(p.C.Name))
		present = append(present, dialect.QuoteIdent(p.C.Name)+" IS NOT NULL")
	}
	if len(cols) == 0 {
		return breaker{}, false
	}
	var where []string
	if nullsDistinct(idx) {
		where = present
	}
	if pred := describe.Index(idx).Predicate; pred != "" {
		where = append(where, "("+pred+")")
	}
	filter := ""
	if len(where) > 0 {
		filter = " WHERE " + strings.Join(where, " AND ")
	}
	return breaker{what: "unique " + idx.Name, index: idx.Name,
		count: fmt.Sprintf("SELECT count(*) FROM (SELECT 1 FROM %s%s GROUP BY %s HAVING count(*) > 1) d", t, filter, strings.Join(cols, ", "))}, true
}

// nullsDistinct reports whether idx treats NULLs as distinct: always on
// SQLite, and on PostgreSQL unless it is declared NULLS NOT DISTINCT.
func nullsDistinct(idx *schema.Index) bool {
	for _, a := range idx.Attrs {
		if nd, ok := a.(*postgres.IndexNullsDistinct); ok {
			return nd.V
		}
	}
	return true
}
