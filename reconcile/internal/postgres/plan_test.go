package postgres

import (
	"context"
	"github.com/schemastate/schemastate/internal/declare"
	"testing"

	"ariga.io/atlas/sql/migrate"
	atlaspg "ariga.io/atlas/sql/postgres"
	"ariga.io/atlas/sql/schema"
	"github.com/stretchr/testify/require"

	"github.com/schemastate/schemastate/internal/ops"
	"github.com/schemastate/schemastate/reconcile/internal/core"
)

// The planning rules, with no database: a live and a declared table in,
// phases out. PlanTable is pure: what the live catalog says beyond Atlas's
// inspection arrives as tableFacts, and Atlas's diff and rendering are its
// DefaultDiff and DefaultPlan.

// differPlanner is Atlas's database-free diff and rendering.
type differPlanner struct {
	schema.Differ
	migrate.PlanApplier
}

var ctx = context.Background()

// planTableCase is one table's planning: build makes the live table (nil
// for none) and the declared one afresh, as planning edits the live one.
type planTableCase struct {
	name        string
	live        func() *schema.Table
	want        func() *schema.Table
	facts       core.Facts
	onlineAbove int64
	check       func(t *testing.T, tp *core.TablePlan)
}

func runPlanCases(t *testing.T, drv core.Driver, cases []planTableCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := c.want()
			tp := &core.TablePlan{Table: want.Name, Want: want}
			if c.live != nil {
				tp.Live = c.live()
			}
			pc := &core.PlanContext{Atlas: differPlanner{atlaspg.DefaultDiff, atlaspg.DefaultPlan}, Schema: want.Schema.Name, File: "test.hcl", Driver: drv, OnlineAbove: c.onlineAbove}
			require.NoError(t, drv.PlanTable(pc, tp, c.facts))
			c.check(t, tp)
		})
	}
}

func phaseNames(tp *core.TablePlan) []string {
	var out []string
	for _, ph := range tp.Phases {
		out = append(out, ph.Step+":"+ph.Name)
	}
	return out
}

func guardKinds(ph ops.Phase) []ops.GuardKind {
	var out []ops.GuardKind
	for _, g := range ph.Guards {
		out = append(out, g.Kind)
	}
	return out
}

func pgT(key string, keyCols []string, more func(t *schema.Table)) func() *schema.Table {
	return func() *schema.Table {
		id := schema.NewStringColumn("id", "text")
		t := schema.NewTable("t").AddColumns(id, schema.NewStringColumn("a", "text"), schema.NewStringColumn("b", "text")).SetPrimaryKey(schema.NewPrimaryKey(id))
		schema.New("public").AddTables(t)
		if more != nil {
			more(t)
		}
		if key != "" {
			idx := schema.NewUniqueIndex(key)
			for _, c := range keyCols {
				idx.AddColumns(column(t, c))
			}
			t.AddIndexes(idx)
		}
		declare.UniqueConstraints(t)
		return t
	}
}

func TestPlanTable_Postgres(t *testing.T) {
	withC := func(t *schema.Table) {
		t.AddColumns(schema.NewStringColumn("c", "text").SetDefault(&schema.Literal{V: "'unknown'"}))
	}
	legacy := pgT("t_a_b_key", []string{"a", "b"}, nil)
	declared := pgT("t_a_c_b_key", []string{"a", "c", "b"}, withC)
	size := tableSize{bytes: 1 << 20, rows: 1000, version: 160000}
	// What a boot stopped before swap_key leaves: the column, and the key's
	// index built as a plain unique index, not yet the constraint.
	builtNotKey := func() *schema.Table {
		t := pgT("", nil, withC)()
		t.AddIndexes(schema.NewUniqueIndex("t_a_c_b_key").AddColumns(column(t, "a"), column(t, "c"), column(t, "b")))
		return t
	}
	runPlanCases(t, Driver{}, []planTableCase{
		{name: "a table under the threshold changes in one transaction", live: legacy, want: declared, facts: tableFacts{size: size}, onlineAbove: 1 << 30,
			check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"shape:alter"}, phaseNames(tp))
				require.Equal(t, ops.LockRewrite, tp.Phases[0].Lock)
				require.Contains(t, tp.Phases[0].Detail, "under the online threshold")
			}},
		{name: "a table at the threshold builds the key concurrently and swaps it", live: legacy, want: declared, facts: tableFacts{size: size},
			check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"shape:alter", "shape:build_index", "shape:swap_key"}, phaseNames(tp))
				alter, build, swap := tp.Phases[0], tp.Phases[1], tp.Phases[2]
				require.Equal(t, ops.LockCatalog, alter.Lock, "a constant default is catalog-only")
				require.False(t, build.Transactional)
				require.Equal(t, []string{"a", "c", "b"}, build.Key)
				require.Equal(t, []string{`CREATE UNIQUE INDEX CONCURRENTLY "t_a_c_b_key" ON "public"."t" ("a", "c", "b")`}, build.SQL)
				require.NotEmpty(t, build.DoneWhen)
				require.Equal(t, []string{`ALTER TABLE "public"."t" DROP CONSTRAINT "t_a_b_key", ADD CONSTRAINT "t_a_c_b_key" UNIQUE USING INDEX "t_a_c_b_key"`}, swap.SQL)
			}},
		{name: "the declared key under another name is renamed, catalog-only", live: pgT("t_auto_key", []string{"a", "c", "b"}, withC), want: declared, facts: tableFacts{size: size},
			check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"shape:alter"}, phaseNames(tp))
				require.Equal(t, []string{`ALTER TABLE "public"."t" RENAME CONSTRAINT "t_auto_key" TO "t_a_c_b_key"`}, tp.Phases[0].SQL)
				require.Equal(t, ops.LockCatalog, tp.Phases[0].Lock)
			}},
		{name: "a deferrable declared key is dropped and built again", live: pgT("t_a_c_b_key", []string{"a", "c", "b"}, withC), want: declared,
			facts: tableFacts{size: size, deferrable: map[string]bool{"t_a_c_b_key": true}},
			check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"shape:alter", "shape:build_index", "shape:swap_key"}, phaseNames(tp))
				require.Equal(t, []string{`ALTER TABLE "public"."t" DROP CONSTRAINT "t_a_c_b_key"`}, tp.Phases[0].SQL)
				require.Equal(t, ops.LockRewrite, tp.Phases[0].Lock, "dropping the key is not the rename")
			}},
		{name: "a NULL tightened to its default is filled in batches, then SET NOT NULL through a validated check", live: pgT("t_a_c_b_key", []string{"a", "c", "b"}, func(t *schema.Table) {
			t.AddColumns(schema.NewNullStringColumn("c", "text").SetDefault(&schema.Literal{V: "'unknown'"}))
		}), want: declared, facts: tableFacts{size: size},
			check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"shape:fill", "shape:check_rows", "shape:add_not_valid", "shape:validate", "shape:set_not_null"}, phaseNames(tp))
				require.Equal(t, `UPDATE "public"."t" SET "c" = DEFAULT WHERE ctid >= $1::text::tid AND ctid < $2::text::tid AND "c" IS NULL`, tp.Phases[0].SQL[0])
				require.Equal(t, []ops.Kind{ops.KindBatched, ops.KindCheckRows, ops.KindStatements, ops.KindOwnTx, ops.KindStatements}, []ops.Kind{tp.Phases[0].Kind, tp.Phases[1].Kind, tp.Phases[2].Kind, tp.Phases[3].Kind, tp.Phases[4].Kind})
				require.Equal(t, []ops.LockClass{ops.LockRows, ops.LockNone, ops.LockCatalog, ops.LockShareUpdateExclusive, ops.LockCatalog}, []ops.LockClass{tp.Phases[0].Lock, tp.Phases[1].Lock, tp.Phases[2].Lock, tp.Phases[3].Lock, tp.Phases[4].Lock})
				require.Equal(t, []string{`ALTER TABLE "public"."t" ALTER COLUMN "c" SET NOT NULL`, `ALTER TABLE "public"."t" DROP CONSTRAINT IF EXISTS "schemastate_nn_c"`}, tp.Phases[4].SQL)
			}},
		{name: "an index built but not yet the key resumes online whatever the size", live: builtNotKey, want: declared, facts: tableFacts{size: tableSize{bytes: 8 << 10, version: 160000}}, onlineAbove: 1 << 30,
			check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"index t_a_c_b_key built, not yet the key"}, tp.Resumed)
				require.Equal(t, []string{"shape:build_index", "shape:swap_key"}, phaseNames(tp))
				require.Contains(t, tp.Phases[0].Detail, "resuming an online upgrade")
			}},
		{name: "an INVALID build is dropped before it is built again", live: builtNotKey, want: declared, facts: tableFacts{size: size, invalid: []string{"t_a_c_b_key", "t_operator_idx"}},
			check: func(t *testing.T, tp *core.TablePlan) {
				require.Equal(t, []string{"INVALID index t_a_c_b_key (dropped and rebuilt)"}, tp.Resumed, "an undeclared INVALID index is not ours")
				require.Equal(t, []string{"shape:build_index", "shape:swap_key"}, phaseNames(tp))
				require.Equal(t, `DROP INDEX CONCURRENTLY IF EXISTS "public"."t_a_c_b_key"`, tp.Phases[0].SQL[0])
			}},
		{name: "a table that does not exist is one create phase", want: declared, check: func(t *testing.T, tp *core.TablePlan) {
			require.Equal(t, []string{"shape:create"}, phaseNames(tp))
			require.Equal(t, ops.LockCatalog, tp.Phases[0].Lock)
		}},
	})
}

func column(t *schema.Table, name string) *schema.Column {
	c, _ := t.Column(name)
	return c
}
