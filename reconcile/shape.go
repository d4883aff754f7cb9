package reconcile

import (
	"context"
	"fmt"
	"strings"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/dialect"
	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/ident"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/internal/typechange"
)

// tablePlan is what the shape step would do to one owned table.
type tablePlan struct {
	Table string
	Live  *schema.Table // nil when the table does not exist yet
	Want  *schema.Table
	// Changes are Atlas's changes from Live to Want, drift kept out.
	Changes []schema.Change
	// Refused names each change that would destroy data; a table with any
	// refused change is left exactly as it is.
	Refused []string
	// Drift lists the table's undeclared indexes, foreign keys and checks
	// (drift.go): kept, or dropped by the phases when pruning.
	Drift []Drift
	// Inflight (PostgreSQL) is what an online upgrade stopped between two
	// phases left in the catalog.
	Inflight *inflight
	// Phases is the plan as it is applied (plan.go, apply.go).
	Phases []ops.Phase
	// twins, when set, adds to Atlas's diff the changes it misses under a
	// declared name (PostgreSQL's checkTwins and fkTwins); unset, a check's
	// expression is compared as SQLite stores it (sameCheckText).
	twins func(changes []schema.Change) []schema.Change
}

// ShapePlan is the dry-run result of the shape step.
type ShapePlan struct {
	tables []*tablePlan
	// writerBreaks are what in the declaration this release's writers'
	// rows would break (internal/contract): the shape step applies nothing
	// while there is one, unless WithAllowWriterBreak.
	writerBreaks []string
	// MissingHostTables names the host tables the live database lacks (set
	// by Plan). A reconcile refuses to run without them, so none of the
	// statements would run either.
	MissingHostTables []string
}

// Tables lists every owned table's diff, in declaration order: what the
// phases were planned from, for a caller judging a change (schemastate lint).
func (p *ShapePlan) Tables() []ops.TableChanges {
	out := make([]ops.TableChanges, len(p.tables))
	for i, t := range p.tables {
		out[i] = ops.TableChanges{Table: t.Table, Live: t.Live, Want: t.Want, Changes: t.Changes, Refused: t.Refused}
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

// WriterBreaks lists what in the declaration this release's writers could
// not write (writers.json): each names the writer, the table, the column or
// constraint and the rows (frames) that would fail.
func (p *ShapePlan) WriterBreaks() []string { return p.writerBreaks }

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
func inspect(ctx context.Context, drv migrate.Driver, decl *declare.Declaration, schemaName string) (*schema.Schema, error) {
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

// inspectLive opens Atlas's driver over q and inspects the owned tables.
func inspectLive(ctx context.Context, drv driver, q querier, decl *declare.Declaration, schemaName string) (migrate.Driver, *schema.Schema, error) {
	ad, err := drv.atlas(q)
	if err != nil {
		return nil, nil, err
	}
	live, err := inspect(ctx, ad, decl, schemaName)
	return ad, live, err
}

// atlasPlanner is what planning asks of Atlas: the diff and its SQL. Both
// are computations (a migrate.Driver over the live connection in a
// reconcile, Atlas's DefaultDiff and DefaultPlan in the planning tests).
type atlasPlanner interface {
	schema.Differ
	migrate.PlanApplier
}

// planContext is what planning one call's tables shares; it lives for one
// planShape call.
type planContext struct {
	atlas       atlasPlanner
	schema      string
	file        string // the declaration's, for refusals
	prune       bool
	onlineAbove int64
	dialect     dialect.Dialect
}

// render is the SQL of a change set: Atlas's, for changes whose every name
// is plain (ident.go), after the drops of names that are not, which the
// module quotes itself. Any other name that is not plain is refused by name
// and nothing is rendered.
func (pc *planContext) render(changes ...schema.Change) ([]string, error) {
	out, changes, err := pc.quotedDrops(changes)
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		if err := ident.AtlasNames(c, ident.RequirePlain); err != nil {
			return nil, err
		}
	}
	if len(changes) == 0 {
		return out, nil
	}
	p, err := pc.atlas.PlanChanges(context.Background(), "shape", changes)
	if err != nil {
		return nil, err
	}
	for _, c := range p.Changes {
		out = append(out, c.Cmd)
	}
	return out, nil
}

// diff is one existing table's changes, after the driver normalized the
// live table: the drift split off (kept unless pruning; kept are the drops
// a rebuild must undo) and the destructive changes refused by name.
func (pc *planContext) diff(tp *tablePlan) (changes, kept []schema.Change, err error) {
	changes, err = pc.atlas.TableDiff(tp.Live, tp.Want)
	if err != nil {
		return nil, nil, fmt.Errorf("diff %s: %w", tp.Table, err)
	}
	// Atlas pairs checks by name and compares nothing else of them: a
	// declared name holding another expression is a change too.
	if tp.twins != nil {
		changes = tp.twins(changes)
	} else if tp.Live != nil {
		changes = checkTwins(tp.Live, tp.Want, sameCheckText, changes)
	}
	changes, tp.Drift, kept = splitDrift(tp.Table, changes, tp.Want, pc.prune)
	tp.Changes = changes
	for _, c := range changes {
		if why, bad := typechange.Destructive(pc.dialect, c); bad {
			tp.Refused = append(tp.Refused, fmt.Sprintf("%s: %s (%s)", tp.Table, why, pc.file))
		}
	}
	return changes, kept, nil
}

// planShape inspects, diffs and plans every owned table. It executes nothing.
// Undeclared indexes, foreign keys and checks are kept unless o.prune is set.
func planShape(ctx context.Context, drv driver, q querier, decl *declare.Declaration, schemaName string, o *options) (*ShapePlan, error) {
	ad, live, err := inspectLive(ctx, drv, q, decl, schemaName)
	if err != nil {
		return nil, err
	}
	pc := &planContext{atlas: ad, schema: schemaName, file: decl.File, prune: o.prune, onlineAbove: o.onlineAbove, dialect: drv.dialect()}
	plan := &ShapePlan{}
	for _, want := range decl.Owned {
		tp := &tablePlan{Table: want.Name, Want: want}
		plan.tables = append(plan.tables, tp)
		var f tableFacts
		if lt, ok := live.Table(want.Name); ok {
			tp.Live = lt
			if f, err = drv.facts(ctx, q, schemaName, lt, want); err != nil {
				return nil, fmt.Errorf("inspect %s: %w", want.Name, err)
			}
		}
		if err := drv.planTable(pc, tp, f); err != nil {
			return nil, err
		}
		nameTwins(tp)
	}
	if plan.writerBreaks, err = writerBreaks(decl); err != nil {
		return nil, err
	}
	return plan, nil
}

// writerBreaks judges the declared tables against what this release's
// writers write (writers.json): the refused findings, each as one line.
func writerBreaks(decl *declare.Declaration) ([]string, error) {
	c, err := contract.Builtin()
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range c.Writers {
		w := &c.Writers[i]
		for _, f := range contract.Refused(contract.Judge(w, contract.Table{T: decl.Table(w.Table)})) {
			out = append(out, "writer "+f.Writer+": "+f.String())
		}
	}
	return out, nil
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
		if m, ok := c.(*schema.ModifyColumn); ok && m.Change == schema.ChangeType && typechange.Widens(m.From.Type.Type, m.To.Type.Type) {
			widen = append(widen, c)
			continue
		}
		rest = append(rest, c)
	}
	return rest, widen
}
