package reconcile

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"ariga.io/atlas/sql/sqlite"

	"github.com/schemastate/schemastate/dialect"
)

// tablePlan is what the shape step would do to one owned table.
type tablePlan struct {
	Table   string
	Live    *schema.Table // nil when the table does not exist yet
	Want    *schema.Table
	Changes []schema.Change
	// Refused names each change that would destroy data; a table with any
	// refused change is left exactly as it is.
	Refused []string
	// Stmts is the plan to execute, in order. For a SQLite rebuild it is the
	// copy-path sequence, which apply runs with its own row-count check.
	Stmts   []string
	Rebuild *rebuild
	// Widen is PostgreSQL only: type widenings, run after the shape step in
	// a transaction of their own (see splitWidenings).
	Widen []string
	// Drift lists the table's undeclared indexes, foreign keys and checks
	// (drift.go): kept, or dropped by Stmts when pruning.
	Drift []Drift
	// Prelude (PostgreSQL) is the constraint renames and NULL fills that
	// precede Atlas's statements in Stmts; Fills the fills alone.
	Prelude, Fills []string
	// Inflight (PostgreSQL) is what an online upgrade stopped between two
	// phases left in the catalog.
	Inflight *inflight
	// Phases is the plan as it is applied (plan.go).
	Phases []Phase
}

// ShapePlan is the dry-run result of the shape step.
type ShapePlan struct {
	tables []*tablePlan
	// MissingHostTables names the host tables the live database lacks (set
	// by Plan). A reconcile refuses to run without them, so none of the
	// statements would run either.
	MissingHostTables []string
}

// TableChanges is one owned table's diff as the shape step planned it.
type TableChanges struct {
	Table string
	// Live is the table as inspected (nil when it does not exist yet);
	// Want as declared.
	Live, Want *schema.Table
	// Changes are Atlas's changes from Live to Want, the undeclared objects
	// kept out of them, before they are split into phases.
	Changes []schema.Change
	// Refused names each change the shape step refuses (Refused).
	Refused []string
}

// Tables lists every owned table's diff, in declaration order: what the
// phases were planned from, for a caller judging a change (schemastate lint).
func (p *ShapePlan) Tables() []TableChanges {
	out := make([]TableChanges, len(p.tables))
	for i, t := range p.tables {
		out[i] = TableChanges{Table: t.Table, Live: t.Live, Want: t.Want, Changes: t.Changes, Refused: t.Refused}
	}
	return out
}

// Statements lists every statement of every phase (Phases), in order.
func (p *ShapePlan) Statements() []string {
	var out []string
	for _, ph := range p.Phases() {
		out = append(out, ph.SQL...)
	}
	return out
}

// Drift lists every undeclared index, foreign key and check on the owned
// tables. The shape step keeps them unless the plan was made WithPrune.
func (p *ShapePlan) Drift() []Drift {
	var out []Drift
	for _, t := range p.tables {
		out = append(out, t.Drift...)
	}
	return out
}

// Refused lists the destructive changes the shape step refuses, each naming
// its table.
func (p *ShapePlan) Refused() []string {
	var out []string
	for _, t := range p.tables {
		out = append(out, t.Refused...)
	}
	return out
}

// inspect reads the live shape of the owned tables only. A table that does
// not exist is simply absent from the result.
func inspect(ctx context.Context, drv migrate.Driver, decl *Declaration, schemaName string) (*schema.Schema, error) {
	names := make([]string, len(decl.Owned))
	for i, t := range decl.Owned {
		names[i] = t.Name
	}
	s, err := drv.InspectSchema(ctx, schemaName, &schema.InspectOptions{Tables: names})
	if schema.IsNotExistError(err) {
		return schema.New(schemaName), nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", strings.Join(names, ", "), err)
	}
	return s, nil
}

// planShape inspects, diffs and plans every owned table. It executes nothing.
// Undeclared indexes, foreign keys and checks are kept unless o.prune is set.
func planShape(ctx context.Context, drv migrate.Driver, d dialect.Dialect, q dialect.Querier, decl *Declaration, schemaName string, o *options) (*ShapePlan, error) {
	live, err := inspect(ctx, drv, decl, schemaName)
	if err != nil {
		return nil, err
	}
	plan := &ShapePlan{}
	for _, want := range decl.Owned {
		tp := &tablePlan{Table: want.Name, Want: want}
		plan.tables = append(plan.tables, tp)
		lt, ok := live.Table(want.Name)
		if !ok {
			tp.Changes = []schema.Change{&schema.AddTable{T: want}}
			if tp.Stmts, err = render(ctx, drv, tp.Changes); err != nil {
				return nil, fmt.Errorf("plan %s: %w", want.Name, err)
			}
			continue
		}
		tp.Live = lt
		normalizeLive(d, lt, want)
		if d == dialect.Postgres {
			if tp.Inflight, err = resumeOnline(ctx, q, schemaName, lt, want); err != nil {
				return nil, err
			}
		}
		replaced, deferrable, err := replaceDeferrableKeys(ctx, d, q, schemaName, lt, want)
		if err != nil {
			return nil, fmt.Errorf("inspect %s: %w", want.Name, err)
		}
		renames := append(replaced, renameEquivalentUniques(d, schemaName, lt, want, deferrable)...)
		changes, err := drv.TableDiff(lt, want)
		if err != nil {
			return nil, fmt.Errorf("diff %s: %w", want.Name, err)
		}
		var kept []schema.Change
		changes, tp.Drift, kept = splitDrift(want.Name, changes, want, o.prune)
		if len(changes) == 0 {
			tp.Stmts, tp.Prelude = renames, renames
			continue
		}
		tp.Changes = changes
		for _, c := range changes {
			if why, bad := destructive(d, c); bad {
				tp.Refused = append(tp.Refused, fmt.Sprintf("%s: %s (%s)", want.Name, why, decl.File))
			}
		}
		if len(tp.Refused) > 0 {
			continue
		}
		if d == dialect.Postgres {
			var widen []schema.Change
			changes, widen = splitWidenings(changes)
			if len(widen) > 0 {
				if tp.Widen, err = render(ctx, drv, []schema.Change{&schema.ModifyTable{T: want, Changes: widen}}); err != nil {
					return nil, fmt.Errorf("plan %s: %w", want.Name, err)
				}
			}
		}
		if d != dialect.SQLite || !needsCopy(changes) {
			if len(changes) > 0 {
				if tp.Stmts, err = render(ctx, drv, []schema.Change{&schema.ModifyTable{T: want, Changes: changes}}); err != nil {
					return nil, fmt.Errorf("plan %s: %w", want.Name, err)
				}
			}
			if d == dialect.Postgres {
				tp.Fills = fillStatements(schemaName, lt, want)
				tp.Prelude = append(append([]string(nil), renames...), tp.Fills...)
				tp.Stmts = append(append([]string(nil), tp.Prelude...), tp.Stmts...)
			}
			// Atlas takes its own copy path for more than needsCopy sees (a new
			// column that an index covers, say). That path drops the table's
			// triggers and skips the row-count and foreign-key checks: never run
			// it, rebuild instead.
			if d != dialect.SQLite || !rendersCopy(tp.Stmts) {
				continue
			}
		}
		if tp.Rebuild, err = planRebuild(ctx, drv, q, lt, want, changes, kept); err != nil {
			return nil, fmt.Errorf("plan rebuild of %s: %w", want.Name, err)
		}
		tp.Stmts = tp.Rebuild.statements()
	}
	for _, tp := range plan.tables {
		if len(tp.Refused) > 0 {
			continue
		}
		if d == dialect.Postgres {
			if err := planPostgres(ctx, drv, q, o, schemaName, tp); err != nil {
				return nil, err
			}
			continue
		}
		tp.Phases = sqlitePhases(tp)
	}
	return plan, nil
}

// fills maps each column the declaration makes NOT NULL with a DEFAULT, and
// that is nullable live, to its default as SQL. A NULL there takes the
// default before the column is tightened — otherwise the tightening fails on
// every boot. For agent_execution_id that is AC-31's sentinel: a NULL carries
// no execution identity, exactly what 'unknown' records (AC-33 clause 5).
func fills(live, want *schema.Table) map[string]string {
	out := map[string]string{}
	for _, wc := range want.Columns {
		lc, ok := live.Column(wc.Name)
		lit, isLit := wc.Default.(*schema.Literal)
		if !ok || !lc.Type.Null || wc.Type.Null || !isLit {
			continue
		}
		v := lit.V
		if _, isString := wc.Type.Type.(*schema.StringType); isString && !strings.HasPrefix(v, "'") {
			v = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		}
		out[wc.Name] = v
	}
	return out
}

// fillStatements are the UPDATEs that apply fills on PostgreSQL, run before
// the ALTER in the same transaction.
func fillStatements(schemaName string, live, want *schema.Table) []string {
	var out []string
	for _, c := range want.Columns {
		if v, ok := fills(live, want)[c.Name]; ok {
			col := dialect.QuoteIdent(c.Name)
			out = append(out, fmt.Sprintf("UPDATE %s.%s SET %s = %s WHERE %s IS NULL",
				dialect.QuoteIdent(schemaName), dialect.QuoteIdent(want.Name), col, v, col))
		}
	}
	return out
}

// render asks Atlas for the SQL of a change set.
func render(ctx context.Context, drv migrate.Driver, changes []schema.Change) ([]string, error) {
	p, err := drv.PlanChanges(ctx, "shape", changes)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(p.Changes))
	for i, c := range p.Changes {
		out[i] = c.Cmd
	}
	return out, nil
}

// Destructive reports whether the shape step refuses c on dialect d because
// it would destroy data, and says why.
func Destructive(d dialect.Dialect, c schema.Change) (why string, refused bool) {
	return destructive(d, c)
}

// destructive reports changes that would destroy data. They are refused at
// boot and reported by name; nothing the declaration merely dropped is ever
// dropped from a live database.
func destructive(d dialect.Dialect, c schema.Change) (string, bool) {
	switch c := c.(type) {
	case *schema.DropTable:
		return "would drop table " + c.T.Name, true
	case *schema.DropColumn:
		return "would drop column " + c.C.Name, true
	case *schema.ModifyColumn:
		if c.Change.Is(schema.ChangeType) && !widens(c.From.Type.Type, c.To.Type.Type) {
			return fmt.Sprintf("would change column %s from %s to %s", c.From.Name, TypeName(d, c.From.Type.Type), TypeName(d, c.To.Type.Type)), true
		}
	}
	return "", false
}

// widens reports a type change every stored value survives unchanged.
func widens(from, to schema.Type) bool {
	rank := func(t schema.Type) int {
		it, ok := t.(*schema.IntegerType)
		if !ok {
			return 0
		}
		switch strings.ToLower(it.T) {
		case "smallint", "int2":
			return 1
		case "integer", "int", "int4":
			return 2
		case "bigint", "int8":
			return 3
		}
		return 0
	}
	if rf, rt := rank(from), rank(to); rf > 0 && rt > 0 {
		return rt >= rf
	}
	// timestamp(3) → timestamp: the same kind at no less precision keeps
	// every stored value (an unset precision is PostgreSQL's maximum, 6).
	if ft, ok := from.(*schema.TimeType); ok {
		tt, ok := to.(*schema.TimeType)
		return ok && timeKind(ft.T) == timeKind(tt.T) && timePrecision(tt) >= timePrecision(ft)
	}
	if st, ok := to.(*schema.StringType); ok && strings.EqualFold(st.T, "text") {
		_, fromString := from.(*schema.StringType)
		return fromString
	}
	return false
}

func timeKind(t string) string {
	switch t = strings.ToLower(t); t {
	case "timestamp without time zone":
		return "timestamp"
	case "timestamp with time zone":
		return "timestamptz"
	}
	return t
}

func timePrecision(t *schema.TimeType) int {
	if t.Precision == nil {
		return 6
	}
	return *t.Precision
}

// TypeName spells a type as the dialect's SQL does (timestamp(3), timestamptz).
func TypeName(d dialect.Dialect, t schema.Type) string {
	format := sqlite.FormatType
	if d == dialect.Postgres {
		format = postgres.FormatType
	}
	if s, err := format(t); err == nil {
		return s
	}
	return fmt.Sprintf("%T", t)
}

// IndexSet describes a table's indexes as sorted "name unique(cols)" lines,
// for comparing a migrated database with a fresh one (AC-33 clause 4). The
// primary key is not an index here; unique constraints are.
func IndexSet(t *schema.Table) []string {
	if t == nil {
		return nil
	}
	var out []string
	for _, idx := range t.Indexes {
		kind := "index"
		if idx.Unique {
			kind = "unique"
		}
		out = append(out, fmt.Sprintf("%s %s(%s)", idx.Name, kind, strings.Join(partNames(idx), ", ")))
	}
	sort.Strings(out)
	return out
}

// splitWidenings separates, on PostgreSQL, the changes that only widen a
// column's type (integer → bigint, timestamp(3) → timestamp) from the rest.
// A widening rewrites the table and fails while a view reads the column; it
// is not part of AC-33's end state, so it must not hold the key change back:
// the shape step applies the rest (the constraint swap stays all-or-nothing,
// AC-33a) and the widen step applies the widenings in a transaction of their
// own, failing — named, rolled back, retried next boot — without costing the
// installation its execution identity.
func splitWidenings(changes []schema.Change) (rest, widen []schema.Change) {
	for _, c := range changes {
		if m, ok := c.(*schema.ModifyColumn); ok && m.Change == schema.ChangeType && widens(m.From.Type.Type, m.To.Type.Type) {
			widen = append(widen, c)
			continue
		}
		rest = append(rest, c)
	}
	return rest, widen
}
