package reconcile

import (
	"context"
	"fmt"
	"strings"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"

	"github.com/schemastate/schemastate/internal/contract"
	"github.com/schemastate/schemastate/internal/declare"
	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// ShapePlan is the dry-run result of the shape step.
type ShapePlan struct {
	tables []*core.TablePlan
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
func inspect(ctx context.Context, drv migrate.Driver, decl *declare.Declaration, schemaName string, only ...string) (*schema.Schema, error) {
	names := only
	if len(names) == 0 {
		names = make([]string, len(decl.Owned))
		for i, t := range decl.Owned {
			names[i] = t.Name
		}
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

// inspectLive opens Atlas's driver over q and inspects the owned tables, or
// only the ones named.
func inspectLive(ctx context.Context, drv core.Driver, q core.Querier, decl *declare.Declaration, schemaName string, only ...string) (migrate.Driver, *schema.Schema, error) {
	ad, err := drv.Atlas(q)
	if err != nil {
		return nil, nil, err
	}
	live, err := inspect(ctx, ad, decl, schemaName, only...)
	return ad, live, err
}

// planShape inspects, diffs and plans every owned table. It executes nothing.
// Undeclared indexes, foreign keys and checks are kept unless o.prune is set.
func planShape(ctx context.Context, drv core.Driver, q core.Querier, decl *declare.Declaration, schemaName string, o *options) (*ShapePlan, error) {
	ad, live, err := inspectLive(ctx, drv, q, decl, schemaName)
	if err != nil {
		return nil, err
	}
	pc := &core.PlanContext{Atlas: ad, Schema: schemaName, File: decl.File, Prune: o.prune, OnlineAbove: o.onlineAbove, Driver: drv}
	plan := &ShapePlan{}
	for _, want := range decl.Owned {
		tp := &core.TablePlan{Table: want.Name, Want: want}
		plan.tables = append(plan.tables, tp)
		var f core.Facts
		if lt, ok := live.Table(want.Name); ok {
			tp.Live = lt
			if f, err = drv.Facts(ctx, q, schemaName, lt, want); err != nil {
				return nil, fmt.Errorf("inspect %s: %w", want.Name, err)
			}
		}
		if err := drv.PlanTable(pc, tp, f); err != nil {
			return nil, err
		}
		core.NameTwins(tp)
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
