// Package coretest is the planning rules' test harness, shared by each
// dialect's planner tests: a live and a declared table in, phases out, with
// no database. A dialect's PlanTable is pure: what the live catalog says
// beyond Atlas's inspection arrives as facts, and Atlas's diff and
// rendering are the dialect's DefaultDiff and DefaultPlan. Tests only.
package coretest

import (
	"testing"

	"ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// Atlas is a dialect's database-free diff and rendering (its DefaultDiff
// and DefaultPlan).
type Atlas struct {
	schema.Differ
	migrate.PlanApplier
}

// PlanCase is one table's planning: Live makes the live table (nil for
// none) and Want the declared one, afresh for each run, as planning edits
// the live one.
type PlanCase struct {
	Name        string
	Live        func() *schema.Table
	Want        func() *schema.Table
	Facts       core.Facts
	OnlineAbove int64
	Check       func(t *testing.T, tp *core.TablePlan)
}

// RunPlanCases plans each case with drv over atlas and runs its Check.
func RunPlanCases(t *testing.T, drv core.Driver, atlas Atlas, cases []PlanCase) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			want := c.Want()
			tp := &core.TablePlan{Table: want.Name, Want: want}
			if c.Live != nil {
				tp.Live = c.Live()
			}
			pc := &core.PlanContext{Atlas: atlas, Schema: want.Schema.Name, File: "test.hcl", Driver: drv, OnlineAbove: c.OnlineAbove}
			require.NoError(t, drv.PlanTable(pc, tp, c.Facts))
			c.Check(t, tp)
		})
	}
}

// PhaseNames are tp's phases as step:name.
func PhaseNames(tp *core.TablePlan) []string {
	var out []string
	for _, ph := range tp.Phases {
		out = append(out, ph.Step+":"+ph.Name)
	}
	return out
}

// GuardKinds are ph's guards' kinds, in order.
func GuardKinds(ph ops.Phase) []ops.GuardKind {
	var out []ops.GuardKind
	for _, g := range ph.Guards {
		out = append(out, g.Kind)
	}
	return out
}

// SQLiteTable is a SQLite table t: id text primary key, a NOT NULL, b
// nullable, unique (a, b); more adds to it. Each call of the returned
// function builds it afresh.
func SQLiteTable(more func(t *schema.Table)) func() *schema.Table {
	return func() *schema.Table {
		id, a, b := schema.NewStringColumn("id", "text"), schema.NewStringColumn("a", "text"), schema.NewNullStringColumn("b", "text")
		t := schema.NewTable("t").AddColumns(id, a, b).SetPrimaryKey(schema.NewPrimaryKey(id))
		t.AddIndexes(schema.NewUniqueIndex("t_a_b").AddColumns(a, b))
		schema.New("main").AddTables(t)
		if more != nil {
			more(t)
		}
		return t
	}
}

// Column is t's column of the name (nil when there is none).
func Column(t *schema.Table, name string) *schema.Column {
	c, _ := t.Column(name)
	return c
}
